"""Landlock: a ruleset fd built once per tenant, applied by the child.

Not implemented yet: probe() reports landlock unavailable, so a tenant that
requires it is refused (fail closed) and --dev runs without it, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LandlockSupport:
    #: ABI version the kernel offers; 0 when landlock cannot be used.
    abi: int
    reason: str


@dataclass(frozen=True)
class LandlockRules:
    read_write: tuple[Path, ...]
    read_only: tuple[Path, ...]
    read_exec: tuple[Path, ...]
    #: Device nodes children may read and write (/dev/null, /dev/zero, ...).
    dev_files: tuple[Path, ...]
    #: Deny TCP bind/connect (ABI >= 4).
    restrict_tcp: bool
    #: Scope abstract unix sockets and signals to the sandbox (ABI >= 6).
    scope: bool


def probe() -> LandlockSupport:
    return LandlockSupport(0, "not implemented yet in hostcapd")


def build_ruleset(rules: LandlockRules, abi: int) -> int:
    raise NotImplementedError("landlock is not implemented yet")
