"""A/B of the spawner channel's codec: the marshal dicts with hand-written
checks it had until issue 28 against today's msgspec structs, in one
process, interleaved.

    python -m bench.spawner_codec [BASELINE_REV]

The old codec is read from git (`spawner/messages.py` at BASELINE_REV; by
default the parent of the commit that removed its hand-written checks,
found in the history) and loaded beside today's. One round trip is what the
spawn path pays: encode a typical spawn order (argv, env, rlimits, ids),
decode and check it as the spawner does, then encode and decode its two
reports (Started, Exited). No socket: only the codec. Rounds alternate the
order of the two; it prints each one's median µs per round trip and the
ratio (msgspec over marshal: below 1 is faster).
"""

from __future__ import annotations

import importlib.util
import marshal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from hostcap_proto.names import Rusage
from hostcapd.spawner import messages

#: A name only the old codec had (its per-message key sets).
OLD_CODEC_MARK = "_wire_keys"
ROUNDS = 40
REPEAT = 2000
REPO = Path(__file__).resolve().parents[1]

ARGV = [b"/usr/bin/git", b"-C", b"src", b"status", b"--porcelain=v2", b"--branch"]
ENVP = [
    b"PATH=/usr/local/bin:/usr/bin:/bin",
    b"HOME=/srv/workspace",
    b"LANG=C.UTF-8",
    b"TERM=dumb",
    b"TMPDIR=/tmp",
]
RLIMITS = [(4, 0, 0), (7, 256, 256), (1, 1 << 30, 1 << 30), (0, 30, 30)]


def baseline_rev() -> str:
    """The last revision whose spawner/messages.py is the marshal codec."""
    removed = subprocess.run(
        [
            *("git", "-C", str(REPO), "log", "-1", "--format=%H", f"-G{OLD_CODEC_MARK}"),
            *("--", "daemon/hostcapd/spawner/messages.py"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{removed}^"


def old_codec(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:daemon/hostcapd/spawner/messages.py"],
        check=True,
        capture_output=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_spawner_messages.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("old_spawner_messages", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def order_fields(i: int) -> dict[str, Any]:
    return {
        "id": f"sp{i:08x}",
        "profile": "tenant-a#1",
        "by_fd": True,
        "exe_path": ARGV[0],
        "argv": ARGV,
        "envp": ENVP,
        "cwd_root": b"/srv/workspace",
        "cwd": b"src",
        "rlimits": RLIMITS,
        "ids": (65534, 65534),
        "loginuid": b"65534",
        "landlock": True,
        "go": False,
    }


USAGE = (0.0123, 0.0045, 3 << 20, 12, 3, 0, 8)


def marshal_round(old: ModuleType) -> Callable[[], None]:
    order = old.SpawnOrder(**order_fields(1))
    started = old.Started("sp00000001", 4242)
    exited = old.Exited("sp00000001", 4242, 0, Rusage(*USAGE))

    def one() -> None:
        got = old.to_spawner(marshal.loads(marshal.dumps(order.to_wire())))
        assert got.id == order.id
        old.from_spawner(marshal.loads(marshal.dumps(started.to_wire())))
        old.from_spawner(marshal.loads(marshal.dumps(exited.to_wire())))

    return one


def msgspec_round() -> Callable[[], None]:
    order = messages.SpawnOrder(**order_fields(1))
    started = messages.Started("sp00000001", 4242)
    exited = messages.Exited("sp00000001", 4242, 0, Rusage(*USAGE))

    def one() -> None:
        got = messages.to_spawner(order.to_wire())
        assert got.id == order.id
        messages.from_spawner(started.to_wire())
        messages.from_spawner(exited.to_wire())

    return one


def timed(one: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(REPEAT):
        one()
    return (time.perf_counter() - start) / REPEAT * 1e6


def main(argv: list[str]) -> int:
    old = old_codec(argv[0] if argv else baseline_rev())
    contenders = {"marshal": marshal_round(old), "msgspec": msgspec_round()}
    # The same values both ways (the old codec checks the same fields).
    new = messages.to_spawner(messages.SpawnOrder(**order_fields(2)).to_wire())
    was = old.to_spawner(marshal.loads(marshal.dumps(old.SpawnOrder(**order_fields(2)).to_wire())))
    assert (list(new.argv), list(new.envp)) == (list(was.argv), list(was.envp))
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for n in range(ROUNDS):
        for name in names if n % 2 == 0 else reversed(names):
            samples[name].append(timed(contenders[name]))
    median = {name: statistics.median(values) for name, values in samples.items()}
    sizes = {
        "marshal": len(marshal.dumps(old.SpawnOrder(**order_fields(1)).to_wire())),
        "msgspec": len(messages.SpawnOrder(**order_fields(1)).to_wire()),
    }
    for name in names:
        print(
            f"{name:8} {median[name]:7.2f} µs per round trip "
            f"(spawn order {sizes[name]} bytes, Started, Exited)"
        )
    print(f"msgspec / marshal: {median['msgspec'] / median['marshal']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
