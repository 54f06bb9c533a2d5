"""Write deploy/seccomp/hostcapd.json: the unit's SystemCallFilter= as an
OCI seccomp profile, for the Kubernetes DaemonSet (a Localhost profile) and
the Nomad task (docker's seccomp option).

    python3 deploy/seccomp/generate.py      # needs systemd-analyze (systemd 252)

The allow list is systemd's own expansion of the unit's groups
(`systemd-analyze syscall-filter`), the later `~` lines removed, so the
container gets the calls the unit allows and no others.
tests/integration/test_deploy_manifests.py checks the file is what this writes.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "hostcapd.service"
PROFILE = Path(__file__).with_name("hostcapd.json")
EPERM = 1


@cache
def group(name: str) -> frozenset[str]:
    out = subprocess.run(
        ["systemd-analyze", "syscall-filter", "--no-pager", name],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    calls: set[str] = set()
    for line in out.splitlines()[1:]:
        entry = line.strip()
        if entry and not entry.startswith("#"):
            calls |= group(entry) if entry.startswith("@") else {entry}
    return frozenset(calls)


def expand(items: list[str]) -> set[str]:
    calls: set[str] = set()
    for item in items:
        calls |= group(item) if item.startswith("@") else {item}
    return calls


def unit_filter() -> list[str]:
    lines = [
        line.split("=", 1)[1].strip()
        for line in UNIT.read_text().splitlines()
        if line.startswith("SystemCallFilter=")
    ]
    return lines


def profile() -> dict[str, object]:
    first, *removals = unit_filter()
    allowed = expand(first.split())
    for line in removals:
        allowed -= expand(line.removeprefix("~").split())
    return {
        # SystemCallErrorNumber=EPERM: a refused call fails, it does not kill.
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        # SystemCallArchitectures=native, for either node architecture.
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": [{"names": sorted(allowed), "action": "SCMP_ACT_ALLOW"}],
    }


def render() -> str:
    return json.dumps(profile(), indent=1) + "\n"


if __name__ == "__main__":
    PROFILE.write_text(render())
    print(f"{PROFILE}: {len(profile()['syscalls'][0]['names'])} calls")  # type: ignore[index]
