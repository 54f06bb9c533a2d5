"""A pooled mount namespace is a copy of its profile's template
(spawner/mntns.py `Templates`, sandbox/namespaces.py `template_split`): its
mounts are those of a namespace built for the spawn (the pool's own test
compares them), every one private even where a root's host mount is shared,
and a sandboxed program in a copy can neither write nor change what is
read-only, nor see what another copy (or the template) holds in its /tmp and
/dev/shm. The pool maker makes copies on its own thread (`here`): the
caller's namespace, root and cwd are its own again after each, also after a
failed step, and nothing is left open."""

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
    import errno, json, os, tempfile, time
    from pathlib import Path
    from hostcapd import childsetup, linux
    from hostcapd.sandbox import namespaces
    from hostcapd.spawner import mntns

    MS_BIND, MS_SHARED = 4096, 1 << 20
    # A mount namespace of the probe's own, where the roots are shared mounts
    # (as on a host whose / is shared): nothing made here reaches the host.
    linux.unshare(namespaces.CLONE_NEWNS)
    linux.mount(None, b"/", None, namespaces.MS_REC | namespaces.MS_PRIVATE, None)
    late = Path(tempfile.mkdtemp(prefix="hostcap-tmpl-rw-"))  # beneath /tmp
    late_ro = Path(tempfile.mkdtemp(prefix="hostcap-tmpl-ro-"))
    outside = Path(tempfile.mkdtemp(prefix="hostcap-tmpl-out-", dir="/var/tmp"))
    for root in (late, late_ro, outside):
        os.chmod(root, 0o777)
        (root / "later").mkdir()
        linux.mount(bytes(root), bytes(root), None, MS_BIND, None)
        linux.mount(None, bytes(root), None, MS_SHARED, None)
    plan = namespaces.plan(
        {"mount_namespace", "pid_namespace"}, 1 << 20, "",
        roots=((late, True), (late_ro, False), (outside, True)),
        system_dirs=tuple(Path(d) for d in ("/usr", "/bin", "/lib", "/lib64", "/etc")),
    )
    os.chdir(outside)
    where = (os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd())
    fds_before = len(os.listdir("/proc/self/fd"))

    templates = mntns.Templates(here=True)
    first, made = templates.make("t", plan.pooled_mounts)
    second, made_too = templates.make("t", plan.pooled_mounts)
    back = (os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd())
    # The host mounts beneath a shared root after the copies were made.
    for root in (late, late_ro, outside):
        linux.mount(b"tmpfs", bytes(root / "later"), b"tmpfs", 0, None)

    SCRIPT = '''
    try() { if "$@" 2>/dev/null; then echo "$*: done"; else echo "$*: refused"; fi; }
    cat /proc/self/mountinfo; echo ---
    try touch /x; try touch /usr/x; try touch /etc/x; try mkdir /tmp/../y
    try touch "$RO/x"; try touch "$RW/mine-$ME"; try touch "$OUT/mine-$ME"
    try mount -o remount,rw /; try umount /tmp; try umount -l /usr
    echo ---; ls -A /tmp /dev/shm; echo ---
    echo "$ME" > /tmp/mine-$ME; echo "$ME" > /dev/shm/mine-$ME
    '''

    def run(fd, me):
        r, w = os.pipe()
        exe = os.open("/bin/sh", os.O_RDONLY | os.O_CLOEXEC)
        env = [f"RO={late_ro}".encode(), f"RW={late}".encode(), f"OUT={outside}".encode(),
               f"ME={me}".encode(), b"PATH=/usr/bin:/bin:/usr/sbin:/sbin"]
        pid, _ = childsetup.spawn(childsetup.ChildPlan(
            exe_fd=exe, exe_path=None, argv=[b"sh", b"-c", SCRIPT.encode()], envp=env,
            stdio=(0, w, w), cwd_root=None, cwd=None, umask=0o022,
            clone_flags=namespaces.CLONE_NEWPID, mounts=list(plan.join_mounts), hostname=None,
            loopback_up=False, cgroup_fds=[], rlimits=[], oom_score_adj=None, loginuid=None,
            drop_caps=True, ids=(65534, 65534), no_new_privs=True, landlock_fd=-1,
            landlock_rules=[], seccomp_filter=b"", pdeathsig=9, cancel_fd=-1, life_fd=-1,
            mntns_fd=fd))
        os.close(w); os.close(exe)
        with os.fdopen(r) as f:
            out = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, out
        mountinfo, tries, tmp, _ = out.split("---\\n")
        return {
            "mounts": [line.split(" - ")[0].split()[4:] for line in mountinfo.splitlines()],
            "tries": dict(line.rsplit(": ", 1) for line in tries.splitlines()),
            "tmp": tmp.split(),
        }

    seen = [run(first, "a"), run(second, "b")]
    os.close(first); os.close(second)
    third, _ = templates.make("t", plan.pooled_mounts)  # after both wrote theirs
    seen.append(run(third, "c"))
    os.close(third)

    # A failed step: the error names it; the caller is home, nothing leaked.
    late_gone = Path(tempfile.mkdtemp(prefix="hostcap-tmpl-gone-"))
    broken = namespaces.plan(
        {"mount_namespace", "pid_namespace"}, 1 << 20, "", roots=((late_gone, True),),
        system_dirs=(Path("/usr"),),
    )
    late_gone.rmdir()
    failing = mntns.Templates(here=True)
    try:
        failing.make("b", broken.pooled_mounts)
        failure = None
    except childsetup.SetupError as error:
        failure = list(error.args)
    failing.close()
    after_failure = (os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd())

    # A template is made again once old, and for other steps; a copy's age is its template's.
    aging = mntns.Templates(here=True, max_age=1.0)  # two makes fit in it at any load
    fd, born = aging.make("t", plan.pooled_mounts); os.close(fd)
    fd, same = aging.make("t", plan.pooled_mounts); os.close(fd)
    time.sleep(1.2)
    fd, renewed = aging.make("t", plan.pooled_mounts); os.close(fd)
    other = namespaces.plan({"mount_namespace"}, 1 << 20, "", roots=((outside, True),),
                            system_dirs=(Path("/usr"),))
    fd, changed = aging.make("t", other.pooled_mounts); os.close(fd)
    idle = aging.next_expiry()
    time.sleep(1.2)
    aging.expire()
    templates.close()
    fds_after = len(os.listdir("/proc/self/fd"))
    print(json.dumps({
        "where": where, "back": back, "after_failure": after_failure, "seen": seen,
        "roots": [str(late), str(late_ro), str(outside)], "failure": failure,
        "enoent": errno.ENOENT, "made": [made, made_too], "ages": [born, same, renewed, changed],
        "idle": idle, "expired": aging.next_expiry(), "fds": [fds_before, fds_after],
    }))
    """
)


@needs_root
def test_copies_of_a_template_are_confined_private_and_each_spawns_own() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    late, late_ro, outside = result["roots"]
    # The caller's own namespace, root and cwd again, after copies and after a failure.
    assert result["back"] == result["where"] == result["after_failure"]
    assert result["failure"] == ["mount", result["enoent"]]
    assert result["fds"][1] == result["fds"][0]
    for me, seen in zip("abc", result["seen"], strict=True):
        points = [m[0] for m in seen["mounts"]]
        # Private: no mount has a peer group, and what the host mounted beneath
        # a (shared) root after the copy was made does not reach the spawn.
        assert all(len(m) == 2 for m in seen["mounts"]), seen["mounts"]
        # (c's copy was made after that mount: it is the host's view then.)
        assert me == "c" or not any(p.endswith("/later") for p in points), points
        # The new root holds only what the tenant may see.
        # The new root holds only what the tenant may see (and /dev's own mounts).
        assert {p for p in points if not p.startswith("/dev/") and "later" not in p} == {
            "/",
            "/usr",
            "/etc",
            "/dev",
            "/tmp",
            late,
            late_ro,
            outside,
            "/proc",
        }
        assert "/dev/shm" in points
        tries = seen["tries"]
        for attempt in (
            "touch /x",
            "touch /usr/x",
            "touch /etc/x",
            "mkdir /tmp/../y",
            f"touch {late_ro}/x",
            "mount -o remount,rw /",
            "umount /tmp",
            "umount -l /usr",
        ):
            assert tries[attempt] == "refused", (me, attempt)
        assert tries[f"touch {late}/mine-{me}"] == "done"
        assert tries[f"touch {outside}/mine-{me}"] == "done"
        # Its /tmp and /dev/shm are its own: empty but for the roots beneath
        # /tmp, whatever the copies before it (of the same template) wrote.
        assert sorted(seen["tmp"]) == sorted(
            ["/tmp:", os.path.basename(late), os.path.basename(late_ro), "/dev/shm:"]
        ), (me, seen["tmp"])
    # Copies of one template are dated by it; a template is made again once
    # old or for other steps, and closed once unused for its age.
    assert result["made"][0] == result["made"][1]
    born, same, renewed, changed = result["ages"]
    assert born == same < renewed < changed
    assert result["idle"] is not None and result["expired"] is None
