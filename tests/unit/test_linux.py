"""hostcapd.linux: each wrapper makes the real call and fails as the os
module does, OSError with the kernel's errno (the callers' messages and
refusals are built on it)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hostcapd import linux


def test_openat2_beneath_refuses_to_climb_out(tmp_path: Path) -> None:
    (tmp_path / "inside").write_text("x")
    root = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = linux.openat2(root, "inside", os.O_RDONLY, linux.BENEATH)
        assert os.read(fd, 1) == b"x"
        assert os.get_inheritable(fd) is False  # O_CLOEXEC always
        os.close(fd)
        with pytest.raises(OSError) as raised:
            linux.openat2(root, "../" + tmp_path.name + "/inside", os.O_RDONLY, linux.BENEATH)
        assert raised.value.errno == errno.EXDEV
    finally:
        os.close(root)


def test_renameat2_noreplace_keeps_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    d = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as raised:
            linux.renameat2(d, "a", d, "b", linux.RENAME_NOREPLACE)
        assert raised.value.errno == errno.EEXIST
        assert (tmp_path / "b").read_text() == "b"
    finally:
        os.close(d)


def test_a_failed_call_raises_oserror_with_its_errno() -> None:
    with pytest.raises(OSError) as raised:
        linux.setns(-1, 0)
    assert raised.value.errno == errno.EBADF
    assert raised.value.strerror == os.strerror(errno.EBADF)
    with pytest.raises(OSError) as raised:
        linux.landlock_add_rule(-1, 1, None)  # type: ignore[arg-type]
    assert raised.value.errno in (errno.EBADF, errno.ENOSYS, errno.EOPNOTSUPP)
