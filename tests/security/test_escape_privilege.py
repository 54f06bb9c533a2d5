"""Sandboxed programs try to gain privilege: become uid 0, hold any
capability, or climb through a setuid-root binary (a copy the test plants in
the workspace, and the host's own su and passwd). The workspace is not
mounted nosuid, so what stops a setuid binary is no_new_privs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from escape_attempts import SecurityHost, as_nobody, attack
from support.daemon import NOBODY
from support.process import Client


async def test_no_root_identity_and_no_way_back_to_it(alpha: Client) -> None:
    found = await attack(
        alpha,
        """
report(ids=[*os.getresuid(), *os.getresgid()], groups=os.getgroups(),
       setuid=attempt(os.setuid, 0), seteuid=attempt(os.seteuid, 0),
       setresuid=attempt(os.setresuid, 0, 0, 0), setgid=attempt(os.setgid, 0),
       setgroups=attempt(os.setgroups, [0]))
""",
    )
    assert found.pop("ids") == [NOBODY] * 6
    # Supplementary groups cleared: only the primary group, or none at all.
    assert found.pop("groups") in ([], [NOBODY])
    assert found == dict.fromkeys(found, "EPERM")


async def test_every_capability_set_is_empty_and_no_new_privs_is_set(alpha: Client) -> None:
    found = await attack(
        alpha,
        """
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
report(**{k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                        "NoNewPrivs", "Seccomp")})
""",
    )
    zero = "0000000000000000"
    assert found == {
        "CapInh": zero,
        "CapPrm": zero,
        "CapEff": zero,
        "CapBnd": zero,
        "CapAmb": zero,
        "NoNewPrivs": "1",
        "Seccomp": "2",
    }


@pytest.fixture
def setuid_copies(host: SecurityHost) -> Iterator[dict[str, Path]]:
    """Setuid-root copies of `id` and `python3` in alpha's workspace."""
    workspace = host.workspace("alpha")
    copies = {"id": workspace / "suid-id", "python3": workspace / "suid-python3"}
    for source, target in (("/usr/bin/id", copies["id"]), ("/usr/bin/python3", copies["python3"])):
        shutil.copy(os.path.realpath(source), target)
        os.chown(target, 0, 0)
        target.chmod(0o4755)
    yield copies
    for target in copies.values():
        target.unlink(missing_ok=True)


async def test_setuid_root_copy_in_the_workspace_gives_nothing(
    alpha: Client, setuid_copies: dict[str, Path]
) -> None:
    suid_id, suid_python = setuid_copies["id"], setuid_copies["python3"]
    # Control: the workspace honours setuid; unsandboxed, nobody becomes euid 0.
    assert as_nobody(str(suid_id), "-u").stdout.strip() == "0"
    result = await alpha.run(
        "sh",
        "-c",
        f"{suid_id} -u; {suid_python} -I -c 'import os; os.setuid(0)' 2>&1 | tail -1",
    )
    lines = result.stdout.decode().splitlines()
    assert lines[0] == str(NOBODY)
    assert lines[1] == "PermissionError: [Errno 1] Operation not permitted"


async def test_host_setuid_programs_su_and_passwd_give_nothing(alpha: Client) -> None:
    # Control: unsandboxed, passwd's setuid bit lets nobody read its own
    # shadow entry: the last-change date and ageing fields come from /etc/shadow.
    host_status = as_nobody("passwd", "-S", "nobody").stdout.split()
    assert host_status[:2] == ["nobody", "L"] and host_status[2] != "never"
    result = await alpha.run(
        "sh",
        "-c",
        "passwd -S nobody; su -c 'id -u' root < /dev/null; echo su=$?; "
        "su -s /bin/sh -c 'id -u' nobody < /dev/null; echo su_nobody=$?",
    )
    lines = result.stdout.decode().splitlines()
    # Sandboxed, passwd runs without its setuid bit: no shadow, so no ageing data.
    sandboxed_status = lines[0].split()
    assert sandboxed_status[:2] == ["nobody", "L"]
    assert sandboxed_status[2:] != host_status[2:]
    # su runs nothing (unsandboxed it would want a password too: passwd above
    # is the control showing the setuid bit itself is ignored).
    assert lines[1:] == ["su=1", "su_nobody=1"], lines
