"""The spawner's pool of mount namespaces: a spawn that joins one sees
exactly the mounts of a spawn that built its own, each namespace serves one
spawn (nothing one leaves in /tmp reaches the next), a failed set-up leaves
no fd behind, and an old namespace is dropped rather than used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")

PROBE = textwrap.dedent(
    """
    import errno, json, os, sys, tempfile
    from pathlib import Path
    from hostcapd import childsetup
    from hostcapd.sandbox import namespaces
    from hostcapd.spawner.mntns import MountNamespacePool

    root = Path(tempfile.mkdtemp(prefix="hostcap-mntns-"))
    os.chmod(root, 0o755)
    plan = namespaces.plan(
        {"mount_namespace", "pid_namespace"}, 1 << 20, "",
        roots=((root, True),),
        system_dirs=tuple(Path(d) for d in ("/usr", "/bin", "/lib", "/lib64", "/etc")),
    )
    SCRIPT = (
        b"cat /proc/self/mountinfo; echo ---; ls /tmp; echo ---; readlink /proc/self/ns/mnt;"
        b" touch /tmp/left-behind; echo ---; set -- /proc/[0-9]*; echo $#"
    )

    def run(clone_flags, mounts, mntns_fd=-1, copy=False):
        r, w = os.pipe()
        exe = os.open("/bin/sh", os.O_RDONLY | os.O_CLOEXEC)
        pid, _ = childsetup.spawn(childsetup.ChildPlan(
            exe_fd=exe, exe_path=None, argv=[b"sh", b"-c", SCRIPT], envp=[b"PATH=/usr/bin:/bin"],
            stdio=(0, w, 2), cwd_root=None, cwd=None, umask=0o022, clone_flags=clone_flags,
            mounts=list(mounts), hostname=None, loopback_up=False, cgroup_fds=[], rlimits=[],
            oom_score_adj=None, loginuid=None, drop_caps=False, ids=None, no_new_privs=True,
            landlock_fd=-1, landlock_rules=[], seccomp_filter=b"", pdeathsig=9, cancel_fd=-1,
            life_fd=-1, mntns_fd=mntns_fd, mntns_copy=copy))
        os.close(w); os.close(exe)
        with os.fdopen(r) as f:
            out = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, out
        mountinfo, tmp, ns, procs = out.split("---\\n")
        # Each mount: its root, mount point, parent's mount point, options,
        # propagation (optional fields) and source; in no order (a copy of a
        # template lists the trees it cloned from the host first).
        points = {line.split()[0]: line.split()[4] for line in mountinfo.splitlines()}
        shape = []
        for line in mountinfo.splitlines():
            left, right = line.split(" - ")
            f = left.split()
            shape.append([f[3], f[4], points.get(f[1], "?"), f[5], " ".join(f[6:]), *right.split()])
        return {"mounts": sorted(shape), "tmp": tmp.split(), "ns": ns.strip(), "procs": int(procs)}

    flags = namespaces.CLONE_NEWNS | namespaces.CLONE_NEWPID
    home = os.readlink("/proc/self/ns/mnt")
    fresh = run(flags, plan.mounts)
    fds_before = len(os.listdir("/proc/self/fd"))
    pool = MountNamespacePool(size=2)
    pool.fill_one("t", list(plan.pooled_mounts))
    pool.fill_one("t", list(plan.pooled_mounts))
    assert pool.wanted({"t": list(plan.pooled_mounts)}) is None
    first, second = pool.take("t"), pool.take("t")
    assert pool.take("t") == -1 and pool.take("other") == -1
    pooled = []
    for fd in (first, second):
        pooled.append(run(namespaces.CLONE_NEWPID, plan.join_mounts, fd))
        os.close(fd)
    # The pool empty: a spawn copies the profile's template in its own set-up
    # (its keep steps, the root beneath /tmp, cloned before it joins).
    base, steps = pool.copy_base("t", plan.pooled_mounts)
    copied = [run(namespaces.CLONE_NEWPID, [*steps, *plan.join_mounts], base, copy=True)
              for _ in range(2)]
    template_ns = os.readlink(f"/proc/self/fd/{base}")

    # A set-up step that fails: the error names it, nothing is left open.
    bad = [*plan.pooled_mounts[:1], (namespaces.MOUNT_KEEP, b"/nonexistent-hostcap", None, None, 0, None, 0)]
    try:
        childsetup.mount_namespace(bad)
        failure = None
    except childsetup.SetupError as error:
        failure = list(error.args)
    broken = MountNamespacePool()
    broken.fill_one("b", bad)
    expiring = MountNamespacePool(max_age=0.0)
    expiring.fill_one("t", list(plan.pooled_mounts))
    expired = expiring.take("t")
    for held in (pool, broken, expiring):  # and the templates they copied
        held.close()
    fds_after = len(os.listdir("/proc/self/fd"))
    print(json.dumps({
        "home": home, "after": os.readlink("/proc/self/ns/mnt"), "fresh": fresh,
        "pooled": pooled, "copied": copied, "template": template_ns, "failure": failure, "broken": sorted(broken.failed),
        "expired": expired, "fds": [fds_before, fds_after], "enoent": errno.ENOENT,
        "root": root.name,
    }))
    """
)


@needs_root
def test_a_pooled_namespace_is_the_same_view_used_once_and_fails_cleanly() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    fresh, (first, second) = result["fresh"], result["pooled"]
    # The same mounts on the same parents with the same options, whether built
    # per spawn or copied from the profile's template ahead of need; every
    # one private (no shared or master peer group).
    assert first["mounts"] == fresh["mounts"] == second["mounts"]
    assert any(m[1] == "/proc" and m[5] == "proc" for m in fresh["mounts"])
    assert all(m[4] == "" for m in fresh["mounts"])
    # So has a spawn that copies the template itself, each in a namespace and
    # with a /tmp of its own.
    for copied in result["copied"]:
        assert copied["mounts"] == fresh["mounts"]
        assert copied["tmp"] == [result["root"]] and copied["procs"] == 1
    assert all(c["ns"] not in (result["home"], result["template"]) for c in result["copied"])
    # Its own /proc shows only the spawn's pid namespace: the shell alone (its
    # glob counts without a second process, whose start would race the count).
    assert fresh["procs"] == first["procs"] == second["procs"] == 1
    # Each spawn has a namespace of its own: what one leaves in /tmp, no other
    # sees (its private /tmp holds only the tenant root that lives beneath /tmp).
    assert first["tmp"] == second["tmp"] == fresh["tmp"] == [result["root"]]
    # (Both pooled namespaces were alive at once, so their inodes cannot
    # have been reused; the fresh one had ended before they were made.)
    assert len({first["ns"], second["ns"], result["home"]}) == 3
    assert fresh["ns"] != result["home"]
    assert result["after"] == result["home"]  # the caller stays where it was
    assert result["failure"] == ["mount", result["enoent"]]
    assert result["broken"] == ["b"]  # the profile's spawns make their own instead
    assert result["expired"] == -1  # too old: dropped, not used
    assert result["fds"][1] == result["fds"][0]  # nothing leaked on any path
