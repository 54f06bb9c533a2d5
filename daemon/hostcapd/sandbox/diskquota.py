"""A disk budget per tenant: its read-write roots live on a file system image
of the budget's size, on a loop device.

    disks = DiskHost(state_dir / "disk")
    budget = disks.attach(tenant)      # image made once, mounted, roots bound onto it
    ...
    disks.detach_all()                 # at a clean stop

`<state>/disk/<tenant>.img` is an ext4 image of `disk.budget_bytes` (and
`disk.inodes`, if set), its space reserved on the host volume when it is made
(posix_fallocate), so whatever the tenant writes never takes more of that
volume: the audit log beside it never fills because of a tenant. It is
mounted (nodev, nosuid) at `<state>/disk/<tenant>.mnt` (mode 0700, not in any
sandbox's view), and each read-write root is bind-mounted from a directory
`root-<i>` in it, so all of them share the one budget. A write beyond it
fails ENOSPC, in the sandbox and in the fs worker alike (the file API says
QUOTA_EXCEEDED, RESOURCE_EXHAUSTED). When the image is first made, what the
root already held is copied in.

Why a loop image and not an ext4 project quota: a project quota needs the
volume made (or tune2fs'ed while unmounted) with the project feature and
mounted with prjquota, which an existing root file system rarely is; an
image needs only root, a loop device and mkfs.ext4 (e2fsprogs), and bounds
inodes as well as bytes (decision 0024).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hostcapd.config import Tenant, Tier

log = logging.getLogger("hostcapd.disk")

MECHANISM = "loop_image"
#: The smallest image mkfs.ext4 makes usefully (journal and metadata included).
MIN_BUDGET = 16 << 20
_TIMEOUT = 120.0


class DiskBudgetError(Exception):
    """A tenant's disk budget cannot be applied; the message says why."""


@dataclass(frozen=True)
class DiskBudget:
    """A tenant's budget as applied."""

    budget_bytes: int
    image: Path
    mount: Path
    #: The read-write roots bound from the image.
    roots: tuple[Path, ...]
    mechanism: str = MECHANISM

    def problem(self) -> str:
        """Why the budget no longer holds ("" while it does): its image is
        not mounted, or a read-write root is no longer bound from it (a
        spawn would write past the budget, on the host's volume)."""
        if not os.path.ismount(self.mount):
            return f"its image {self.image.name} is not mounted at {self.mount}"
        for root in self.roots:
            if not _same_mount(root, self.mount):
                return f"the root {root} is no longer on its image {self.image.name}"
        return ""


#: Where the tools are looked for (a service's PATH may lack the sbin dirs).
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _tool(name: str) -> str:
    found = shutil.which(name, path=TOOL_PATH)
    if found is None:
        raise DiskBudgetError(f"{name} not found (install e2fsprogs and util-linux)")
    return found


def _run(*argv: str) -> None:
    try:
        done = subprocess.run(
            [_tool(argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DiskBudgetError(f"{argv[0]}: {error}") from None
    if done.returncode != 0:
        raise DiskBudgetError(
            f"{' '.join(argv[:2])}: {(done.stderr or done.stdout).strip()[-300:]}"
        )


def _same_mount(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


@dataclass
class DiskHost:
    """Where the images live; None: budgets cannot be applied (no state dir)."""

    directory: Path | None
    attached: dict[str, DiskBudget] = field(default_factory=dict)

    def attach(self, tenant: Tenant) -> DiskBudget | None:
        """Apply the tenant's budget (None when it has none). Idempotent: an
        image already mounted (by this daemon, or one before it that crashed)
        is used as it is. Raises DiskBudgetError when it cannot be applied."""
        settings = tenant.disk
        if settings.budget_bytes is None:
            return None
        if self.directory is None:
            raise DiskBudgetError("no state directory for disk images")
        if os.geteuid() != 0:
            raise DiskBudgetError("daemon is not root (loop devices and mounts need it)")
        for tool in ("mkfs.ext4", "mount", "umount", "cp"):
            _tool(tool)
        roots = tuple(r.path for r in tenant.roots if r.tier is Tier.READ_WRITE)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        image = self.directory / f"{tenant.name}.img"
        mount = self.directory / f"{tenant.name}.mnt"
        fresh = not image.exists()
        if fresh:
            self._make_image(image, settings.budget_bytes, settings.inodes)
        elif image.stat().st_size != settings.budget_bytes:
            raise DiskBudgetError(
                f"{image.name} is {image.stat().st_size} bytes, the budget {settings.budget_bytes}: "
                "changing a budget is not supported (stop the daemon, move the data, remove the image)"
            )
        mount.mkdir(mode=0o700, exist_ok=True)
        if not os.path.ismount(mount):
            _run("mount", "-t", "ext4", "-o", "loop,nodev,nosuid,noatime", str(image), str(mount))
        try:
            for i, root in enumerate(roots):
                self._bind_root(mount / f"root-{i}", root, copy=fresh)
        except BaseException:
            self._detach_mounts(mount, roots)
            raise
        budget = DiskBudget(settings.budget_bytes, image, mount, roots)
        self.attached[tenant.name] = budget
        log.info(
            "tenant %s: %d-byte disk budget (%s) for %s",
            tenant.name,
            settings.budget_bytes,
            image,
            ", ".join(map(str, roots)),
        )
        return budget

    @staticmethod
    def _make_image(image: Path, size: int, inodes: int | None) -> None:
        partial = image.with_suffix(".img.partial")
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)  # reserved now: the host volume never pays later
            except OSError as error:
                raise DiskBudgetError(
                    f"cannot reserve {size} bytes for {image.name}: {error.strerror}"
                ) from None
        finally:
            os.close(fd)
        try:
            # Nothing may punch the reserved space out of the image: mke2fs
            # would discard it (nodiscard), and once mounted the kernel's
            # ext4lazyinit thread would zero the inode tables and the journal
            # through the loop device, which frees their blocks in the image
            # file, some 4 MiB of a 64 MiB image, 0-5 s after the mount. So
            # mke2fs initialises them itself (lazy_*_init=0).
            extended = "nodiscard,lazy_itable_init=0,lazy_journal_init=0"
            argv = ["mkfs.ext4", "-q", "-F", "-m", "0", "-L", "hostcap", "-E", extended]
            if inodes is not None:
                argv += ["-N", str(inodes)]
            _run(*argv, str(partial))
            os.rename(partial, image)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            raise

    @staticmethod
    def _bind_root(inside: Path, root: Path, *, copy: bool) -> None:
        root.mkdir(parents=True, exist_ok=True)
        if _same_mount(root, inside) and os.path.ismount(root):
            return  # already bound (a restart after a crash)
        new = not inside.exists()
        if new:
            inside.mkdir()
            st = root.stat()
            os.chown(inside, st.st_uid, st.st_gid)
            inside.chmod(st.st_mode & 0o7777)
            if copy and any(root.iterdir()):
                _run("cp", "-a", "--", f"{root}/.", str(inside))
        _run("mount", "--bind", str(inside), str(root))
        _run("mount", "-o", "remount,bind,nodev,nosuid", str(root))

    @staticmethod
    def _detach_mounts(mount: Path, roots: tuple[Path, ...]) -> None:
        for root in roots:
            if os.path.ismount(root) and _same_mount(root, mount):
                with contextlib.suppress(DiskBudgetError):
                    _run("umount", "--lazy", str(root))
        if os.path.ismount(mount):
            with contextlib.suppress(DiskBudgetError):
                _run("umount", "--lazy", str(mount))  # the loop device is freed with it

    def detach_all(self) -> None:
        """At a clean stop: unmount every tenant's roots and image."""
        for budget in self.attached.values():
            self._detach_mounts(budget.mount, budget.roots)
        self.attached.clear()
