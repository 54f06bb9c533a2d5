"""A read's content and what it is: text or binary, and its media type.

    result = read_range(fd, offset=0, max_bytes=1 << 20, name="main.py")
    sniff(b"print('hi')\\n", "main.py", cut_start=False, cut_end=False)
    # -> Sniffed(is_binary=False, media_type="text/x-python")

`read_range` runs on a file the fs worker opened and checked as the
tenant (it resolves nothing: the fd is the authority): in the worker for a
read its front-end asked directly (decision 0034), in the daemon for a
relayed one.

Text means: no NUL byte and valid UTF-8, allowing one character split at
either edge when the chunk was cut out of a larger file (an offset or a
max_bytes boundary can fall inside a multi-byte character). Anything else is
binary. The media type comes from magic bytes for binary content, else from
the file name's extension (Python's built-in table only, so the answer does
not depend on this host's /etc/mime.types), else text/plain or
application/octet-stream.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import mimetypes
import os
import stat
from typing import NamedTuple

#: Magic bytes of common binary formats, checked in order.
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"\x7fELF", "application/x-executable"),
    (b"\x00asm", "application/wasm"),
    (b"SQLite format 3\x00", "application/vnd.sqlite3"),
)

#: MAGIC by its first byte, in the same order: a binary read tries only
#: the formats its first byte can begin.
_MAGIC_BY_FIRST: dict[bytes, tuple[tuple[bytes, str], ...]] = {}
for _magic in MAGIC:
    _MAGIC_BY_FIRST[_magic[0][:1]] = (*_MAGIC_BY_FIRST.get(_magic[0][:1], ()), _magic)
del _magic

#: Source and config files the built-in table lacks or gets wrong.
EXTRA_TYPES: dict[str, str] = {
    ".md": "text/markdown",
    ".toml": "application/toml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".ts": "text/x-typescript",
    ".tsx": "text/x-typescript",
    ".rs": "text/x-rust",
    ".go": "text/x-go",
    ".proto": "text/x-protobuf",
    ".sh": "text/x-shellscript",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".lock": "text/plain",
}


@functools.cache
def _types() -> mimetypes.MimeTypes:
    """The extension table, built on first use (a few hundred KiB the daemon
    does not hold while no file is read). filenames=(): Python's defaults
    only, independent of the host's tables."""
    types = mimetypes.MimeTypes(filenames=())
    for ext, type_ in EXTRA_TYPES.items():
        types.add_type(type_, ext)
    return types


@functools.lru_cache(maxsize=256)
def _guessed(name: str) -> str | None:
    """The extension table's type for `name` (a few names, read again and
    again: remembered; at most 256 of them, each under NAME_MAX bytes)."""
    guessed, _ = _types().guess_type(name, strict=False)
    return guessed


_TEXTUAL_APPLICATION = frozenset(
    {
        "application/json",
        "application/javascript",
        "application/toml",
        "application/yaml",
        "application/xml",
        "application/x-sh",
        "application/sql",
    }
)


class Sniffed(NamedTuple):
    is_binary: bool
    media_type: str


def is_text(data: bytes | bytearray, cut_start: bool, cut_end: bool) -> bool:
    if b"\0" in data:
        return False
    if cut_start:
        # skip continuation bytes of a character that began before the offset
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    if data.isascii():  # valid UTF-8 as it is (and no character to cut)
        return True
    try:
        # What utf-8's incremental decoder does in its one call (`final`:
        # a character cut at the end is an error unless the end was cut).
        codecs.utf_8_decode(data, "strict", not cut_end)
    except UnicodeDecodeError:
        return False
    return True


def sniff(data: bytes | bytearray, name: str, cut_start: bool, cut_end: bool) -> Sniffed:
    binary = not is_text(data, cut_start, cut_end)
    if binary and not cut_start:
        for magic, media_type in _MAGIC_BY_FIRST.get(bytes(data[:1]), ()):
            if data.startswith(magic):
                return Sniffed(True, media_type)
    guessed = _guessed(name)
    if guessed is not None:
        textual = (
            guessed.startswith("text/")
            or guessed in _TEXTUAL_APPLICATION
            or guessed.endswith(("+xml", "+json"))
        )
        if textual == (not binary):
            return Sniffed(binary, guessed)
    return Sniffed(binary, "application/octet-stream" if binary else "text/plain")


class ReadResult(NamedTuple):
    """A range of a file, and the facts ReadFileResponse reports about it
    (a named tuple: made once a read, where a frozen dataclass's fields are
    set one `object.__setattr__` at a time)."""

    data: bytes
    #: Size of the whole file (at least what was read, if it grew meanwhile).
    size: int
    offset: int
    #: The file continues past the range.
    truncated: bool
    is_binary: bool
    media_type: str
    sha256: str
    #: sha256 of the whole file, "" unless the range was the whole file.
    file_sha256: str


class NotRegularFile(Exception):
    """The fd is not a regular file (never read: a FIFO would block)."""


def read_range(
    fd: int, offset: int, max_bytes: int, name: str, st: os.stat_result | None = None
) -> ReadResult:
    """Up to `max_bytes` at `offset` of the regular file `fd`, with its hashes,
    whether it continues (one byte more is read, so a file that grew is
    reported truncated) and what it is. Raises OSError from the kernel.
    `st`: the fd's inode's stat taken when it was checked (else asked here)."""
    if st is None:
        st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile("not a regular file")
    left = max(st.st_size - offset, 0)
    want = min(max_bytes, left)
    # Where the rest of the file fits, the byte past it is asked in the same
    # read: whether it comes says whether the file goes on (it grew).
    ask = want + 1 if left <= max_bytes else want
    data = os.pread(fd, ask, offset)
    got = len(data)
    if got > want:
        data = data[:want]
    while len(data) < want:  # a short read before EOF: rare, finish it
        more = os.pread(fd, want - len(data), offset + len(data))
        if not more:
            break
        data += more
    if ask > want and got >= want:
        truncated = got > want
    else:  # one byte more is probed
        truncated = bool(os.pread(fd, 1, offset + len(data)))
    if ask > want and got == want:
        # The read ended at the end of the file: that is its size (past the
        # end, the offset).
        size = offset + want
    else:
        size = max(os.fstat(fd).st_size, offset + len(data) + (1 if truncated else 0))
    digest = hashlib.sha256(data).hexdigest()
    sniffed = sniff(data, name, cut_start=offset > 0, cut_end=truncated)
    return ReadResult(
        data=data,
        size=size,
        offset=offset,
        truncated=truncated,
        is_binary=sniffed.is_binary,
        media_type=sniffed.media_type,
        sha256=digest,
        file_sha256=digest if offset == 0 and not truncated else "",
    )
