"""Text or binary, and the media type, of returned content."""

from __future__ import annotations

from hostcapd.fs.content import is_text, sniff


def test_utf8_without_nul_is_text() -> None:
    assert (
        sniff("héllo wörld\n".encode(), "notes.txt", cut_start=False, cut_end=False).is_binary
        is False
    )


def test_a_nul_byte_makes_it_binary() -> None:
    assert sniff(b"abc\0def", "x.txt", cut_start=False, cut_end=False).is_binary is True


def test_latin1_bytes_are_binary() -> None:
    assert (
        sniff("café".encode("latin-1"), "x.txt", cut_start=False, cut_end=False).is_binary is True
    )


def test_a_character_split_at_the_cut_edges_is_still_text() -> None:
    data = "aé€b".encode()  # é is 2 bytes, € is 3
    assert is_text(data[:4], cut_start=False, cut_end=True)  # ends inside €
    assert is_text(data[2:], cut_start=True, cut_end=False)  # starts inside é
    assert not is_text(data[:4], cut_start=False, cut_end=False)  # a whole file cannot end so


def test_media_types_from_magic_then_extension() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    assert sniff(png, "picture.bin", cut_start=False, cut_end=False).media_type == "image/png"
    assert (
        sniff(b"print(1)\n", "main.py", cut_start=False, cut_end=False).media_type
        == "text/x-python"
    )
    assert (
        sniff(b'{"a": 1}', "data.json", cut_start=False, cut_end=False).media_type
        == "application/json"
    )
    assert (
        sniff(b"# title\n", "README.md", cut_start=False, cut_end=False).media_type
        == "text/markdown"
    )
    assert (
        sniff(b"\x00\x01\x02", "blob", cut_start=False, cut_end=False).media_type
        == "application/octet-stream"
    )
    assert (
        sniff(b"plain words", "LICENSE", cut_start=False, cut_end=False).media_type == "text/plain"
    )


def test_an_extension_that_contradicts_the_content_is_not_believed() -> None:
    assert (
        sniff(b"\x00\xff\x00", "fake.json", cut_start=False, cut_end=False).media_type
        == "application/octet-stream"
    )
    assert (
        sniff(b"just text", "fake.pdf", cut_start=False, cut_end=False).media_type == "text/plain"
    )
