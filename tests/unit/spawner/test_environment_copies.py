"""Copies of an environment's mount namespace made ahead of need
(spawner/environments.py): a copy is a namespace of its own, with the
environment's mounts and their file systems shared (a file one spawn leaves
in the environment's tmpfs is there for the next), and a mount made in a
copy stays in it."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hostcapd import childsetup
from hostcapd.spawner.environments import Environment

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")

MS_NODEV = 4


def _in(fd: int, *argv: str) -> str:
    """Run argv in the mount namespace `fd` (nsenter, a separate process)."""
    return subprocess.run(
        ["nsenter", f"--mount=/proc/{os.getpid()}/fd/{fd}", *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@needs_root
def test_a_copy_shares_the_environments_file_systems_but_not_its_mounts() -> None:
    where = Path(tempfile.mkdtemp(prefix="hostcap-envcopy-"))
    inner = where / "inner"
    inner.mkdir()
    tmpfs: childsetup.Mount = (0, b"tmpfs", bytes(where), b"tmpfs", MS_NODEV, b"mode=0755", 0)
    env = Environment(mntns=childsetup.mount_namespace([tmpfs]))
    try:
        env.fill_copy()
        assert not env.copy_failed
        assert not env.wants_copy  # one is kept ready
        copy = env.take_copy()
        assert copy >= 0 and env.take_copy() == -1
        try:
            assert os.fstat(copy).st_ino != os.fstat(env.mntns).st_ino  # a namespace of its own
            # The environment's tmpfs, the same file system in the copy.
            _in(env.mntns, "sh", "-c", f"echo shared > {where}/file")
            assert _in(copy, "cat", f"{where}/file") == "shared\n"
            assert not (where / "file").exists()  # not the host's directory
            # A mount in the copy is the copy's alone.
            _in(copy, "mount", "-t", "tmpfs", "tmpfs", str(where))
            assert _in(copy, "ls", str(where)) == ""
            assert _in(env.mntns, "cat", f"{where}/file") == "shared\n"
        finally:
            os.close(copy)
    finally:
        env.close()
        assert env.copies == [] and env.mntns == -1
        inner.rmdir()
        where.rmdir()


@needs_root
def test_a_copy_that_cannot_be_made_is_said_and_not_tried_again() -> None:
    env = Environment(mntns=os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
    try:
        env.fill_copy()  # not a mount namespace: setns refuses
        assert env.copy_failed and env.copies == []
        assert not env.wants_copy
    finally:
        env.close()
