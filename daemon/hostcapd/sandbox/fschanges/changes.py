"""What one spawn changed (decision 0030): each path once with the kinds of
change it saw, at most `cap` paths; events on further paths are counted by
kind, exactly."""

from __future__ import annotations

from dataclasses import dataclass, field

from hostcapd.sandbox.fschanges.fanotify import (
    FAN_CREATE,
    FAN_DELETE,
    FAN_MODIFY,
    FAN_MOVED_FROM,
    FAN_MOVED_TO,
    FAN_ONDIR,
)

#: The kinds of change, in the order a record lists them.
KINDS = ("created", "modified", "deleted", "renamed_from", "renamed_to")
_KIND_BITS = {
    FAN_CREATE: 1,
    FAN_MODIFY: 2,
    FAN_DELETE: 4,
    FAN_MOVED_FROM: 8,
    FAN_MOVED_TO: 16,
}
_DIR_BIT = 32
#: The kinds named by each combination of kind bits.
_KINDS_OF = tuple(
    tuple(kind for i, kind in enumerate(KINDS) if bits & (1 << i)) for bits in range(32)
)
#: Kind bits (and _DIR_BIT) of each event mask seen.
_BITS: dict[int, int] = {}


def _bits(mask: int) -> int:
    bits = _DIR_BIT if mask & FAN_ONDIR else 0
    for fan_bit, kind_bit in _KIND_BITS.items():
        if mask & fan_bit:
            bits |= kind_bit
    return bits


def bits_of(mask: int) -> int:
    """The kind bits (and _DIR_BIT) of an event mask, remembered per mask."""
    bits = _BITS.get(mask)
    if bits is None:
        bits = _BITS[mask] = _bits(mask)
    return bits


@dataclass
class Changes:
    """What one spawn changed: at most `cap` paths, the rest counted."""

    cap: int
    #: path -> kind bits (and _DIR_BIT).
    paths: dict[str, int] = field(default_factory=dict)
    #: Events on paths beyond the cap, by kind.
    beyond: dict[str, int] = field(default_factory=dict)
    #: Events whose path could not be named (its directory was gone).
    unresolved: int = 0
    #: Overflows and unattributed events while it ran (set by finish).
    queue_overflows: int = 0
    unattributed: int = 0
    tracking: bool = True

    def add(self, path: str, bits: int) -> None:
        paths = self.paths
        old = paths.get(path)
        if old is not None:
            paths[path] = old | bits
        elif len(paths) < self.cap:
            paths[path] = bits
        else:
            beyond = self.beyond
            for kind in _KINDS_OF[bits & 31]:
                beyond[kind] = beyond.get(kind, 0) + 1

    def listed(self) -> list[tuple[str, list[str], bool]]:
        """(path, kinds, is a directory), sorted by path."""
        kinds_of = _KINDS_OF
        return [
            (path, list(kinds_of[bits & 31]), bool(bits & _DIR_BIT))
            for path, bits in sorted(self.paths.items())
        ]
