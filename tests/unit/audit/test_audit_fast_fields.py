"""The writer's fast field check gives the models' answer: the same fields,
defaults and left-out Nones for what the daemon passes, and for anything
else (wrong types, values pydantic would coerce, extra or missing keys) the
same result or the same error as validating with the models."""

from __future__ import annotations

import random
from typing import Any

import pytest
from audit_helpers import exec_fields, exit_fields
from hostcap_proto.audit import (
    EVENT_FIELDS,
    AuditRecordError,
    fast_event_fields,
    validate_event_fields,
    validate_event_fields_by_model,
)

PROTECTIONS = [
    "pid_namespace", "net_namespace", "ipc_namespace", "uts_namespace", "mount_namespace",
    "cgroup", "landlock", "seccomp", "rlimits", "no_new_privs", "uid_drop", "exec_by_fd",
]  # fmt: skip


def daemon_exec(spawn_id: str) -> dict[str, Any]:
    """A process.exec as process/records.py builds it: every limit, twelve protections."""
    return exec_fields(
        spawn_id,
        request_id="",
        labels={},
        limits={
            "cpu_seconds": 600.0,
            "memory_bytes": 4 << 30,
            "wall_seconds": 60.0,
            "pids": 1024,
            "output_bytes": 1 << 20,
            "file_size_bytes": 1 << 30,
            "open_files": 4096,
            "total_output_bytes": 256 << 20,
        },
        protections=[{"name": name, "applied": True, "reason": ""} for name in PROTECTIONS],
    )


def daemon_exit(spawn_id: str, **overrides: Any) -> dict[str, Any]:
    """A process.exit as tenant.py builds it (None where a value is unknown)."""
    fields = exit_fields(
        spawn_id,
        pid=4242,
        signal=0,
        signal_name=None,
        rusage={
            "user_seconds": 0.0024449999999999997,
            "system_seconds": 0.0,
            "max_rss_bytes": 14618624,
            "voluntary_context_switches": 9,
            "involuntary_context_switches": 7,
            "block_input_ops": 0,
            "block_output_ops": 0,
        },
        peak_memory_bytes=None,
        oom_kills=None,
    )
    fields.update(overrides)
    return fields


DAEMON_RECORDS: list[tuple[str, dict[str, Any]]] = [
    ("process.exec", daemon_exec("a")),
    ("process.exec", exec_fields("b")),
    ("process.exec", exec_fields("c", pid=77, argv_truncated=True, argc=9)),
    ("process.exit", daemon_exit("a")),
    ("process.exit", exit_fields("b")),
    ("process.exit", daemon_exit("c", outcome="SIGNALED", exit_code=None, signal=9,
                                 signal_name="SIGKILL", peak_memory_bytes=1 << 20, oom_kills=0)),
    ("process.exit", daemon_exit("d", outcome="SPAWN_FAILED", failed_step="chdir", errno=13)),
    ("process.exit", {"tenant": "dev", "spawn_id": "e", "labels": {}, "outcome": "DAEMON_SHUTDOWN",
                      "message": "the daemon stopped", "pid": 7}),
    ("file.write", {"tenant": "dev", "path": "/w/a.txt", "size": 3, "sha256_after": "ab" * 32,
                    "request_id": "r", "labels": {"k": "v"}, "write_id": "w1"}),
    ("policy.deny", {"tenant": "dev", "method": "Run", "reason": "EXECUTABLE_NOT_ALLOWED",
                     "message": "no", "argv": ["./x"], "labels": {}, "request_id": ""}),
    ("process.exec", exec_fields("f", argv_sha256="ab" * 32, argv_redacted=True,
                                 argv_truncated=False)),
    ("policy.deny", {"tenant": "dev", "method": "Spawn", "reason": "PATH_ESCAPES_ROOT",
                     "message": "no", "argv": ["ls"], "executable_requested": "ls",
                     "cwd": "/etc", "limits_requested": {"wall_seconds": 5.0, "pids": 3},
                     "argv_sha256": "cd" * 32, "argv_redacted": False, "argv_truncated": False,
                     "labels": {}, "request_id": ""}),
    ("policy.deny", {"tenant": "dev", "method": "Run", "reason": "AUDIT_UNAVAILABLE",
                     "message": "no", "argv": ["ls"], "cwd": "/w", "limits_requested": {},
                     "executable": {"path": "/usr/bin/ls", "sha256": "ab" * 32, "device": 1,
                                    "inode": 2}}),
    ("daemon.start", {"version": "0.1.0", "tenants": ["dev"], "config_path": "/etc/h.toml",
                      "pid": 1}),
    ("daemon.reload", {"version": "0.1.0", "tenants": ["dev"], "added": [], "removed": ["x"],
                       "changed": ["dev"]}),
    ("audit.recover", {"file": "audit.jsonl", "torn_bytes": 12, "torn_sha256": "cd" * 32}),
    ("fs.changes", {"tenant": "dev", "spawn_id": "a", "request_id": "", "labels": {},
                    "changes": [{"path": "/w/d", "kinds": ["created"], "dir": True},
                                {"path": "/w/d/f", "kinds": ["created", "modified"], "size": 3,
                                 "sha256": "ab" * 32},
                                {"path": "/w/g", "kinds": ["deleted"]}],
                    "paths_listed": 3, "events_beyond": {"created": 4}, "truncated": True,
                    "unresolved_events": 0, "unattributed_events": 0, "queue_overflows": 0,
                    "complete": True}),
    ("network.connect", {"tenant": "dev", "spawn_id": "s1", "protocol": "connect", "host": "allowed.test",
                         "port": 443, "address": "127.0.0.1", "rule": "allowed.test",
                         "allowed": True, "reason": "allowed by rule", "bytes_up": 10,
                         "bytes_down": 20, "duration_ms": 3}),
]  # fmt: skip


@pytest.mark.parametrize(("event", "fields"), DAEMON_RECORDS, ids=[e for e, _ in DAEMON_RECORDS])
def test_what_the_daemon_passes_takes_the_fast_path_with_the_models_answer(
    event: str, fields: dict[str, Any]
) -> None:
    reference = typed(validate_event_fields_by_model(event, fields))
    assert typed(fast_event_fields(event, fields)) == reference
    assert typed(validate_event_fields(event, fields)) == reference


def test_defaults_are_fresh_for_every_record() -> None:
    def without_defaults(spawn_id: str) -> dict[str, Any]:
        fields = exec_fields(spawn_id)
        for name in ("labels", "env_names", "limits", "protections"):
            del fields[name]
        return fields

    first = validate_event_fields("process.exec", without_defaults("a"))
    assert (first["labels"], first["env_names"], first["limits"]) == ({}, [], {})
    first["labels"]["added"] = "later"
    first["env_names"].append("LATER")
    first["limits"]["pids"] = 1
    second = validate_event_fields("process.exec", without_defaults("b"))
    assert (second["labels"], second["env_names"], second["limits"]) == ({}, [], {})


def test_the_result_does_not_share_the_callers_containers() -> None:
    fields = exec_fields("a")
    body = validate_event_fields("process.exec", fields)
    fields["argv"].append("--later")
    fields["labels"]["later"] = "x"
    fields["executable"]["path"] = "/changed"
    assert body["argv"] == ["git", "status", "--short"]
    assert "later" not in body["labels"]
    assert body["executable"]["path"] == "/usr/bin/git"


def typed(value: Any) -> Any:
    """`value` with the type of every part spelled out: True == 1 and
    Text("x") == "x" in Python, not in an audit record."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, repr(value))


def outcome(event: str, fields: dict[str, Any], check: Any) -> tuple[str, Any]:
    try:
        return "ok", typed(check(event, fields))
    except AuditRecordError as error:
        return "error", str(error)


# Values of every kind, for every field: the right type, its near misses
# (bool for int, int for float, a str subclass), containers of the wrong
# thing, non-finite floats, None.
class Text(str):
    pass


EXECUTABLES: list[Any] = [
    {"path": "p", "sha256": "s", "device": 1, "inode": 2},
    {"path": "p", "sha256": "s", "device": True, "inode": 2},
    {"path": "p", "sha256": "s", "device": 1, "inode": 2, "extra": None},
]
LIMITS: list[Any] = [{"cpu_seconds": 60}, {"cpu_seconds": 60.0, "pids": 4}, {"pids": True}, {}]
PROTECTION_LISTS: list[Any] = [
    [{"name": "x", "applied": True}],
    [{"name": "x", "applied": 1}],
    [{"name": "x", "applied": True, "required": None, "reason": Text("r")}],
    [],
]
ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, -3, 2**70, 1.0, 1.5, float("inf"), float("nan"), "", "x", "EXITED",
    Text("x"), "7", [], ["a"], ["a", 1], [None], ("a",), {}, {"a": "b"}, {"a": 1}, {1: "a"},
    *EXECUTABLES, *LIMITS, *PROTECTION_LISTS,
    {"user_seconds": 1, "system_seconds": 0.0, "max_rss_bytes": 1},
    {"user_seconds": 0.5, "system_seconds": 0.0, "max_rss_bytes": 1},
    {"total": 1, "kept": 1, "dropped": 0}, {"total": 1, "kept": 1},
    [{"spawn_id": "s", "tenant": "t", "exec_seq": 3}],
]  # fmt: skip

BASE_FIELDS: dict[str, dict[str, Any]] = {
    "process.exec": exec_fields("a"),
    "process.exit": exit_fields("a"),
    "file.write": {"tenant": "t", "path": "/p", "size": 3, "sha256_after": "ab"},
    "policy.deny": {"tenant": "t", "method": "Run", "reason": "R", "message": "m"},
    "daemon.start": {"version": "1"},
    "daemon.stop": {"version": "1", "message": "bye"},
    "daemon.reload": {"version": "1", "added": ["a"]},
    "audit.rotate": {"previous_file": "f", "previous_seq": 1, "previous_hash": "0" * 64},
    "audit.recover": {"file": "f", "torn_bytes": 1, "torn_sha256": "x"},
    "audit.prune": {
        "files": [{"file": "f", "size": 1, "sha256": "x", "archived": True}],
        "keep_files": 1,
    },
    "fs.changes": {
        "tenant": "t",
        "spawn_id": "a",
        "changes": [{"path": "/p", "kinds": ["modified"]}],
    },
    "network.connect": {
        "tenant": "t",
        "spawn_id": "s",
        "protocol": "socks5",
        "host": "h",
        "port": 1,
        "address": "",
        "rule": "",
        "allowed": False,
        "reason": "r",
        "bytes_up": 0,
        "bytes_down": 0,
        "duration_ms": 0,
    },
    "environment.open": {
        "tenant": "t",
        "environment_id": "env-1",
        "idle_timeout_s": 60.0,
        "lifetime_s": 3600.0,
    },
    "environment.close": {
        "tenant": "t",
        "environment_id": "env-1",
        "idle_timeout_s": 60.0,
        "lifetime_s": 3600.0,
        "reason": "closed by the client",
        "spawns_ended": ["s"],
        "caller": {"uid": 1000, "gid": 1000, "pid": 4242},
    },
    "admin.call": {
        "method": "Kill",
        "caller": {"uid": 0, "gid": 0, "pid": 4242},
        "spawn_id": "s",
        "tenant": "t",
        "asked": {"spawn_id": "s"},
    },
    "process.input": {
        "tenant": "t",
        "spawn_id": "s",
        "index": 1,
        "bytes": 3,
        "sha256": "a" * 64,
        "text": "ls\r",
        "close": False,
        "tty": True,
    },
}


def test_every_event_has_base_fields_here() -> None:
    assert set(BASE_FIELDS) == set(EVENT_FIELDS)


@pytest.mark.parametrize("event", sorted(EVENT_FIELDS))
def test_any_value_in_any_field_gets_the_models_answer(event: str) -> None:
    base = BASE_FIELDS[event]
    cases = [dict(base)]
    for name in EVENT_FIELDS[event].model_fields:
        cases.extend({**base, name: value} for value in ODD_VALUES)
        cases.append({k: v for k, v in base.items() if k != name})
    fast_taken = 0
    for fields in cases:
        expected = outcome(event, fields, validate_event_fields_by_model)
        assert outcome(event, fields, validate_event_fields) == expected, fields
        if fast_event_fields(event, fields) is not None:
            fast_taken += 1
            assert ("ok", typed(fast_event_fields(event, fields))) == expected, fields
    if event != "audit.rotate":  # its previous_hash has a pattern: always the model's
        assert fast_taken > 0


def test_mixed_nested_values_get_the_models_answer() -> None:
    rng = random.Random(7)
    pools = {
        "executable": EXECUTABLES,
        "limits": LIMITS,
        "protections": PROTECTION_LISTS,
        "labels": [{}, {"a": "b"}, {"a": 1}, None],
        "argv": [["a"], ["a", 1], [], ("a",)],
        "uid": [1, True, 1.0, "1"],
    }
    names = sorted(pools)
    for _ in range(400):
        fields = exec_fields("m")
        for name in rng.sample(names, rng.randint(1, len(names))):
            fields[name] = rng.choice(pools[name])
        expected = outcome("process.exec", fields, validate_event_fields_by_model)
        assert outcome("process.exec", fields, validate_event_fields) == expected, fields


def test_names_the_writer_refuses_stay_refused() -> None:
    fields = exit_fields("a")
    with pytest.raises(AuditRecordError, match="unknown field"):
        validate_event_fields("process.exit", {**fields, "colour": "red"})
    with pytest.raises(AuditRecordError, match="set by the writer"):
        validate_event_fields("process.exit", {**fields, "hash": "0" * 64})
    assert fast_event_fields("process.exit", {**fields, "colour": "red"}) is None
    with pytest.raises(AuditRecordError, match="unknown audit event"):
        validate_event_fields("process.explode", {"tenant": "dev"})
    assert fast_event_fields("process.explode", {"tenant": "dev"}) is None
