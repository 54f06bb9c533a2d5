"""Hostile input against one real daemon: fuzzed requests (hypothesis),
pathological sizes, every limit at its edges, undecodable and oversized
protobuf bytes, broken HTTP/2. The daemon answers each with a typed error
(or a result), survives every broken connection, and leaves no process."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sized
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from hostcap_proto.errors import REASONS, STATUS_CODE, from_rpc_error
from hostcap_proto.v1 import common_pb2, fs_pb2, fs_pb2_grpc, process_pb2, process_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from raw_http2 import DATA, HEADERS, PING, SETTINGS, RawConnection, frame, grpc_message
from reliability_probes import (
    CLIENT_MAX_MESSAGE,
    audit_log,
    daemon_env,
    descendants,
    fd_kinds,
)
from support.daemon import (
    REPO,
    Daemon,
    MiB,
    cmdline,
    daemon_config,
    open_fds,
    tenant_config,
    wait_gone,
    waiting_warm_child,
)
from support.process import request

MARKER = f"hostcap-hostile-{os.getpid()}"
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
#: No request may make one audit line larger than this: argv is cut to
#: 64 KiB, env names come from the allowlist, the rest must be bounded too.
MAX_AUDIT_LINE = 256 * 1024


# ---- one daemon for the module -----------------------------------------------


@pytest.fixture(scope="module")
def hostile_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    state = tmp_path_factory.mktemp("hostile") / "state"
    state.mkdir()
    for p in (state, *state.parents):
        if p in (Path(tempfile.gettempdir()), Path("/")):
            break
        p.chmod(p.stat().st_mode | 0o711)
    config = daemon_config(state, {"dev": tenant_config(state, "dev")})
    daemon = Daemon(state, config, env=daemon_env(state)).start()
    yield daemon
    daemon.stop()
    assert wait_gone(MARKER, 2.0) == []


@pytest.fixture(scope="module")
def channel(hostile_daemon: Daemon) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(
        f"unix:{hostile_daemon.socket}",
        options=[
            ("grpc.max_receive_message_length", CLIENT_MAX_MESSAGE),
            ("grpc.max_send_message_length", CLIENT_MAX_MESSAGE),
        ],
    )
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def processes(channel: grpc.Channel) -> Any:
    return process_pb2_grpc.ProcessServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def files(channel: grpc.Channel) -> Any:
    """FsService; the tests using it skip while the daemon does not serve it."""
    stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
    try:
        stub.Stat(fs_pb2.StatRequest(path="."), timeout=30)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("hostcapd does not serve FsService yet")
        raise
    return stub


def answer(call: Any, message: Any, timeout: float = 30) -> tuple[str, Any]:
    """('ok', response) or (reason, error). Fails on an untyped error: no
    ErrorInfo, an unknown reason, or a status code that does not go with it."""
    try:
        return "ok", call(message, timeout=timeout)
    except grpc.RpcError as error:
        wire = from_rpc_error(error)
        assert wire is not None, f"untyped error {error.code()}: {error.details()}"
        assert wire.reason in REASONS
        assert error.code() == STATUS_CODE[wire.reason], (wire.reason, error.code())
        return wire.reason, error


def assert_serving(daemon: Daemon, processes: Any) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None, "the daemon died"
    result = processes.Run(request(["echo", "alive"]), timeout=30)
    assert (result.exited.outcome, result.stdout) == (common_pb2.EXITED, b"alive\n")


def with_marker(env: dict[str, str]) -> dict[str, str]:
    return {**env, "TEST_MARKER": MARKER}


# ---- strategies --------------------------------------------------------------

#: Text protobuf can carry (no lone surrogates), with NUL and controls.
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
path_part = st.one_of(
    st.sampled_from(["..", ".", "", "a", "sub", "x" * 255, "x" * 256, "é" * 130, "\0", "~", "-"]),
    text,
)
paths = st.builds(
    lambda absolute, parts: ("/" if absolute else "") + "/".join(parts),
    st.booleans(),
    st.lists(path_part, max_size=12),
)
argv0 = st.one_of(
    st.sampled_from(["true", "echo", "printf", "cat", "/bin/echo", "/usr/bin/true", "./x", ""]),
    text,
)
env_names = st.one_of(
    st.sampled_from(
        ["GREETING", "LANG", "TZ", "TEST_MARKER", "LD_PRELOAD", "PATH", "", "A=B", "BASH_ENV"]
    ),
    text,
)
seconds = st.one_of(
    st.sampled_from([0.0, -1.0, -0.0, 1e-12, 0.5, 2.0, 1e308, math.inf, -math.inf, math.nan]),
    st.floats(allow_nan=True, allow_infinity=True),
)
uint64 = st.one_of(
    st.sampled_from([0, 1, 4096, 1 << 31, 1 << 63, (1 << 64) - 1]), st.integers(0, (1 << 64) - 1)
)
uint32 = st.one_of(
    st.sampled_from([0, 1, 3, 1 << 31, (1 << 32) - 1]), st.integers(0, (1 << 32) - 1)
)
limits = st.fixed_dictionaries(
    {},
    optional={
        "cpu_seconds": seconds,
        "wall_seconds": seconds,
        "memory_bytes": uint64,
        "pids": uint32,
        "output_bytes": uint64,
        "file_size_bytes": uint64,
        "open_files": uint32,
        "total_output_bytes": uint64,
    },
)


def _spawn_request(
    a0: str,
    args: list[str],
    cwd: str,
    env: dict[str, str],
    lim: dict[str, Any],
    stdin: bytes | None,
    rid: str,
    dry: bool,
    labels: dict[str, str],
) -> process_pb2.SpawnRequest:
    extra: dict[str, Any] = {} if stdin is None else {"stdin": stdin}
    return request(
        [a0, *args],
        limits=lim,
        cwd=cwd,
        env=with_marker(env),
        request_id=rid,
        dry_run=dry,
        labels=labels,
        **extra,
    )


#: Anything at all: most of it is refused at one check or another.
wild_requests = st.builds(
    _spawn_request,
    argv0,
    st.lists(text, max_size=8),
    st.one_of(st.just(""), paths),
    st.dictionaries(env_names, text, max_size=3),
    limits,
    st.one_of(st.none(), st.binary(max_size=512)),
    text,
    st.booleans(),
    st.dictionaries(text, text, max_size=3),
)
#: Past validation, into the spawn: real commands, allowed names, limits
#: anywhere inside the ceiling (down to the absurdly small).
plausible_requests = st.builds(
    _spawn_request,
    st.sampled_from(["echo", "true", "false", "cat", "printf", "head"]),
    st.lists(text, max_size=8),
    st.sampled_from(["", ".", "/"]).map(lambda c: "" if c == "/" else c),
    st.dictionaries(st.sampled_from(["GREETING", "LANG", "TZ"]), text, max_size=3),
    st.fixed_dictionaries(
        {},
        optional={
            "cpu_seconds": st.floats(1e-9, 5),
            "wall_seconds": st.floats(1e-9, 5),
            "memory_bytes": st.integers(1, 1 << 32),
            "pids": st.integers(1, 1024),
            "output_bytes": st.integers(0, 1 << 20),
            "file_size_bytes": st.integers(1, 1 << 30),
            "open_files": st.integers(1, 4096),
            "total_output_bytes": st.integers(1, 1 << 28),
        },
    ),
    st.one_of(st.none(), st.binary(max_size=4096)),
    st.just(""),
    st.just(False),
    st.dictionaries(text, text, max_size=3),
)


# ---- fuzzed requests ---------------------------------------------------------


@FUZZ
@given(req=st.one_of(wild_requests, plausible_requests))
def test_fuzzed_spawn_requests_get_a_result_or_a_typed_refusal(
    hostile_daemon: Daemon, processes: Any, req: process_pb2.SpawnRequest
) -> None:
    kind, reply = answer(processes.Run, req)
    if kind == "ok" and not req.dry_run:
        exited = reply.exited
        event(f"{common_pb2.Outcome.Name(exited.outcome)} {exited.failed_step}".strip())
        assert exited.outcome != common_pb2.OUTCOME_UNSPECIFIED and exited.message
        # "daemon" is the step of the catch-all for a bug inside the daemon.
        assert exited.failed_step != "daemon", exited.message
    else:
        event(kind)
    assert hostile_daemon.proc is not None and hostile_daemon.proc.poll() is None


def test_fuzzed_spawns_left_no_process_and_the_daemon_serves(
    hostile_daemon: Daemon, processes: Any
) -> None:
    assert wait_gone(MARKER, 3.0) == []
    assert_serving(hostile_daemon, processes)


@FUZZ
@given(
    path=paths, data=st.binary(max_size=256), op=st.sampled_from(["read", "write", "stat", "list"])
)
def test_fuzzed_file_paths_get_a_result_inside_the_roots_or_a_typed_refusal(
    hostile_daemon: Daemon, files: Any, path: str, data: bytes, op: str
) -> None:
    calls = {
        "read": (files.ReadFile, fs_pb2.ReadFileRequest(path=path)),
        "write": (
            files.WriteFile,
            fs_pb2.WriteFileRequest(path=path, data=data, create_parents=True),
        ),
        "stat": (files.Stat, fs_pb2.StatRequest(path=path)),
        "list": (files.ListDirectory, fs_pb2.ListDirectoryRequest(path=path)),
    }
    call, message = calls[op]
    kind, reply = answer(call, message)
    event(f"{op}: {kind}")
    if kind == "ok":
        roots = [str(hostile_daemon.root(index=i)) for i in range(2)]
        assert any(reply.path == r or reply.path.startswith(r + "/") for r in roots), reply.path
    assert hostile_daemon.proc is not None and hostile_daemon.proc.poll() is None


# ---- pathological sizes and edges --------------------------------------------


SIZES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "argv with NUL": ({"argv": ["echo", "a\0b"]}, {"INVALID_ARGUMENT"}),
    "empty argv": ({"argv": []}, {"INVALID_ARGUMENT"}),
    "100k arguments": ({"argv": ["true", *["x"] * 100_000]}, {"ok", "TOO_LARGE"}),
    "100k long arguments": ({"argv": ["true", *["x" * 20] * 100_000]}, {"TOO_LARGE"}),
    "one argument of 1 MiB": ({"argv": ["echo", "x" * MiB]}, {"TOO_LARGE"}),
    "10 MB env value": ({"argv": ["true"], "env": {"GREETING": "x" * (10 * MiB)}}, {"TOO_LARGE"}),
    "env value with NUL": ({"argv": ["true"], "env": {"GREETING": "a\0b"}}, {"INVALID_ARGUMENT"}),
    "env name with =": ({"argv": ["true"], "env": {"GREETING=x": "y"}}, {"ENV_NOT_ALLOWED"}),
    "deep cwd": ({"argv": ["true"], "cwd": "a/" * 2000}, {"NOT_FOUND", "INVALID_ARGUMENT"}),
    "cwd component of 256 bytes": (
        {"argv": ["true"], "cwd": "x" * 256},
        {"NOT_FOUND", "INVALID_ARGUMENT"},
    ),
    "cwd with NUL": ({"argv": ["true"], "cwd": "a\0b"}, {"INVALID_ARGUMENT"}),
    "cwd climbing out": ({"argv": ["true"], "cwd": "../" * 50 + "etc"}, {"PATH_ESCAPES_ROOT"}),
    "argv0 component of 256 bytes": (
        {"argv": ["/" + "x" * 256]},
        {"EXECUTABLE_NOT_ALLOWED", "EXECUTABLE_NOT_FOUND", "INVALID_ARGUMENT"},
    ),
    "deep argv0": (
        {"argv": ["/" + "a/" * 2000 + "true"]},
        {"EXECUTABLE_NOT_ALLOWED", "EXECUTABLE_NOT_FOUND", "INVALID_ARGUMENT"},
    ),
    "stdin of 60 MiB": ({"argv": ["wc", "-c"], "stdin": b"x" * (60 * MiB)}, {"ok"}),
}


@pytest.mark.parametrize("case", list(SIZES))
def test_pathological_sizes_are_refused_typed_or_run(
    hostile_daemon: Daemon, processes: Any, case: str
) -> None:
    fields, expected = SIZES[case]
    fields = dict(fields)
    argv = fields.pop("argv")
    fields["env"] = with_marker(fields.get("env", {}))
    kind, reply = answer(processes.Run, request(argv, **fields), timeout=60)
    assert kind in expected, (kind, reply)
    if kind == "ok":
        assert reply.exited.outcome == common_pb2.EXITED
    assert_serving(hostile_daemon, processes)


#: Each limit and the largest value its wire field can hold.
LIMIT_FIELDS: dict[str, float | int] = {
    "cpu_seconds": math.inf,
    "wall_seconds": math.inf,
    "memory_bytes": (1 << 64) - 1,
    "pids": (1 << 32) - 1,
    "output_bytes": (1 << 64) - 1,
    "file_size_bytes": (1 << 64) - 1,
    "open_files": (1 << 32) - 1,
    "total_output_bytes": (1 << 64) - 1,
}


def edge_cases() -> list[tuple[str, str, float | int]]:
    """Every limit at zero, negative, huge and not-a-number. A uint field
    cannot hold a negative: a raw client's -1 arrives as the field's maximum."""
    cases: list[tuple[str, str, float | int]] = []
    for name, top in LIMIT_FIELDS.items():
        cases.append((name, "zero", 0))
        if isinstance(top, float):
            cases += [(name, "negative", -1.0), (name, "negative", -math.inf)]
            cases += [(name, "huge", 1e300), (name, "nan", math.nan), (name, "inf", math.inf)]
        else:
            cases += [(name, "negative", top), (name, "huge", top // 2 + 1)]
    return cases


@pytest.mark.parametrize(("name", "edge", "value"), edge_cases())
def test_every_limit_at_zero_negative_huge_or_nan_is_refused_limit_invalid(
    processes: Any, name: str, edge: str, value: float | int
) -> None:
    if name == "output_bytes" and edge == "zero":
        # Documented: 0 keeps no output (counts it all), it is not refused.
        kind, reply = answer(processes.Run, request(["echo", "hi"], limits={name: 0}))
        assert kind == "ok" and b"hi" not in reply.stdout
        assert (reply.exited.stdout.kept_bytes, reply.exited.stdout.dropped_bytes) == (0, 3)
        return
    kind, _ = answer(processes.Run, request(["true"], limits={name: value}))
    assert kind == "LIMIT_INVALID", (name, value)


@pytest.mark.parametrize(
    "limits",
    [
        {"wall_seconds": 1e-9},
        {"cpu_seconds": 1e-9},
        {"memory_bytes": 1},
        {"pids": 1},
        {"open_files": 1},
        {"file_size_bytes": 1},
        {"total_output_bytes": 1},
        {"output_bytes": 1},
    ],
)
def test_the_smallest_positive_limits_end_typed_with_nothing_left(
    hostile_daemon: Daemon, processes: Any, limits: dict[str, float | int]
) -> None:
    req = request(["sh", "-c", "echo hello; sleep 0.2"], limits=limits, env=with_marker({}))
    kind, reply = answer(processes.Run, req)
    assert kind == "ok", kind
    assert reply.exited.outcome != common_pb2.OUTCOME_UNSPECIFIED and reply.exited.message
    assert wait_gone(MARKER, 2.0) == []
    assert_serving(hostile_daemon, processes)


@pytest.mark.parametrize(
    "fields",
    [
        {"labels": {f"k{i}": "v" * 10_000 for i in range(1000)}},
        {"request_id": "r" * (10 * MiB)},
        {"labels": {"k" * (1 * MiB): "v"}},
    ],
    ids=["10 MB of labels", "10 MB request_id", "1 MB label key"],
)
def test_no_request_can_make_an_audit_line_unbounded(
    hostile_daemon: Daemon, processes: Any, fields: dict[str, Any]
) -> None:
    before = hostile_daemon.audit_path.stat().st_size
    kind, _ = answer(processes.Run, request(["true"], **fields), timeout=60)
    assert kind == "INVALID_ARGUMENT"
    with open(hostile_daemon.audit_path, "rb") as log:
        log.seek(before)
        longest = max((len(line) for line in log), default=0)
    assert longest <= MAX_AUDIT_LINE, f"an audit line of {longest} bytes"


@pytest.mark.parametrize(
    "fields",
    [
        {"argv": ["true"], "cwd": "a" * (64 * 1024)},
        {"argv": ["true"], "env": {"A" * (64 * 1024): "x"}},
        {"argv": ["x" * (100 * 1024)]},
    ],
    ids=["64 KiB cwd", "64 KiB env name", "100 KiB argv0"],
)
def test_a_refusal_of_a_huge_value_still_carries_its_reason(
    processes: Any, fields: dict[str, Any]
) -> None:
    argv = fields.pop("argv")
    kind, _ = answer(processes.Run, request(argv, **fields))
    assert kind in REASONS


# ---- bytes straight to the socket ---------------------------------------------

#: Methods whose request has string fields (an empty request message, like
#: Capabilities', keeps any bytes as unknown fields and is rightly answered).
METHODS = [
    "/hostcap.v1.ProcessService/Run",
    "/hostcap.v1.ProcessService/Signal",
    "/hostcap.v1.FsService/ReadFile",
    "/hostcap.v1.FsService/WriteFile",
    "/hostcap.v1.FsService/Stat",
]
MALFORMED = {
    "invalid UTF-8 in argv": b"\x0a\x02\xff\xfe",
    "invalid UTF-8 in a map key": b"\x1a\x07\x0a\x03\xc3\x28a\x12\x00",
    "truncated length": b"\x0a\x05ab",
    "varint longer than 10 bytes": b"\x30" + b"\xff" * 11,
    "nested groups 5000 deep": b"\x9b\x06" * 5000,
    "field number 0": b"\x00\x01",
    "end group without start": b"\x0c",
    "all byte values": bytes(range(256)),
}


def raw_call(channel: grpc.Channel, method: str, payload: bytes) -> grpc.RpcError | bytes:
    # No serializers: bytes in, bytes out.
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        return call(payload, timeout=30)  # type: ignore[no-any-return]
    except grpc.RpcError as error:
        return error


@pytest.mark.parametrize("method", METHODS)
def test_malformed_protobuf_bytes_are_answered_and_survived(
    hostile_daemon: Daemon, channel: grpc.Channel, processes: Any, method: str
) -> None:
    for name, payload in MALFORMED.items():
        outcome = raw_call(channel, method, payload)
        assert isinstance(outcome, grpc.RpcError), f"{name}: accepted"
        code = outcome.code()
        # An answer, promptly: not a hang, not a dropped connection.
        assert code not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE), name
    assert_serving(hostile_daemon, processes)


@pytest.mark.parametrize("method", METHODS[:3])
def test_malformed_protobuf_bytes_are_refused_invalid_argument(
    channel: grpc.Channel, method: str
) -> None:
    outcome = raw_call(channel, method, MALFORMED["invalid UTF-8 in argv"])
    assert isinstance(outcome, grpc.RpcError)
    wire = from_rpc_error(outcome)
    assert wire is not None and wire.reason == "INVALID_ARGUMENT", outcome


@FUZZ
@given(payload=st.binary(max_size=4096), method=st.sampled_from(METHODS))
def test_random_protobuf_bytes_never_crash_the_daemon(
    hostile_daemon: Daemon, channel: grpc.Channel, payload: bytes, method: str
) -> None:
    outcome = raw_call(channel, method, payload)
    if isinstance(outcome, grpc.RpcError):
        assert outcome.code() not in (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.UNAVAILABLE,
        )
    assert hostile_daemon.proc is not None and hostile_daemon.proc.poll() is None


def test_a_message_above_the_ceiling_is_refused_resource_exhausted(
    hostile_daemon: Daemon, channel: grpc.Channel, processes: Any
) -> None:
    oversized = request(["wc", "-c"], stdin=b"x" * (81 * MiB)).SerializeToString()
    outcome = raw_call(channel, "/hostcap.v1.ProcessService/Run", oversized)
    assert isinstance(outcome, grpc.RpcError)
    assert outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_serving(hostile_daemon, processes)


# ---- broken HTTP/2 ------------------------------------------------------------

RUN = "/hostcap.v1.ProcessService/Run"
NO_PREFACE = "HTTP/1.1 instead of the preface"
LYING_LENGTH = "a message declaring 4 GiB, then the stream ends"
BROKEN_STREAMS = {
    NO_PREFACE: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "frame longer than the max frame size": frame(DATA, 0, 1, b"x" * 20000),
    "DATA on stream 0": frame(DATA, 0, 0, b"x"),
    "HEADERS with a broken HPACK block": frame(HEADERS, 0x5, 1, b"\xff\xff\xff\xff\xff"),
    "SETTINGS with a bad length": frame(SETTINGS, 0, 0, b"\x00\x01\x00"),
    "PING of the wrong size": frame(PING, 0, 0, b"\x00"),
    LYING_LENGTH: frame(DATA, 0x1, 1, grpc_message(b"\x0a\x04true", 0xFFFFFFFF)),
}


@pytest.mark.parametrize("case", list(BROKEN_STREAMS))
def test_broken_http2_is_survived_and_leaks_nothing(
    hostile_daemon: Daemon, processes: Any, case: str
) -> None:
    payload = BROKEN_STREAMS[case]
    # One Run first: what the daemon makes once, lazily, at its first spawn
    # (the deadlines' timerfd) is not this case's (the case may run first).
    assert_serving(hostile_daemon, processes)
    fds_before = open_fds(hostile_daemon.pid)
    conn = RawConnection.open(hostile_daemon.socket, timeout=1, preface=case != NO_PREFACE)
    if case == LYING_LENGTH:
        conn.start_call(RUN, b"", end_stream=False)
    conn.send(payload)
    conn.read_until_closed()
    conn.close()
    assert_serving(hostile_daemon, processes)
    # Judged on the snapshot that ended the wait (a fresh one could catch a
    # passing fd: the audit fsync thread's dup of the log while a batch is
    # made durable); one that stays 5 s is a leak.
    deadline = time.monotonic() + 5
    leaked = open_fds(hostile_daemon.pid) - fds_before
    while leaked and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = open_fds(hostile_daemon.pid) - fds_before
    assert not leaked, fd_kinds(leaked)


@settings(FUZZ, max_examples=40)
@given(junk=st.binary(min_size=1, max_size=2048))
def test_random_bytes_after_the_preface_never_crash_the_daemon(
    hostile_daemon: Daemon, junk: bytes
) -> None:
    # A short read: junk that looks like the start of a frame keeps the
    # daemon waiting for the rest, which is its right; closing ends it.
    conn = RawConnection.open(hostile_daemon.socket, timeout=0.1)
    try:
        conn.send(junk)
        conn.read_until_closed(limit=64 * 1024)
    except OSError:
        pass  # the daemon may hang up mid-send: that is surviving it
    finally:
        conn.close()
    assert hostile_daemon.proc is not None and hostile_daemon.proc.poll() is None


FUZZ_TARGET = Path(__file__).with_name("fuzz_request_validation.py")


def test_a_short_atheris_run_finds_no_untyped_failure_in_request_validation(
    tmp_path: Path,
) -> None:
    """Coverage-guided fuzzing of decode + validation in process (see the
    target's docstring); skipped where atheris is not installed."""
    pytest.importorskip("atheris")
    done = subprocess.run(
        [sys.executable, str(FUZZ_TARGET), "-max_total_time=6", "-runs=2000000",
         f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        capture_output=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    report = done.stderr.decode(errors="replace")
    assert done.returncode == 0, report[-4000:]
    assert "Done " in report and not list(tmp_path.glob("crash-*")), report[-4000:]


_Found = TypeVar("_Found", bound=Sized)


def _settled(found: Callable[[], _Found], timeout: float = 10.0) -> _Found:
    """What `found` still finds once it finds nothing, or `timeout` passed
    (a correctness deadline, generous: what is left over stays, so a longer
    wait misses nothing)."""
    deadline = time.monotonic() + timeout
    while (left := found()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_after_all_the_hostility_nothing_is_left_and_every_exec_has_its_exit(
    hostile_daemon: Daemon, processes: Any
) -> None:
    assert wait_gone(MARKER, 10.0) == []
    assert_serving(hostile_daemon, processes)

    def without_exit() -> set[str]:
        # A spawn's exit record follows its tree's end (the reap, then the
        # record): one whose caller went away may be written a moment after.
        records = list(audit_log(hostile_daemon))
        execs = {r["spawn_id"] for r in records if r["event"] == "process.exec"}
        return execs - {r["spawn_id"] for r in records if r["event"] == "process.exit"}

    assert _settled(without_exit) == set()
    # Only the daemon's own helpers run under it (the spawner, fs workers,
    # the sockets' front-ends, warm children waiting for a request): nothing
    # sandboxed is left.
    # A process in passing (a warm child being made, a zombie not yet reaped:
    # no cmdline yet or any more) may be seen once; what stays is a leak.
    own = (b"hostcapd.spawner", b"hostcapd.fs.worker", b"hostcapd.frontend")

    def strays() -> list[bytes]:
        helpers = [
            cmdline(pid) for pid in descendants(hostile_daemon.pid) if not waiting_warm_child(pid)
        ]
        return [c for c in helpers if not any(name in c for name in own)]

    assert _settled(strays) == []
