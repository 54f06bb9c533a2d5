"""CPU the audit writer spends per record on the event loop's thread.

    python -m bench.audit_bench [--quick]
    results = run(quick=True)                    # from the bench harness

Writes process.exec and process.exit records shaped like the daemon's (the
fields of ``hostcapd.process.records`` (exec_record, exit_record), default profile:
twelve protections, eight limits) through `AuditLog.write` into a log in a
temporary directory, with the event loop running so the batched fdatasyncs
run on the writer's own thread, as in the daemon. Each batch is timed with
the calling thread's CPU clock (``time.thread_time_ns``): what the loop
thread spent, the fsync thread's time left out, the ``write(2)`` of each line
included. Two writers: journal mirror off (as the bench daemons run), and on,
sending to a socket a separate reader process drains in journald's place.
Interleaved with them, round by round in rotating order, the baseline: one
plain ``json.dumps`` of the same fields dict per record, timed the same way.
The figures are medians over the rounds.

Keys of the returned dict, per record (``record`` is one exec and one exit
averaged): ``audit.{exec,exit,record}.{writer,writer_journal,dumps}_us`` and
``audit.{exec,exit,record}.{writer,writer_journal}_ratio`` (to ``dumps``);
``audit.rounds``, ``audit.records_per_round``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from hostcapd.audit import AuditLog
from hostcapd.config import PROTECTION_NAMES, AuditSettings

from bench.native import BenchError
from bench.stats import rotation

PREFIX = "audit"
#: The writers measured: journal mirror off, and on (to a socket the bench drains).
WRITERS = ("writer", "writer_journal")
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


def _timed_us(contender: Contender, event: str, batch: list[dict[str, Any]]) -> float:
    """CPU of the calling thread per record, in microseconds."""
    start = time.thread_time_ns()
    for fields in batch:
        contender(event, fields)
    return (time.thread_time_ns() - start) / 1000 / len(batch)


async def _measure(contenders: dict[str, Contender], rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        f"{kind}.{name}": [] for kind in ("exec", "exit") for name in contenders
    }
    counter = 0
    for index in range(WARM_UP + rounds):
        execs = [exec_fields(counter + i) for i in range(SPAWNS_PER_BATCH)]
        exits = [exit_fields(counter + i, f["spawn_id"]) for i, f in enumerate(execs)]
        counter += SPAWNS_PER_BATCH
        figures: dict[str, float] = {}
        for kind, batch in (("exec", execs), ("exit", exits)):
            event = f"process.{kind}"
            for name in rotation(list(contenders), index):
                figures[f"{kind}.{name}"] = _timed_us(contenders[name], event, batch)
                # Let the batched fdatasync and the loop's callbacks run between batches.
                await asyncio.sleep(0.001)
        if index >= WARM_UP:
            for key, value in figures.items():
                samples[key].append(value)
    return samples


def figures(samples: dict[str, list[float]], rounds: int) -> dict[str, float]:
    """The flat result dict of the module doc."""
    out: dict[str, float] = {
        f"{PREFIX}.rounds": float(rounds),
        f"{PREFIX}.records_per_round": float(2 * SPAWNS_PER_BATCH),
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


async def _run(quick: bool) -> dict[str, float]:
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
        contenders: dict[str, Contender] = {
            "writer": lambda event, fields: logs[0].write(event, **fields),
            "writer_journal": lambda event, fields: logs[1].write(event, **fields),
            "dumps": lambda event, fields: json.dumps(fields),
        }
        rounds = _rounds(quick)
        samples = await _measure(contenders, rounds)
        return figures(samples, rounds)
    finally:
        for log in logs:
            await log.close()
        journal.close()
        shutil.rmtree(directory, ignore_errors=True)


def run(quick: bool) -> dict[str, float]:
    """Measure interleaved rounds in a fresh event loop; the figures of the module doc."""
    return asyncio.run(_run(quick))


def report(result: dict[str, float]) -> str:
    """A small table of the figures, for a person."""
    lines = [
        f"audit writer, CPU of the loop thread per record, median of "
        f"{int(result[f'{PREFIX}.rounds'])} interleaved rounds of "
        f"{int(result[f'{PREFIX}.records_per_round'])} records",
        f"  {'':14}{'json.dumps':>11}{'write':>9}{'ratio':>7}{'+journal':>10}{'ratio':>7}",
    ]
    for kind, label in (("exec", "process.exec"), ("exit", "process.exit"), ("record", "mean")):
        figure = f"{PREFIX}.{kind}"
        lines.append(
            f"  {label:14}{result[f'{figure}.dumps_us']:9.1f}us"
            f"{result[f'{figure}.writer_us']:7.1f}us{result[f'{figure}.writer_ratio']:7.1f}"
            f"{result[f'{figure}.writer_journal_us']:8.1f}us"
            f"{result[f'{figure}.writer_journal_ratio']:7.1f}"
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
    args = parser.parse_args(argv)
    print(report(run(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
