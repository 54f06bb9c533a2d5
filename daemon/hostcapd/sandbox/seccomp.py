"""seccomp: a BPF deny-list program compiled once, loaded by the child.

Not implemented yet: probe() reports seccomp unavailable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeccompSupport:
    available: bool
    reason: str


def probe() -> SeccompSupport:
    return SeccompSupport(False, "not implemented yet in hostcapd")


def build_filter() -> bytes:
    raise NotImplementedError("seccomp is not implemented yet")
