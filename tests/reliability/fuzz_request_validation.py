"""atheris target: the daemon's request decoding and validation, in process.

    python tests/reliability/fuzz_request_validation.py -runs=20000 -max_total_time=20

Each input is one wire message (its first byte picks which): a SpawnRequest
goes through what the front-end does before anything runs (decode, convert,
argv / limits / env / cwd / executable checks), a file request's path through
the fs scope's lexical location. Each step must either pass or refuse with a
typed reason of the wire contract; any other exception is a crash, which
atheris reports with the input that caused it (non-zero exit).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris  # type: ignore[import-untyped]

# Only our code is instrumented (grpc and protobuf would take most of the run).
with atheris.instrument_imports(include=["hostcapd", "hostcap_proto"]):
    from google.protobuf.message import DecodeError
    from hostcap_proto.errors import REASONS
    from hostcap_proto.v1 import fs_pb2, process_pb2
    from hostcapd.bridge import messages
    from hostcapd.config import parse_config
    from hostcapd.errors import Refusal
    from hostcapd.frontend.convert import request_of
    from hostcapd.fs.scope import FsScope, RootSpec
    from hostcapd.process import environment, executable
    from hostcapd.process import limits as limits_mod
    from hostcapd.process.request import resolve_cwd, validate_argv
    from hostcapd.service.convert import spawn_request as request_from_call
    from msgspec import ValidationError

STATE = Path(tempfile.mkdtemp(prefix="hostcap-fuzz-"))
WORKSPACE, REFERENCE = STATE / "workspace", STATE / "reference"
for root in (WORKSPACE, REFERENCE, WORKSPACE / "sub"):
    root.mkdir(parents=True, exist_ok=True)
MiB, GiB = 1 << 20, 1 << 30
TENANT = parse_config(
    {
        "daemon": {"state_dir": str(STATE), "runtime_dir": str(STATE / "run")},
        "audit": {"path": str(STATE / "audit.jsonl")},
        "tenants": {
            "fuzz": {
                "socket": str(STATE / "fuzz.sock"),
                "run_as_user": 65534,
                "run_as_group": 65534,
                "roots": [
                    {"path": str(WORKSPACE), "tier": "read-write"},
                    {"path": str(REFERENCE), "tier": "read-only"},
                ],
                "env": {"LANG": "C.UTF-8"},
                "env_allowlist": ["LANG", "TZ", "GREETING"],
                "limits": {
                    "default": {"output_bytes": MiB, "wall_seconds": 60},
                    "ceiling": {
                        "cpu_seconds": 600, "wall_seconds": 600, "memory_bytes": 4 * GiB,
                        "pids": 1024, "output_bytes": 64 * MiB, "total_output_bytes": 256 * MiB,
                        "file_size_bytes": GiB, "open_files": 4096,
                    },
                },
            }
        },
    }
).tenants[0]  # fmt: skip
SCOPE = FsScope([RootSpec(str(WORKSPACE), False), RootSpec(str(REFERENCE), True)])
HASHES = executable.HashCache()


def typed(reason: str, where: str) -> None:
    if reason not in REASONS:
        raise AssertionError(f"{where} refused with {reason!r}, not a reason of the wire contract")


def spawn_request(data: bytes) -> None:
    try:
        message = process_pb2.SpawnRequest.FromString(data)
    except DecodeError:
        return  # grpc answers these before the daemon sees them
    try:
        call, stdin = request_of(messages.SpawnCall, message)
    except (ValidationError, ValueError):
        return  # the front-end answers these (malformed) before the daemon sees them
    assert isinstance(call, messages.SpawnCall)
    request = request_from_call(call, stdin if call.payload else None)
    try:
        validate_argv(request.argv)
        limits_mod.apply(dict(request.limits), TENANT.limits)
        environment.build(TENANT, request.env)
        resolve_cwd(request.cwd, TENANT)
        executable.resolve(
            request.argv[0], TENANT.path, TENANT.allowed_executable_dirs, HASHES
        ).close()
    except Refusal as refusal:
        typed(refusal.reason, "spawn validation")


def file_request(data: bytes) -> None:
    try:
        message = fs_pb2.ReadFileRequest.FromString(data)
    except DecodeError:
        return
    try:
        SCOPE.locate(message.path)
    except Refusal as refusal:
        typed(refusal.reason, "fs scope")


def one_input(data: bytes) -> None:
    if not data:
        return
    (spawn_request if data[0] % 2 == 0 else file_request)(data[1:])


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
