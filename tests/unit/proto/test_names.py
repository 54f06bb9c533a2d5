"""The wire's vocabulary (`hostcap_proto.names`) is the generated code's, and
every side uses the one definition."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from hostcap_proto import names
from hostcap_proto.audit import models
from hostcap_proto.v1 import common_pb2

REPO = Path(__file__).resolve().parents[3]


def _enum_names(enum: object) -> list[str]:
    return [v.name for v in enum.DESCRIPTOR.values if v.number != 0]  # type: ignore[attr-defined]


def test_outcome_is_the_wire_outcome_enum_and_every_side_uses_it() -> None:
    from hostcap.host import Outcome as ClientOutcome
    from hostcapd.process.report import Outcome as DaemonOutcome

    assert [o.value for o in names.Outcome] == _enum_names(common_pb2.Outcome)
    assert list(names.OUTCOMES) == _enum_names(common_pb2.Outcome)
    assert ClientOutcome is names.Outcome
    assert DaemonOutcome is names.Outcome
    assert models.ProcessExit.model_fields["outcome"].annotation == names.OutcomeName


def test_protection_names_are_the_wires_and_every_side_uses_them() -> None:
    from hostcapd import config
    from hostcapd.applied import Applied
    from hostcapd.bridge import messages
    from hostcapd.sandbox.profile import ProtectionStatus

    # hostcap.v1.Protection.name documents the spawn's protections (a string
    # field: the comment is the contract).
    proto = (REPO / "proto" / "hostcap_proto" / "v1" / "common.proto").read_text()
    documented = re.search(r"// Stable name: (.*?)\.\n\s*string name = 1;", proto, re.S)
    assert documented is not None
    listed = [n.strip() for n in re.sub(r"\s*//\s*", " ", documented.group(1)).split(",")]
    assert listed == list(names.SPAWN_PROTECTIONS)
    assert config.PROTECTION_NAMES is names.SPAWN_PROTECTIONS
    assert ProtectionStatus.__annotations__["name"] == "SpawnProtectionName"
    assert Applied.__annotations__["name"] == "HelperProtectionName"
    # The channel carries both: a spawn's (Started, Capabilities) and a helper's.
    assert messages.Protection.__annotations__["name"] == "ProtectionName"
    assert models.Protection.model_fields["name"].annotation == names.ProtectionName
    assert {
        n for part in get_args(names.ProtectionName) for n in get_args(part)
    } == names.PROTECTIONS


def test_refusal_reasons_are_the_wire_error_reason_enum() -> None:
    from hostcap_proto import errors
    from hostcapd import errors as daemon_errors

    assert list(names.REASONS) == _enum_names(common_pb2.ErrorReason)
    assert frozenset(names.REASONS) == errors.REASONS
    assert set(errors.STATUS_CODE) == set(names.REASONS)
    assert daemon_errors.Refusal.__init__.__annotations__["reason"] == "RefusalReason"
    assert not set(names.TRANSPORT_REASONS) & set(names.REASONS)


def test_rusage_fields_are_the_wire_rusage_message_and_the_audit_records() -> None:
    wire = [f.name for f in common_pb2.Rusage.DESCRIPTOR.fields]
    assert list(names.Rusage._fields) == wire
    assert list(models.Rusage.model_fields) == wire
    usage = names.Rusage.from_wait4(1.5, 0.25, 4, 1, 2, 3, 4)
    assert usage.max_rss_bytes == 4096
    assert common_pb2.Rusage(**usage._asdict()).max_rss_bytes == 4096
    assert models.Rusage(**usage._asdict()).model_dump() == usage._asdict()


def test_the_clients_host_reasons_are_the_wires_and_its_own() -> None:
    from hostcap.errors import CLIENT_HOST_REASONS, HOST_REASONS, host_reason

    assert set(HOST_REASONS) == set(names.REASONS) | CLIENT_HOST_REASONS
    assert host_reason("PATH_ESCAPES_ROOT") == "PATH_ESCAPES_ROOT"
    assert host_reason("A_NEWER_DAEMONS_REASON") == "HOST_FAILURE"
