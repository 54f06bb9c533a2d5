"""Text or binary, and the media type, of returned content."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hostcapd.fs.content import is_text, read_range, sniff


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


@pytest.mark.parametrize(
    ("size", "offset", "max_bytes", "data", "truncated"),
    [
        (4096, 0, 1 << 20, (0, 4096), False),  # the whole file
        (4096, 0, 4096, (0, 4096), False),  # exactly the ceiling
        (4096, 0, 4095, (0, 4095), True),  # one byte short of it
        (4096, 100, 1 << 20, (100, 4096), False),  # the rest from an offset
        (4096, 100, 50, (100, 150), True),  # a range inside
        (4096, 4096, 10, (0, 0), False),  # at the end
        (4096, 5000, 10, (0, 0), False),  # past it
        (0, 0, 10, (0, 0), False),  # empty
    ],
)
def test_a_range_and_whether_the_file_goes_on(
    tmp_path: Path,
    size: int,
    offset: int,
    max_bytes: int,
    data: tuple[int, int],
    truncated: bool,
) -> None:
    content = os.urandom(size)
    (tmp_path / "f").write_bytes(content)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        for st in (None, os.fstat(fd)):
            result = read_range(fd, offset, max_bytes, "f", st)
            assert result.data == content[data[0] : data[1]]
            assert result.truncated is truncated
            assert result.size == max(size, offset)  # (past the end: the offset)
            assert result.sha256 == hashlib.sha256(result.data).hexdigest()
            whole = offset == 0 and not truncated
            assert result.file_sha256 == (result.sha256 if whole else "")
    finally:
        os.close(fd)


def test_a_file_that_grew_since_its_stat_is_reported_truncated(tmp_path: Path) -> None:
    """The size the check saw is what is read; a byte past it (the file grew
    meanwhile) makes the answer truncated, and never longer."""
    path = tmp_path / "f"
    path.write_bytes(b"a" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        checked = os.fstat(fd)
        with path.open("ab") as more:
            more.write(b"b" * 10)
        result = read_range(fd, 0, 1 << 20, "f", checked)
        assert result.data == b"a" * 100
        assert result.truncated is True
        assert result.size == 110
        assert result.file_sha256 == ""
        # At an offset too, and where the ceiling is the old size exactly.
        result = read_range(fd, 40, 60, "f", checked)
        assert (result.data, result.truncated) == (b"a" * 60, True)
    finally:
        os.close(fd)


def test_a_file_that_shrank_since_its_stat_reads_what_is_left(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        checked = os.fstat(fd)
        os.truncate(path, 40)
        result = read_range(fd, 0, 1 << 20, "f", checked)
        assert (result.data, result.truncated, result.size) == (b"a" * 40, False, 40)
        assert result.file_sha256 == result.sha256
        result = read_range(fd, 60, 1 << 20, "f", checked)  # now past the end
        assert (result.data, result.truncated, result.size) == (b"", False, 60)
    finally:
        os.close(fd)
