"""The spawner's pool of network namespaces: each is fresh, loopback up,
used once, and the spawner itself stays in its own namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")

PROBE = textwrap.dedent(
    """
    import json, os, socket
    from hostcapd import childsetup
    from hostcapd.spawner.netns import NetnsPool
    home = os.readlink("/proc/self/ns/net")
    pool = NetnsPool(size=2)
    pool.fill_one(); pool.fill_one()
    assert not pool.wants_more
    first, second = pool.take(), pool.take()
    assert pool.take() == -1
    seen = []
    for fd in (first, second):
        r, w = os.pipe()
        exe = os.open("/usr/bin/python3", os.O_RDONLY | os.O_CLOEXEC)
        code = (
            "import os, socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
            "c = socket.create_connection(s.getsockname()); print(os.readlink('/proc/self/ns/net'))"
        )
        pid, _ = childsetup.spawn(childsetup.ChildPlan(
            exe_fd=exe, exe_path=None, argv=[b"python3", b"-c", code.encode()], envp=[],
            stdio=(0, w, 2), cwd_root=None, cwd=None, umask=0o022, clone_flags=0, mounts=[],
            hostname=None, loopback_up=False, cgroup_fds=[], rlimits=[], oom_score_adj=None,
            loginuid=None, drop_caps=True, ids=(65534, 65534), no_new_privs=True, landlock_fd=-1,
            landlock_rules=[], seccomp_filter=b"", pdeathsig=9, cancel_fd=-1, life_fd=-1,
            netns_fd=fd))
        os.close(w); os.close(fd); os.close(exe)
        out = os.read(r, 4096).decode().strip()
        _, status = os.waitpid(pid, 0)
        seen.append((out, os.waitstatus_to_exitcode(status)))
    print(json.dumps({"home": home, "after": os.readlink("/proc/self/ns/net"), "seen": seen}))
    """
)


@needs_root
def test_each_pooled_namespace_is_fresh_used_once_and_has_loopback() -> None:
    import json

    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["after"] == result["home"]  # the spawner is back in its own namespace
    (first, code1), (second, code2) = result["seen"]
    assert (code1, code2) == (0, 0)  # 127.0.0.1 works inside: loopback is up
    assert len({first, second, result["home"]}) == 3  # two fresh namespaces, none shared
