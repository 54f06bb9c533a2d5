"""A spawn's change list is bounded: at most `cap` paths, each once with
every kind of change it saw; changes to further paths are counted by kind,
exactly, and a path already listed still gains kinds past the cap."""

from __future__ import annotations

from hostcapd.sandbox.fschanges import (
    FAN_CREATE,
    FAN_DELETE,
    FAN_MODIFY,
    FAN_MOVED_FROM,
    FAN_ONDIR,
    Changes,
)
from hostcapd.sandbox.fschanges.changes import _bits


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
