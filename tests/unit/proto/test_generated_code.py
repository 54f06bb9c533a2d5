"""The committed generated code matches the .proto sources (run `make proto`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GENERATED = REPO / "proto" / "hostcap_proto" / "v1"


def _generate_into(out: Path) -> None:
    spec = importlib.util.spec_from_file_location("proto_generate", REPO / "proto" / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(out)


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    _generate_into(tmp_path)
    fresh = sorted(
        p.relative_to(tmp_path / "hostcap_proto" / "v1")
        for p in (tmp_path / "hostcap_proto" / "v1").glob("*_pb2*")
    )
    committed = sorted(p.relative_to(GENERATED) for p in GENERATED.glob("*_pb2*"))
    assert fresh == committed, "generated files differ from the committed set: run `make proto`"
    stale = [
        str(p)
        for p in fresh
        if (tmp_path / "hostcap_proto" / "v1" / p).read_bytes() != (GENERATED / p).read_bytes()
    ]
    assert not stale, f"stale generated code, run `make proto`: {stale}"


def test_every_error_reason_has_a_status_code() -> None:
    from hostcap_proto import errors
    from hostcap_proto.v1 import common_pb2

    names = {n for n in common_pb2.ErrorReason.keys() if n != "ERROR_REASON_UNSPECIFIED"}  # noqa: SIM118
    assert names == set(errors.STATUS_CODE) == errors.REASONS


def test_a_refusal_round_trips_through_a_grpc_status() -> None:
    import grpc
    from hostcap_proto.errors import WireError, from_rpc_error

    status = WireError("PATH_ESCAPES_ROOT", "cwd resolves outside", {"k": "v"}).to_status()

    class Failed(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return status.code

        def details(self) -> str:
            return status.details

        def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
            return status.trailing_metadata

    wire = from_rpc_error(Failed())
    assert wire == WireError("PATH_ESCAPES_ROOT", "cwd resolves outside", {"k": "v"})
    assert status.code == grpc.StatusCode.PERMISSION_DENIED
