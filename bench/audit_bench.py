"""CPU the audit writer spends per record on the event loop's thread.

    python -m bench.audit_bench [--quick]
    results = run(quick=True)                    # from the bench harness

Writes process.exec and process.exit records shaped like the daemon's (the
fields of ``hostcapd.process.records`` (exec_record, exit_record), default profile:
twelve protections, eight limits) into a log in a temporary directory, with
the event loop running so the batched fdatasyncs run on the writer's own
thread, as in the daemon. Each batch is timed with the calling thread's CPU
clock (``time.thread_time_ns``): what the loop thread spent, the fsync
thread's time left out, the ``write(2)`` of each line included. The writers,
round by round in rotating order:

- ``writer``: `AuditLog.write_built`, as the daemon writes a spawn's records
  (built fields, not validated again), journal mirror off (as the bench
  daemons run);
- ``writer_journal``: the same with the mirror on, sending to a socket a
  separate reader process drains in journald's place;
- ``writer_checked``: `AuditLog.write`, the fields through the models' fast
  check (as the daemon's other records);
- ``writer_stdlib``: `AuditLog.write` sealing every record as the writer did
  before msgspec (`stdlib_sealed_line`: the json module's encoder for both
  halves of the record): the writer as it was before 2026-12-06's pass;

and the baseline: one plain ``json.dumps`` of the same fields dict per
record, timed the same way. The figures are medians over the rounds.

``--durable``: instead, the fsync threads' A/B (2026-12-06): durable exec
records (`write_pending` with a go eventfd, awaited, as a spawn's) one after
another through the writer as it is (`SyncThreads`) and through one whose
fsyncs run on a `ThreadPoolExecutor`, as before (`_PoolThreads`), the two
alternating round by round; per record, the CPU of the loop's thread and of
the whole process (the fsync threads' included), and the wall time.

``--spaced MS``: each round writes one exec and one exit record per writer
after the loop slept MS ms, as a spawn's records come when requests are
spaced (a CPU coming out of idle: caches cold), instead of batches back to
back.

Keys of the returned dict, per record (``record`` is one exec and one exit
averaged): ``audit.{exec,exit,record}.{<writer>,dumps}_us``,
``audit.{exec,exit,record}.<writer>_ratio`` (to ``dumps``) and
``audit.{exec,exit,record}.writer_over_stdlib``; ``audit.rounds``,
``audit.records_per_round``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostcap_proto.audit import fast_encodable
from hostcap_proto.audit.canonical import _CANONICAL, _prev_hash_bytes
from hostcapd.audit import AuditLog
from hostcapd.audit import writer as writer_mod
from hostcapd.audit.built import Built
from hostcapd.config import PROTECTION_NAMES, AuditSettings

from bench.native import BenchError
from bench.stats import rotation

PREFIX = "audit"
#: The writers measured (the module's doc says what each is).
WRITERS = ("writer", "writer_journal", "writer_checked", "writer_stdlib")
#: Spawns per batch: each writes one exec and one exit record.
SPAWNS_PER_BATCH = 50
WARM_UP = 3

_REASONS = {
    "cgroup": "cgroup v1: memory,pids",
    "landlock": "ABI 7: fs, tcp, scope",
    "seccomp": "BPF deny list: 52 syscalls, 32-bit and x32 ABIs blocked",
}
# Typical argvs of an agent's tool calls: a shell line, a few plain words,
# a flag with a value, a path.
_ARGVS = (
    ["sh", "-c", "echo hello from $(id -un) in $(pwd)"],
    ["git", "status", "--short"],
    ["python3", "-m", "pytest", "-q", "tests/unit", "--maxfail=1"],
    ["rg", "--line-number", "def run", "src/"],
    ["ls", "-la", "/srv/work/project"],
)


def _rounds(quick: bool) -> int:
    return 15 if quick else 150


def exec_fields(index: int) -> dict[str, Any]:
    """The fields the daemon passes for a process.exec (see hostcapd.process.records)."""
    return {
        "tenant": "full",
        "spawn_id": uuid.uuid4().hex,
        "request_id": f"req-{index}",
        "labels": {"session": "s1", "tool_call_id": f"call-{index}"},
        "argv": list(_ARGVS[index % len(_ARGVS)]),
        "env_names": ["HOME", "LANG", "PATH", "TMPDIR"],
        "executable": {
            "path": "/usr/bin/dash",
            "sha256": "f5adb8bf0100ed0f8c7782ca5f92814e9229525a4b4e0d401cf3bea09ac960a6",
            "device": 65024,
            "inode": 260180,
        },
        "cwd": "/srv/hostcap/full/workspace",
        "uid": 65534,
        "gid": 65534,
        "limits": {
            "cpu_seconds": 600.0,
            "memory_bytes": 4 << 30,
            "wall_seconds": 60.0,
            "pids": 1024,
            "output_bytes": 1 << 20,
            "file_size_bytes": 1 << 30,
            "open_files": 4096,
            "total_output_bytes": 256 << 20,
        },
        "protections": [
            {"name": name, "applied": True, "reason": _REASONS.get(name, "")}
            for name in PROTECTION_NAMES
        ],
    }


def exit_fields(index: int, spawn_id: str) -> dict[str, Any]:
    """The fields the daemon passes for a process.exit (see tenant.py)."""
    return {
        "tenant": "full",
        "spawn_id": spawn_id,
        "request_id": f"req-{index}",
        "labels": {"session": "s1", "tool_call_id": f"call-{index}"},
        "pid": 27000 + index,
        "outcome": "EXITED",
        "exit_code": 0,
        "signal": 0,
        "message": "exited with status 0",
        "signal_name": None,
        "rusage": {
            "user_seconds": 0.002445,
            "system_seconds": 0.002533,
            "max_rss_bytes": 14618624,
            "voluntary_context_switches": 9,
            "involuntary_context_switches": 7,
            "block_input_ops": 0,
            "block_output_ops": 0,
        },
        "peak_memory_bytes": 774144,
        "oom_kills": 0,
        "duration_s": 0.004216,
        "stdout": {"total": 55, "kept": 55, "dropped": 0},
        "stderr": {"total": 0, "kept": 0, "dropped": 0},
    }


#: What each contender does with one record's fields.
Contender = Callable[[str, dict[str, Any]], object]


def stdlib_sealed_line(record: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """`hostcap_proto.audit.sealed_line` as it was before msgspec: the json
    module's encoder for the keys before and after "hash" (the same bytes)."""
    prev = _prev_hash_bytes(record)
    before = {key: value for key, value in record.items() if key < "hash"}
    after = {key: value for key, value in record.items() if key > "hash"}
    head = _CANONICAL.encode(before)[1:-1]
    tail = _CANONICAL.encode(after)[1:-1]
    unsealed = "{" + ",".join(part for part in (head, tail) if part) + "}"
    digest = hashlib.sha256(prev + unsealed.encode("utf-8")).hexdigest()
    pair = f'"hash":"{digest}"'
    line = "{" + ",".join(part for part in (head, pair, tail) if part) + "}\n"
    sealed = dict(record)
    sealed.pop("hash", None)
    sealed["hash"] = digest
    return sealed, line.encode("utf-8")


class _PoolThreads:
    """`SyncThreads`' interface on a ThreadPoolExecutor, as the writer's
    fsyncs ran before (the A/B's old side of ``--durable``)."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    def submit(self, job: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
        self._pool.submit(job).add_done_callback(lambda ran: done(ran.exception()))

    async def call(self, job: Callable[[], None]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, job)

    def stop(self) -> None:
        self._pool.shutdown(wait=False)


#: ``--durable``'s pairs: (new, old) and what each compares.
DURABLE_PAIRS = (("threads", "pool", "fsync threads: SyncThreads / ThreadPoolExecutor"),)


async def _durable_ab(rounds: int) -> dict[str, float]:
    """The ``--durable`` A/B: per record, median over rounds."""
    directory = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    logs: dict[str, AuditLog] = {}
    go = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        for name in ("threads", "pool"):
            settings = AuditSettings(
                path=directory / name / "audit.jsonl", group=None, journal="off"
            )
            logs[name] = AuditLog.open(settings, str(uuid.uuid4()))
        logs["pool"]._threads = _PoolThreads()  # type: ignore[assignment]
        samples: dict[str, list[float]] = {
            f"{name}.{clock}": [] for name in logs for clock in ("loop", "process", "wall")
        }
        per_round = 20
        for index in range(WARM_UP + rounds):
            for name in rotation(list(logs), index):
                log = logs[name]
                batch = [_built(exec_fields(index * per_round + i)) for i in range(per_round)]
                loop0, process0 = time.thread_time_ns(), time.process_time_ns()
                wall0 = time.perf_counter_ns()
                for fields in batch:
                    _, durable = log.write_pending("process.exec", release_fd=go, built=fields)
                    await durable
                figures = {
                    "loop": time.thread_time_ns() - loop0,
                    "process": time.process_time_ns() - process0,
                    "wall": time.perf_counter_ns() - wall0,
                }
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(go)
                if index >= WARM_UP:
                    for clock, ns in figures.items():
                        samples[f"{name}.{clock}"].append(ns / 1000 / per_round)
        out = {f"{PREFIX}.durable.{key}_us": statistics.median(v) for key, v in samples.items()}
        for new, old, _ in DURABLE_PAIRS:
            for clock in ("loop", "process", "wall"):
                out[f"{PREFIX}.durable.{new}_over_{old}.{clock}"] = (
                    out[f"{PREFIX}.durable.{new}.{clock}_us"]
                    / out[f"{PREFIX}.durable.{old}.{clock}_us"]
                )
        out[f"{PREFIX}.durable.rounds"] = float(rounds)
        return out
    finally:
        for log in logs.values():
            await log.close()
        os.close(go)
        shutil.rmtree(directory, ignore_errors=True)


class _BookkeepingFirst(AuditLog):
    """The writer as it was before 2026-12-07: a durable record's bookkeeping
    (metrics, the ledger's copy, the journal, subscribers) before its fsync
    is handed to its thread (``--hand-over``'s old side)."""

    def _append(self, record: dict[str, Any], line: bytes, hold: bool = False) -> None:
        super()._append(record, line)


async def _hand_over_ab(rounds: int) -> dict[str, float]:
    """``--hand-over``: a durable exec record's path to its fsync's hand-over
    (`write_pending` called -> `SyncThreads.submit`), and to its return, the
    bookkeeping after or before the hand-over, journal mirror off and on;
    an exit record after each (the ledger stays small). Per record, median
    over rounds of 20, in rotating order."""
    directory = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    journal = _Journal(directory / "journal.sock")
    go = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    logs: dict[str, AuditLog] = {}
    handed_at: list[int] = []
    try:
        for name in ("after", "before", "after_journal", "before_journal"):
            kind = _BookkeepingFirst if name.startswith("before") else AuditLog
            settings = AuditSettings(
                path=directory / name / "audit.jsonl",
                group=None,
                journal="on" if name.endswith("journal") else "off",
            )
            log = logs[name] = kind.open(settings, str(uuid.uuid4()), journal_socket=journal.path)
            submit = log._threads.submit

            def watched(job: Any, done: Any, submit: Any = submit) -> None:
                handed_at.append(time.perf_counter_ns())
                submit(job, done)

            log._threads.submit = watched  # type: ignore[method-assign]
        samples: dict[str, list[float]] = {
            f"{name}.{what}": [] for name in logs for what in ("handed", "returned")
        }
        per_round = 20
        for index in range(WARM_UP + rounds):
            for name in rotation(list(logs), index):
                log = logs[name]
                handed: list[int] = []
                returned: list[int] = []
                for i in range(per_round):
                    fields = _built(exec_fields(index * per_round + i))
                    handed_at.clear()
                    start = time.perf_counter_ns()
                    _, durable = log.write_pending("process.exec", release_fd=go, built=fields)
                    returned.append(time.perf_counter_ns() - start)
                    if handed_at:
                        handed.append(handed_at[0] - start)
                    await durable
                    spawn_id = fields["spawn_id"]
                    log.write_built("process.exit", _built(exit_fields(0, spawn_id)))
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(go)
                if index >= WARM_UP and handed:
                    samples[f"{name}.handed"].append(statistics.median(handed) / 1000)
                    samples[f"{name}.returned"].append(statistics.median(returned) / 1000)
        out = {f"{PREFIX}.hand_over.{k}_us": statistics.median(v) for k, v in samples.items()}
        for mirror in ("", "_journal"):
            for what in ("handed", "returned"):
                out[f"{PREFIX}.hand_over.after_over_before{mirror}.{what}"] = (
                    out[f"{PREFIX}.hand_over.after{mirror}.{what}_us"]
                    / out[f"{PREFIX}.hand_over.before{mirror}.{what}_us"]
                )
        return out
    finally:
        for log in logs.values():
            await log.close()
        os.close(go)
        journal.close()
        shutil.rmtree(directory, ignore_errors=True)


def _built(fields: dict[str, Any]) -> Built:
    """The fields as `hostcapd.process.records` builds them (what is unknown
    left out, not None; its floats, the limits, the rusage and the duration,
    checked for the fast encoder). On the built writers' clock; the others
    pay a like copy, the fields unpacked as keywords into a dict of their own."""
    floats: dict[str, Any] = {
        name: fields[name] for name in ("limits", "rusage", "duration_s") if name in fields
    }
    return Built(
        {name: value for name, value in fields.items() if value is not None},
        plain=fast_encodable(floats),
    )


class StdlibAuditLog(AuditLog):
    """The writer with the stdlib sealing: the A/B's old side."""

    def _line(self, event: str, body: Any, plain: bool = False) -> tuple[dict[str, Any], bytes]:
        record = {
            "schema": "hostcapd.audit/v1",
            "event": event,
            "seq": self._seq + 1,
            "time": writer_mod._now(),
            "event_id": writer_mod._event_id(),
            "boot_id": self._boot_id,
            "run_id": self._run_id,
            "prev_hash": self._hash,
            **body,
        }
        return stdlib_sealed_line(record)


def _timed_us(contender: Contender, event: str, batch: list[dict[str, Any]]) -> float:
    """CPU of the calling thread per record, in microseconds."""
    start = time.thread_time_ns()
    for fields in batch:
        contender(event, fields)
    return (time.thread_time_ns() - start) / 1000 / len(batch)


async def _measure(
    contenders: dict[str, Contender], rounds: int, spaced_ms: float = 0.0
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        f"{kind}.{name}": [] for kind in ("exec", "exit") for name in contenders
    }
    per_batch = 1 if spaced_ms else SPAWNS_PER_BATCH
    counter = 0
    for index in range(WARM_UP + rounds):
        execs = [exec_fields(counter + i) for i in range(per_batch)]
        exits = [exit_fields(counter + i, f["spawn_id"]) for i, f in enumerate(execs)]
        counter += per_batch
        figures: dict[str, float] = {}
        for kind, batch in (("exec", execs), ("exit", exits)):
            event = f"process.{kind}"
            for name in rotation(list(contenders), index):
                if spaced_ms:
                    await asyncio.sleep(spaced_ms / 1000)  # the CPU goes idle
                figures[f"{kind}.{name}"] = _timed_us(contenders[name], event, batch)
                # Let the batched fdatasync and the loop's callbacks run between batches.
                await asyncio.sleep(0.001)
        if index >= WARM_UP:
            for key, value in figures.items():
                samples[key].append(value)
    return samples


def figures(
    samples: dict[str, list[float]], rounds: int, per_batch: int = SPAWNS_PER_BATCH
) -> dict[str, float]:
    """The flat result dict of the module doc."""
    out: dict[str, float] = {
        f"{PREFIX}.rounds": float(rounds),
        f"{PREFIX}.records_per_round": float(2 * per_batch),
    }
    for kind in ("exec", "exit"):
        for name in WRITERS:
            out[f"{PREFIX}.{kind}.{name}_us"] = statistics.median(samples[f"{kind}.{name}"])
        out[f"{PREFIX}.{kind}.dumps_us"] = statistics.median(samples[f"{kind}.dumps"])
    for name in (*WRITERS, "dumps"):
        out[f"{PREFIX}.record.{name}_us"] = (
            out[f"{PREFIX}.exec.{name}_us"] + out[f"{PREFIX}.exit.{name}_us"]
        ) / 2
    for kind in ("exec", "exit", "record"):
        for name in WRITERS:
            ratio = out[f"{PREFIX}.{kind}.{name}_us"] / out[f"{PREFIX}.{kind}.dumps_us"]
            out[f"{PREFIX}.{kind}.{name}_ratio"] = ratio
        out[f"{PREFIX}.{kind}.writer_over_stdlib"] = (
            out[f"{PREFIX}.{kind}.writer_us"] / out[f"{PREFIX}.{kind}.writer_stdlib_us"]
        )
    return out


# journald's part: bind the socket, say so, then read and discard entries
# until stdin closes. A process of its own, as journald is.
_JOURNAL_READER = """
import select, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sys.argv[1])
print("ready", flush=True)
while True:
    ready, _, _ = select.select([sock, sys.stdin], [], [])
    if sys.stdin in ready:
        break
    sock.recv(1 << 20)
"""


class _Journal:
    """A reader in journald's place, so the mirror's sends are taken as on a
    host with journald (the reader's CPU is its own, not on the loop's clock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._reader = subprocess.Popen(
            [sys.executable, "-c", _JOURNAL_READER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._reader.stdout is not None
        if self._reader.stdout.readline().strip() != "ready":
            self.close()
            raise BenchError("the bench's journal reader did not start")

    def close(self) -> None:
        assert self._reader.stdin is not None
        self._reader.stdin.close()
        self._reader.wait(timeout=10)


async def _run(quick: bool, spaced_ms: float = 0.0) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    journal = _Journal(directory / "journal.sock")
    logs: list[AuditLog] = []
    try:
        plain = AuditSettings(path=directory / "plain" / "audit.jsonl", group=None, journal="off")
        logs.append(AuditLog.open(plain, str(uuid.uuid4())))
        mirrored = AuditSettings(
            path=directory / "journal" / "audit.jsonl", group=None, journal="on"
        )
        logs.append(AuditLog.open(mirrored, str(uuid.uuid4()), journal_socket=journal.path))
        stdlib = AuditSettings(path=directory / "stdlib" / "audit.jsonl", group=None, journal="off")
        logs.append(StdlibAuditLog.open(stdlib, str(uuid.uuid4())))
        checked = AuditSettings(
            path=directory / "checked" / "audit.jsonl", group=None, journal="off"
        )
        logs.append(AuditLog.open(checked, str(uuid.uuid4())))
        contenders: dict[str, Contender] = {
            "writer": lambda event, fields: logs[0].write_built(event, _built(fields)),
            "writer_journal": lambda event, fields: logs[1].write_built(event, _built(fields)),
            "writer_checked": lambda event, fields: logs[3].write(event, **fields),
            "writer_stdlib": lambda event, fields: logs[2].write(event, **fields),
            "dumps": lambda event, fields: json.dumps(fields),
        }
        rounds = _rounds(quick) * (10 if spaced_ms else 1)
        samples = await _measure(contenders, rounds, spaced_ms)
        return figures(samples, rounds, 1 if spaced_ms else SPAWNS_PER_BATCH)
    finally:
        for log in logs:
            await log.close()
        journal.close()
        shutil.rmtree(directory, ignore_errors=True)


def run(quick: bool, spaced_ms: float = 0.0) -> dict[str, float]:
    """Measure interleaved rounds in a fresh event loop; the figures of the module doc."""
    return asyncio.run(_run(quick, spaced_ms))


def report(result: dict[str, float]) -> str:
    """A small table of the figures, for a person."""
    lines = [
        f"audit writer, CPU of the loop thread per record, median of "
        f"{int(result[f'{PREFIX}.rounds'])} interleaved rounds of "
        f"{int(result[f'{PREFIX}.records_per_round'])} records",
        f"  {'':14}{'json.dumps':>11}{'built':>9}{'ratio':>7}{'+journal':>10}{'ratio':>7}"
        f"{'checked':>10}{'before':>10}{'built/before':>14}",
    ]
    for kind, label in (("exec", "process.exec"), ("exit", "process.exit"), ("record", "mean")):
        figure = f"{PREFIX}.{kind}"
        lines.append(
            f"  {label:14}{result[f'{figure}.dumps_us']:9.1f}us"
            f"{result[f'{figure}.writer_us']:7.1f}us{result[f'{figure}.writer_ratio']:7.1f}"
            f"{result[f'{figure}.writer_journal_us']:8.1f}us"
            f"{result[f'{figure}.writer_journal_ratio']:7.1f}"
            f"{result[f'{figure}.writer_checked_us']:8.1f}us"
            f"{result[f'{figure}.writer_stdlib_us']:8.1f}us"
            f"{result[f'{figure}.writer_over_stdlib']:13.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.audit_bench",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{_rounds(True)} rounds instead of {_rounds(False)}"
    )
    parser.add_argument(
        "--spaced",
        type=float,
        default=0.0,
        metavar="MS",
        help="one record per writer at a time, each after the loop slept MS ms",
    )
    parser.add_argument(
        "--durable", action="store_true", help="the fsync threads' A/B (the module's doc)"
    )
    parser.add_argument(
        "--hand-over",
        action="store_true",
        help="a durable record's path to its fsync's hand-over: bookkeeping after / before",
    )
    args = parser.parse_args(argv)
    if args.hand_over:
        result = asyncio.run(_hand_over_ab(_rounds(args.quick)))
        print(f"durable exec records, median of {_rounds(args.quick)} rounds of 20 (µs):")
        for mirror in ("", "_journal"):
            for what in ("handed", "returned"):
                key = f"{PREFIX}.hand_over"
                print(
                    f"  {what:8} journal {'on ' if mirror else 'off'}"
                    f" {result[f'{key}.after{mirror}.{what}_us']:6.1f}"
                    f" / {result[f'{key}.before{mirror}.{what}_us']:6.1f}"
                    f"  {result[f'{key}.after_over_before{mirror}.{what}']:.2f}x"
                )
        return 0
    if args.durable:
        result = asyncio.run(_durable_ab(_rounds(args.quick)))
        print(f"durable exec records, per record, median of {_rounds(args.quick)} rounds of 20:")
        for new, old, label in DURABLE_PAIRS:
            print(f"  {label}")
            for clock in ("loop", "process", "wall"):
                print(
                    f"    {clock:8} {result[f'{PREFIX}.durable.{new}.{clock}_us']:7.1f}us"
                    f" / {result[f'{PREFIX}.durable.{old}.{clock}_us']:7.1f}us"
                    f"  {result[f'{PREFIX}.durable.{new}_over_{old}.{clock}']:.2f}x"
                )
        return 0
    print(report(run(args.quick, args.spaced)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
