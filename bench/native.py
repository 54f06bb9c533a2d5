"""The C parts of the bench: compiled with gcc into a temporary directory.

`Floor` drives floor.c (the posix_spawn floor and bwrap, timed in C and
answered one command at a time, so they interleave with the daemon calls);
`tree.c` is the 50-process tree the kill row kills.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


class BenchError(Exception):
    """A measurement could not be taken (a baseline or the daemon failed)."""


def compile_c(source: str, directory: Path) -> Path:
    """Compile bench/<source> into `directory`; the executable's path."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BenchError(
            "gcc is not installed: the C baselines cannot be built (make venv installs it)"
        )
    out = directory / Path(source).stem
    result = subprocess.run(
        [gcc, "-O2", "-Wall", "-o", str(out), str(HERE / source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BenchError(f"gcc failed on {source}:\n{result.stderr}")
    return out


def bwrap_argv() -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise BenchError("bubblewrap is not installed (make venv installs it)")
    return [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "/bin/true"]


class Floor:
    """The floor.c helper: a subreaper that spawns and reaps, timing in C."""

    def __init__(self, executable: Path, tree_argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            [str(executable), *tree_argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _ask(self, command: str) -> list[int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise BenchError(f"floor helper: {command!r}: {answer or 'no answer'}")
        return [int(x) for x in answer.split()]

    def spawn_true(self, n: int = 1) -> list[float]:
        """Seconds of n x posix_spawn(/bin/true) + waitpid."""
        return [ns / 1e9 for ns in self._ask(f"true {n}")]

    def tree(self, n: int = 1) -> list[float]:
        """Seconds of n x spawning the tree command until all of it is reaped."""
        return [ns / 1e9 for ns in self._ask(f"tree {n}")]

    def flood(self, concurrency: int, seconds: float) -> tuple[int, float]:
        """Completed runs and elapsed seconds with `concurrency` always in flight."""
        done, elapsed_ns = self._ask(f"flood {concurrency} {int(seconds * 1000)}")
        return done, elapsed_ns / 1e9

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, 9)
            self.proc.wait()
