"""What a query's filters may name, for the daemon's QueryAudit and
hostcapctl's files alike: a filter no record could match is an error that
lists the values that could (issue 33), never an empty answer."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from hostcap_proto.audit.schema import EVENTS

#: Candidates an ambiguous spawn prefix lists, at most.
MAX_CANDIDATES = 20


class FilterError(ValueError):
    """A filter value no record could match; the message lists the valid ones."""


def check_event(pattern: str) -> str:
    """`pattern` (an event name or a glob) if it names at least one event."""
    if not fnmatch.filter(EVENTS, pattern):
        raise FilterError(f"unknown event {pattern!r}: valid events are {', '.join(EVENTS)}")
    return pattern


def tenants_of(record: Mapping[str, Any]) -> list[str]:
    """The tenants a record names: its own, or the config's in daemon.*."""
    named = [record["tenant"]] if isinstance(record.get("tenant"), str) else []
    tenants = record.get("tenants")
    if isinstance(tenants, list):
        named += [t for t in tenants if isinstance(t, str)]
    return named


def unknown_tenant(tenant: str, known: Iterable[str]) -> FilterError:
    """The error for a --tenant that no record names (and no config had)."""
    valid = ", ".join(sorted(set(known))) or "(none: the log names no tenant)"
    return FilterError(f"unknown tenant {tenant!r}: valid tenants are {valid}")


def resolve_spawn(prefix: str, spawn_ids: Iterable[str]) -> str:
    """The one spawn id of `spawn_ids` that is `prefix` or starts with it.
    None or several is a FilterError (several: the candidates listed)."""
    candidates = sorted({s for s in spawn_ids if s.startswith(prefix)})
    if prefix in candidates:
        return prefix
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise FilterError(f"no spawn id in the log starts with {prefix!r}")
    listed = ", ".join(candidates[:MAX_CANDIDATES])
    more = (
        f" and {len(candidates) - MAX_CANDIDATES} more" if len(candidates) > MAX_CANDIDATES else ""
    )
    raise FilterError(
        f"spawn id prefix {prefix!r} is ambiguous: {len(candidates)} spawns match: {listed}{more}"
    )
