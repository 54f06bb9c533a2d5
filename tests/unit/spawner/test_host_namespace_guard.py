"""The C set-up refuses a plan whose namespace steps would run in the host's
own namespaces (a caller's bug): a hostname without CLONE_NEWUTS would rename
the host, mounts without a mount namespace would change the host's mount
table, loopback_up without CLONE_NEWNET would touch the host's network.
Each is refused before any clone, and the caller's namespaces are as they
were (the probe runs in private copies of the host's, so a regression could
not rename the machine the tests run on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the steps tried need root")

PROBE = textwrap.dedent(
    """
    import ctypes, dataclasses, json, os, socket, tempfile
    from hostcapd import childsetup
    from hostcapd.sandbox import namespaces

    # "The host" here is this probe's own UTS and mount namespaces, private
    # copies of the real ones: should the guard ever fail, only they change.
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.unshare(namespaces.CLONE_NEWUTS | namespaces.CLONE_NEWNS) == 0
    assert libc.mount(None, b"/", None, 0x4000 | 0x40000, None) == 0  # MS_REC | MS_PRIVATE

    target = tempfile.mkdtemp(prefix="hostcap-guard-")
    base = childsetup.ChildPlan(
        exe_fd=-1, exe_path=b"/bin/true", argv=[b"true"], envp=[], stdio=(0, 1, 2),
        cwd_root=None, cwd=None, umask=0o022, clone_flags=0, mounts=[], hostname=None,
        loopback_up=False, cgroup_fds=[], rlimits=[], oom_score_adj=None, loginuid=None,
        drop_caps=False, ids=None, no_new_privs=True, landlock_fd=-1, landlock_rules=[],
        seccomp_filter=b"", pdeathsig=9, cancel_fd=-1, life_fd=-1,
    )
    tmpfs = (0, b"tmpfs", target.encode(), b"tmpfs", 0, None, 0)
    attempts = {
        "hostname": dict(hostname=b"renamed-by-hostcap",
                         clone_flags=namespaces.CLONE_NEWPID),
        "mounts": dict(mounts=[tmpfs], clone_flags=namespaces.CLONE_NEWPID),
        "loopback": dict(loopback_up=True),
    }
    before = (socket.gethostname(), open("/proc/self/mountinfo").read())
    outcome = {}
    for name, change in attempts.items():
        try:
            pid, _ = childsetup.spawn(dataclasses.replace(base, **change))
        except ValueError as error:
            outcome[name] = str(error)
        else:
            os.waitpid(pid, 0)
            outcome[name] = "ran"
    after = (socket.gethostname(), open("/proc/self/mountinfo").read())
    # The same steps in their own namespaces are accepted (the guard is exact).
    pid, _ = childsetup.spawn(dataclasses.replace(
        base, hostname=b"renamed-by-hostcap", mounts=[tmpfs],
        clone_flags=namespaces.CLONE_NEWUTS | namespaces.CLONE_NEWNS))
    _, status = os.waitpid(pid, 0)
    print(json.dumps({
        "outcome": outcome, "hostname_kept": after[0] == before[0],
        "mounts_kept": after[1] == before[1], "target_mounted": target in after[1],
        "own_namespaces": os.waitstatus_to_exitcode(status),
        "hostname_after_own": socket.gethostname() == before[0],
    }))
    """
)


@needs_root
def test_namespace_steps_never_reach_the_hosts_namespaces() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    outcome = result["outcome"]
    assert "CLONE_NEWUTS" in outcome["hostname"]
    assert "CLONE_NEWNS" in outcome["mounts"]
    assert "CLONE_NEWNET" in outcome["loopback"]
    assert result["hostname_kept"] and result["mounts_kept"]
    assert not result["target_mounted"]
    assert result["own_namespaces"] == 0
    assert result["hostname_after_own"]  # a hostname in its own UTS namespace stays there
