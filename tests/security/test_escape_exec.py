"""What runs is what was audited: a binary swapped on disk while the daemon
hashes it cannot slip in (exec by fd), and a binary outside the roots and
system dirs cannot be executed at all (landlock's execute right)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from escape_attempts import SecurityHost
from support.process import Client, outcome

#: Trailing bytes after the ELF image (ignored by the loader) so hashing takes
#: long enough for a swap to land between the daemon's open and the exec.
PADDING = 48 << 20


@pytest.fixture(scope="module")
def versions(host: SecurityHost) -> Iterator[dict[str, tuple[Path, str]]]:
    """Two padded programs printing "v1" / "v2", in alpha's workspace: name ->
    (path, sha256)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the swapped programs")
    store = host.workspace("alpha") / "exec-store"
    store.mkdir(mode=0o755)
    out: dict[str, tuple[Path, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("v1", "v2"):
            source = Path(tmp) / f"{name}.c"
            source.write_text(
                f'#include <stdio.h>\nint main(void) {{ puts("{name}"); return 0; }}\n'
            )
            binary = store / name
            subprocess.run(["gcc", "-O1", "-o", str(binary), str(source)], check=True)
            with binary.open("ab") as f:
                f.truncate(binary.stat().st_size + PADDING)
            binary.chmod(0o755)
            out[name] = (binary, hashlib.sha256(binary.read_bytes()).hexdigest())
    yield out
    shutil.rmtree(store)


def _install(source: Path, target: Path) -> None:
    """Atomically put (a hard link of) `source` at `target`, with a fresh
    ctime so the daemon's hash cache misses and hashes it again."""
    os.utime(source)
    temp = target.with_name(f".{target.name}.new")
    temp.unlink(missing_ok=True)
    os.link(source, temp)
    os.rename(temp, target)


async def test_a_binary_swapped_during_hashing_never_runs_unaudited(
    alpha: Client, host: SecurityHost, versions: dict[str, tuple[Path, str]]
) -> None:
    (v1, v1_sha), (v2, v2_sha) = versions["v1"], versions["v2"]
    target = v1.parent / "tool"
    for attempt in range(6):
        _install(v1, target)
        run = asyncio.ensure_future(alpha.run(str(target)))
        await asyncio.sleep(0.01 * attempt)  # land the swap at various points of the hashing
        _install(v2, target)
        result = await run
        assert (outcome(result), result.exited.exit_code) == ("EXITED", 0)
        ran = result.stdout.decode().strip()
        # Whichever binary the daemon opened is the one that ran and was reported.
        expected = {"v1": v1_sha, "v2": v2_sha}[ran]
        assert result.started.executable.sha256 == expected, f"attempt {attempt}: ran {ran}"
        assert any(s.name == "exec_by_fd" and s.applied for s in result.started.protections)
    target.unlink()


async def test_a_binary_outside_the_roots_and_system_dirs_cannot_be_executed(
    beta: Client, host: SecurityHost
) -> None:
    planted = host.outside / "planted-id"
    shutil.copy("/usr/bin/id", planted)
    planted.chmod(0o755)
    try:
        # By argv[0] (the tenant lists no allowed dirs, so the daemon resolves it),
        # and from a shell inside the sandbox: landlock grants no execute there.
        direct = await beta.run(str(planted))
        via_shell = await beta.run("sh", "-c", f"{planted}; echo status=$?")
    finally:
        planted.unlink()
    assert outcome(direct) == "SPAWN_FAILED"
    assert (direct.exited.failed_step, direct.exited.errno) == ("exec", 13)
    # Inside, the path does not even exist (127); were it visible, landlock
    # would refuse to execute it (126).
    assert via_shell.stdout.endswith((b"status=126\n", b"status=127\n"))
    assert b"uid=" not in direct.stdout + via_shell.stdout
