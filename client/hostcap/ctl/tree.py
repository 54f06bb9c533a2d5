"""The process tree of a live spawn, read on this host with psutil, for
``hostcapctl ps --tree``.

A spawn's processes are those of its cgroup (`spawn-<spawn_id>`, or
`warm-<spawn_id>` for one that ran in a warm child, which holds every descendant, also one that left the process tree with setsid or
a double fork); without a cgroup (a host that gives none), the descendants
of its pid, which reach everything its pid namespace reparents to it.

Only the process name (the kernel's 15-character `comm`) is shown, never the
command line: a child's arguments can hold secrets, and only the exec'd argv
(the one `ps` prints) went through the audit log's redaction.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


class TreeUnavailable(Exception):
    """psutil is not installed (it is in the daemon's set, and the client's ``ops`` extra)."""


def _cgroup_pids(pid: int, spawn_id: str) -> list[int] | None:
    """Every pid in the spawn's cgroup and beneath, or None when the spawn has
    no cgroup of its own that this host shows."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    leaves = (f"/spawn-{spawn_id}", f"/warm-{spawn_id}")
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if not path.rstrip("/").endswith(leaves):
            continue
        base = CGROUP_ROOT if not controllers else CGROUP_ROOT / controllers.split(",")[0]
        directory = base / path.lstrip("/")
        if not directory.is_dir():
            # v1 mounts co-mounted controllers under the joined name (cpu,cpuacct).
            directory = CGROUP_ROOT / controllers / path.lstrip("/")
        if not directory.is_dir():
            continue
        pids: set[int] = set()
        for procs in directory.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
        return sorted(pids)
    return None


def spawn_tree(pid: int, spawn_id: str) -> list[dict[str, Any]]:
    """The spawn's processes, root first then by pid: {pid, ppid, name,
    cpu_seconds, rss_bytes, threads}. Processes that end while read are left out."""
    try:
        import psutil
    except ImportError:
        raise TreeUnavailable(
            "ps --tree reads the processes with psutil, which is not installed "
            "(pip install 'hostcap-client[ops]')"
        ) from None
    pids = _cgroup_pids(pid, spawn_id)
    if pids is None:
        try:
            root = psutil.Process(pid)
            pids = [pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return []
    out: list[dict[str, Any]] = []
    for member in pids:
        try:
            process = psutil.Process(member)
            with process.oneshot():
                cpu = process.cpu_times()
                out.append(
                    {
                        "pid": member,
                        "ppid": process.ppid(),
                        "name": process.name(),
                        "cpu_seconds": round(cpu.user + cpu.system, 3),
                        "rss_bytes": process.memory_info().rss,
                        "threads": process.num_threads(),
                    }
                )
        except psutil.Error:
            continue
    out.sort(key=lambda p: (p["pid"] != pid, p["pid"]))
    return out


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"


def tree_lines(processes: list[dict[str, Any]], printable: Any) -> list[str]:
    """The tree under a ps row: one indented line a process, children under
    their parents (a process whose parent is not in the spawn starts a line
    of its own at the top level)."""
    by_parent: dict[int, list[dict[str, Any]]] = {}
    members = {p["pid"] for p in processes}
    roots = []
    for p in processes:
        if p["ppid"] in members and p["ppid"] != p["pid"]:
            by_parent.setdefault(p["ppid"], []).append(p)
        else:
            roots.append(p)
    lines: list[str] = []

    def walk(p: dict[str, Any], depth: int) -> None:
        lines.append(
            f"{'':<4}{'  ' * depth}└ {p['pid']:>7}  cpu {p['cpu_seconds']:>8.2f}s  "
            f"rss {_size(p['rss_bytes']):>9}  {printable(p['name'])}"
        )
        for child in by_parent.get(p["pid"], []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines
