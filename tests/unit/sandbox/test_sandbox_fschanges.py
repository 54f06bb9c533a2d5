"""A spawn's change list is bounded: at most `cap` paths, each once with
every kind of change it saw; changes to further paths are counted by kind,
exactly, and a path already listed still gains kinds past the cap."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hostcapd.sandbox.fschanges import (
    FAN_CREATE,
    FAN_DELETE,
    FAN_MODIFY,
    FAN_MOVED_FROM,
    FAN_ONDIR,
    Changes,
)
from hostcapd.sandbox.fschanges.changes import _bits, bits_of


def test_the_list_is_capped_and_what_is_beyond_is_counted_exactly() -> None:
    changes = Changes(cap=3)
    create, modify, delete = _bits(FAN_CREATE), _bits(FAN_MODIFY), _bits(FAN_DELETE)
    for i in range(100_000):
        changes.add(f"/w/f{i}", create)
        changes.add(f"/w/f{i}", delete)
    changes.add("/w/f0", modify)  # listed: gains the kind
    assert len(changes.paths) == 3
    assert changes.listed() == [
        ("/w/f0", ["created", "modified", "deleted"], False),
        ("/w/f1", ["created", "deleted"], False),
        ("/w/f2", ["created", "deleted"], False),
    ]
    assert changes.beyond == {"created": 99_997, "deleted": 99_997}


def test_a_directory_and_a_rename_are_named() -> None:
    changes = Changes(cap=10)
    changes.add("/w/d", _bits(FAN_CREATE | FAN_ONDIR))
    changes.add("/w/a", _bits(FAN_MOVED_FROM))
    assert changes.listed() == [("/w/a", ["renamed_from"], False), ("/w/d", ["created"], True)]


def test_describe_measures_files_beneath_their_root_and_follows_no_symlink(
    tmp_path: Path,
) -> None:
    """Sizes and hashes of the files a spawn left, read by the daemon as root:
    a symlink (the file itself, or a directory on its path) pointing outside
    the root is never followed, a fifo is never opened, and a path beneath
    no root is not read. The control: the same secret through no symlink is
    measured."""
    from hostcapd.sandbox.fschanges import describe

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_bytes(b"s" * 77)
    (root / "sub" / "plain").write_bytes(b"hello")
    (root / "top").write_bytes(b"x" * 10)
    (root / "link").symlink_to(outside / "secret")
    (root / "dirlink").symlink_to(outside)
    os.mkfifo(root / "fifo")
    changes = Changes(100)
    created = bits_of(FAN_CREATE | FAN_MODIFY)
    for path in (
        root / "sub" / "plain",
        root / "top",
        root / "link",
        root / "dirlink" / "secret",
        root / "fifo",
        outside / "secret",
        root / "gone",
    ):
        changes.add(str(path), created)
    listed = {e["path"]: e for e in describe(changes, (root,), True, 1 << 20)}
    hello = hashlib.sha256(b"hello").hexdigest()
    assert listed[str(root / "sub" / "plain")] == {
        "path": str(root / "sub" / "plain"), "kinds": ["created", "modified"],
        "size": 5, "sha256": hello,
    }  # fmt: skip
    assert listed[str(root / "top")]["size"] == 10
    for unread in ("link", "dirlink/secret", "fifo", "gone"):
        assert set(listed[str(root / unread)]) == {"path", "kinds"}, unread
    assert set(listed[str(outside / "secret")]) == {"path", "kinds"}
    # Sizes without hashes.
    sized = {e["path"]: e for e in describe(changes, (root,), True, 0)}
    assert sized[str(root / "sub" / "plain")] == {
        "path": str(root / "sub" / "plain"), "kinds": ["created", "modified"], "size": 5,
    }  # fmt: skip
    # The control: the outside secret is measured when its own dir is a root.
    direct = {e["path"]: e for e in describe(changes, (root, outside), True, 1 << 20)}
    assert direct[str(outside / "secret")]["size"] == 77
