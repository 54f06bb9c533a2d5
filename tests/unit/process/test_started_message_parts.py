"""The Started and Exited messages' shared parts: built once per profile's
statuses and per merged limits model, equal to a fresh build every time."""

from __future__ import annotations

from hostcapd.config import Limits
from hostcapd.sandbox.profile import ProtectionStatus
from hostcapd.service import convert


def test_protections_are_built_once_per_statuses_tuple_and_equal_a_fresh_build() -> None:
    statuses = (
        ProtectionStatus("seccomp", True, "", True),
        ProtectionStatus("landlock", False, "off in the tenant's profile", False),
    )
    first = convert._protections_of(statuses)
    assert first == convert.protections_message(statuses)
    assert convert._protections_of(statuses) is first
    # An equal tuple of another profile is its own entry, with equal messages.
    other = tuple(ProtectionStatus(s.name, s.applied, s.reason, s.required) for s in statuses)
    assert convert._protections_of(other) is not first
    assert convert._protections_of(other) == first
    changed = (*statuses[:1], ProtectionStatus("landlock", True, "", True))
    assert convert._protections_of(changed) == convert.protections_message(changed)
    assert convert._protections_of(changed) != first


def test_limits_are_built_once_per_model_and_equal_a_fresh_build() -> None:
    limits = Limits(wall_seconds=5.0, memory_bytes=64 << 20, pids=16)
    first = convert._limits_of(limits)
    assert first == convert.limits_message(limits)
    assert convert._limits_of(limits) is first
    other = Limits(wall_seconds=6.0, memory_bytes=64 << 20, pids=16)
    assert convert._limits_of(other) == convert.limits_message(other) != first
