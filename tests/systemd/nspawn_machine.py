"""A Debian 12 machine with systemd as pid 1, in systemd-nspawn, with
hostcapd installed by the steps of docs/install.md: what `make test-systemd`
runs the unit's tests against.

The root is made once by `make systemd-root` (debootstrap, Debian's own
packages) and kept in $HOSTCAP_SYSTEMD_STATE; each run boots a throwaway
overlay of it, so the cached root never changes.

1. **Install** (`systemd-nspawn` running a shell, not booted): the repository
   goes in as a `git archive` of the working tree (tracked and untracked
   files, as `docs/install.md` allows: a tarball carries the version), then
   the shell blocks of install.md's *Steps* 1-4 run as written, with two
   substitutions: ENGINE_USER and OPS_USER are users the test makes, and
   the example tenant's `cgroup = "required"` becomes `"best-effort"` right
   after the config is installed (this host's cgroup v1 controllers are
   read-only inside the container; see docs/operations.md). This phase
   shares the host's network, for apt and pip: the registry is reached as
   the host reaches it, through the host's CA bundle when the host has one
   (a TLS-inspecting proxy), and pip's cache is kept beside the root.
2. **Boot**: `systemd-nspawn --boot`, confined as nspawn confines a container
   except for what each flag below opens, then install.md's step 5 (the unit,
   `systemctl enable --now`) runs inside it. Commands are run in the
   container's namespaces with nsenter (this host's pid 1 is not systemd, so
   there is no machined to ask).

Flags, and why each:

- `--register=no --keep-unit`: no machined and no systemd on this host to
  register with or to make a scope; the container stays in the cgroup of
  whoever starts it.
- `--private-network`: a network namespace of its own. nspawn keeps
  CAP_NET_ADMIN only for a container with a private network, and hostcapd
  needs it to bring up loopback in each spawn's network namespace; the
  booted machine also has no network then, which nothing in it needs.
- `--system-call-filter=landlock_create_ruleset landlock_add_rule
  landlock_restrict_self`: nspawn's own seccomp allow-list (systemd 252)
  predates landlock and refuses it; hostcapd requires landlock for its
  front-ends and the example tenant.

Nothing else is opened: nspawn's capability set (without CAP_SYS_MODULE,
CAP_SYS_TIME, CAP_SYS_RAWIO, …), its device policy and its read-only
/proc/sys and /sys stay as they are.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALL_DOC = REPO / "docs" / "install.md"
STATE = Path(os.environ.get("HOSTCAP_SYSTEMD_STATE", REPO / ".hostcap" / "systemd-test"))
ROOT = STATE / "debian12"
ROOT_STAMP = STATE / "debian12.stamp"
PIP_CACHE = STATE / "pip-cache"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
SOURCE = "/root/hostcap"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NSPAWN_SYSCALLS = "landlock_create_ruleset landlock_add_rule landlock_restrict_self"
#: The users install.md's step 4 names.
ENGINE_USER, OPS_USER = "engine", "ops"


def install_steps() -> list[str]:
    """The ```sh blocks of install.md's *Steps* section, in order."""
    text = INSTALL_DOC.read_text()
    steps = text.split("\n## Steps\n", 1)[1].split("\n## ", 1)[0]
    return [block for block in re.findall(r"```sh\n(.*?)```", steps, re.S)]


def adapted(block: str) -> str:
    """A block as the test runs it: the placeholders filled in, and the
    example tenant's cgroup made best-effort as soon as the config exists."""
    lines = []
    for line in block.replace("ENGINE_USER", ENGINE_USER).replace("OPS_USER", OPS_USER).split("\n"):
        line = line.strip()  # the blocks are indented under their list item
        lines.append(line)
        if line.startswith("install ") and line.endswith("/etc/hostcap/hostcapd.toml"):
            lines.append(
                'sed -i \'s/^cgroup = "required"/cgroup = "best-effort"/\' '
                "/etc/hostcap/hostcapd.toml"
            )
    return "\n".join(lines)


def export_source(dest: Path) -> None:
    """The working tree (tracked and untracked files, not ignored ones) as a
    `git archive`, extracted into dest: a throwaway commit object made
    through a scratch index, so neither the index nor a branch changes."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}

        def git(*argv: str) -> str:
            done = subprocess.run(
                ["git", *argv], cwd=REPO, env=env, capture_output=True, text=True, check=True
            )
            return done.stdout.strip()

        git("read-tree", "HEAD")
        git("add", "-A")
        tree = git("write-tree")
        commit = git("commit-tree", "-p", "HEAD", "-m", "test-systemd snapshot", tree)
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(["git", "archive", commit], cwd=REPO, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
        assert archive.wait() == 0


@dataclass
class Machine:
    run_dir: Path
    timings: dict[str, float] = field(default_factory=dict)
    nspawn: subprocess.Popen[bytes] | None = None
    leader: int = 0

    @property
    def merged(self) -> Path:
        return self.run_dir / "merged"

    # --- set-up ---------------------------------------------------------------

    def mount(self) -> None:
        self.unmount()
        for name in ("upper", "work", "merged"):
            (self.run_dir / name).mkdir(parents=True)
        options = (
            f"lowerdir={ROOT},upperdir={self.run_dir / 'upper'},workdir={self.run_dir / 'work'}"
        )
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(self.merged)], check=True
        )

    def unmount(self) -> None:
        if self.merged.exists():
            subprocess.run(["umount", "-l", str(self.merged)], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.run_dir)], check=True)

    def install(self) -> subprocess.CompletedProcess[str]:
        """install.md's steps 1-4, in a non-booted container with the host's network."""
        export_source(self.merged / SOURCE.lstrip("/"))
        steps = install_steps()
        assert len(steps) == 5, f"install.md's Steps have {len(steps)} shell blocks, not 5"
        script = "\n".join(
            [
                "set -ex",
                f"useradd --create-home {ENGINE_USER}",
                f"useradd --create-home {OPS_USER}",
                *(adapted(block) for block in steps[:4]),
            ]
        )
        PIP_CACHE.mkdir(parents=True, exist_ok=True)
        argv = [
            "systemd-nspawn", "--quiet", "-D", str(self.merged),
            "--register=no", "--keep-unit", f"--chdir={SOURCE}",
            # check-config (step 3) probes landlock, as the daemon does.
            f"--system-call-filter={NSPAWN_SYSCALLS}",
            f"--bind={PIP_CACHE}:/root/.cache/pip",
            "--setenv=DEBIAN_FRONTEND=noninteractive",
        ]  # fmt: skip
        if HOST_CA.exists():
            argv += [
                f"--bind-ro={HOST_CA}:/etc/ssl/host-ca.crt",
                "--setenv=PIP_CERT=/etc/ssl/host-ca.crt",
            ]
        started = time.monotonic()
        done = subprocess.run(
            [*argv, "/bin/sh", "-c", script],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        self.timings["install (steps 1-4)"] = time.monotonic() - started
        return done

    def boot(self) -> None:
        log = (self.run_dir / "console.log").open("wb")
        started = time.monotonic()
        self.nspawn = subprocess.Popen(
            [
                "systemd-nspawn",
                "--quiet",
                "-D",
                str(self.merged),
                "--boot",
                "--register=no",
                "--keep-unit",
                "--private-network",
                f"--system-call-filter={NSPAWN_SYSCALLS}",
                "--machine=hostcap-test",
                "--console=passive",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while not self.leader and time.monotonic() < deadline:
            time.sleep(0.1)
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children")
                found = children.read_text().split()
                if found:
                    self.leader = int(found[0])
            if self.nspawn.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited {self.nspawn.returncode}")
        assert self.leader, "no container pid 1 within 120 s"
        while time.monotonic() < deadline:
            state = self.sh("systemctl is-system-running --wait", timeout=120).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"the container did not finish booting: {state}")
        self.timings["boot"] = time.monotonic() - started

    def poweroff(self) -> None:
        if self.nspawn is None or self.nspawn.poll() is not None:
            return
        # nspawn turns SIGTERM into the container's poweroff (SIGRTMIN+3 to its pid 1).
        self.nspawn.send_signal(signal.SIGTERM)
        try:
            self.nspawn.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.nspawn.pid, signal.SIGKILL)
            self.nspawn.wait(10)

    # --- inside ---------------------------------------------------------------

    def sh(
        self, script: str, user: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """`sh -c script` in the booted container's namespaces, as root or `user`."""
        argv = ["sh", "-c", script]
        if user is not None:
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *argv]
        return subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a",
             "env", "-i", f"PATH={PATH}", "LANG=C.UTF-8", "HOME=/root", *argv],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def ok(self, script: str, user: str | None = None, timeout: float = 60) -> str:
        done = self.sh(script, user, timeout)
        assert done.returncode == 0, f"{script}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        return done.stdout

    def show(self, *properties: str) -> dict[str, str]:
        out = self.ok(f"systemctl show hostcapd -p {','.join(properties)}")
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_for(self, script: str, timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sh(script).returncode == 0:
                return True
            time.sleep(0.2)
        return False


def quote(text: str) -> str:
    return shlex.quote(text)
