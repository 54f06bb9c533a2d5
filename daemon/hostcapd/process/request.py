"""A spawn request, validated and resolved before anything runs (step 1 of
the spawn sequence): argv, correlation fields, cwd, environment, limits and
the executable, each refused with its reason."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from hostcapd.config import Limits, Tenant
from hostcapd.errors import Refusal
from hostcapd.labels import validate_correlation
from hostcapd.linux import RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, openat2
from hostcapd.process import environment, executable, terminal
from hostcapd.process import limits as limits_mod
from hostcapd.sandbox.profile import ProtectionStatus

MAX_ARGV_BYTES = 1024 * 1024
MAX_ARG_BYTES = 128 * 1024
PATH_MAX = 4096


@dataclass(frozen=True)
class SpawnRequest:
    """A spawn request as plain values (the process service builds it from the
    channel's `SpawnCall`)."""

    argv: tuple[str, ...]
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    limits: Mapping[str, float | int] = field(default_factory=dict)
    request_id: str = ""
    dry_run: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Outlives its call; its output goes to an OutputLog (issue 30).
    detached: bool = False
    #: Runs in this open environment of the tenant (its namespaces).
    environment_id: str = ""
    #: Its stdin stays open for WriteStdin (issue 31); a tty implies it.
    stdin_open: bool = False
    #: (rows, cols): it runs on a terminal of its own of this size.
    tty: tuple[int, int] | None = None

    @property
    def input_open(self) -> bool:
        return self.stdin_open or self.tty is not None


@dataclass
class Prepared:
    """Everything decided before anything runs."""

    exe: executable.ResolvedExecutable
    argv: tuple[str, ...]
    cwd: Cwd
    env: dict[str, str]
    limits: Limits
    #: The protections as applied to this spawn (the profile's, adjusted).
    protections: tuple[ProtectionStatus, ...]

    def close(self) -> None:
        self.exe.close()

    @property
    def by_fd(self) -> bool:
        return any(s.name == "exec_by_fd" and s.applied for s in self.protections)


@dataclass(frozen=True)
class Cwd:
    """A validated cwd: the root it lies beneath and the path relative to it.
    The child opens it again beneath the root in its own mount namespace."""

    path: str
    root: str
    relative: str


def resolve_cwd(cwd: str, tenant: Tenant) -> Cwd:
    """Check the cwd resolves beneath a root, with openat2(RESOLVE_BENEATH):
    no `..`, symlink or magic link may leave it."""
    if "\0" in cwd:
        raise Refusal("INVALID_ARGUMENT", "cwd contains a NUL byte")
    if os.path.isabs(cwd):
        lexical = os.path.normpath(cwd)
        for root in tenant.roots:
            r = str(root.path)
            if lexical == r or lexical.startswith(r + "/"):
                base, rel = r, os.path.relpath(lexical, r)
                break
        else:
            raise Refusal("PATH_ESCAPES_ROOT", f"cwd {cwd!r} is outside the tenant's roots")
    else:
        base, rel = str(tenant.primary_root.path), cwd or "."
    if os.path.normpath(rel) == ".":
        # The root itself: no lookup (one stat, where an open and a close
        # said the same). Even "." beneath it needs search permission,
        # which root lacks under the unit (no CAP_DAC_*) on a root private
        # to the tenant (0700, the example's workspace).
        if not os.path.isdir(base):
            raise Refusal("NOT_FOUND", "the tenant root does not exist")
        return Cwd(base, base, ".")
    try:
        root_fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise Refusal("NOT_FOUND", "the tenant root does not exist") from None
    try:
        fd = openat2(
            root_fd, rel, os.O_PATH | os.O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
        )
    except OSError as error:
        if error.errno in (errno.EXDEV, errno.ELOOP):
            raise Refusal(
                "PATH_ESCAPES_ROOT", f"cwd {cwd!r} resolves outside the tenant's roots"
            ) from None
        lexical_rel = os.path.normpath(rel)
        if error.errno == errno.EACCES and not lexical_rel.startswith(("..", "/")):
            # Root cannot search a root private to the tenant (the unit keeps
            # no CAP_DAC_*). The child resolves it again as the tenant, with
            # openat2(RESOLVE_BENEATH) from the root it opened (apply_cwd),
            # which is what confines it; a cwd that is not there fails there.
            return Cwd(os.path.join(base, lexical_rel), base, lexical_rel)
        raise Refusal(
            "NOT_FOUND", f"cwd {cwd!r} is not a directory in the tenant's roots"
        ) from None
    finally:
        os.close(root_fd)
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return Cwd(resolved, base, rel)


def validate_argv(argv: tuple[str, ...]) -> None:
    if not argv:
        raise Refusal("INVALID_ARGUMENT", "argv must not be empty")
    total = 0
    for arg in argv:
        if "\0" in arg:
            raise Refusal("INVALID_ARGUMENT", "argv contains a NUL byte")
        size = len(arg.encode())
        if size > MAX_ARG_BYTES:
            raise Refusal("TOO_LARGE", f"an argument is longer than {MAX_ARG_BYTES} bytes")
        total += size + 1 + 8
        if total > MAX_ARGV_BYTES:
            raise Refusal("TOO_LARGE", f"argv is larger than {MAX_ARGV_BYTES} bytes")


def prepare(
    request: SpawnRequest,
    tenant: Tenant,
    protections: tuple[ProtectionStatus, ...],
    hash_cache: executable.HashCache,
) -> Prepared:
    """Step 1 of the spawn sequence: validate and resolve everything, for a
    dry run and a real one alike. `protections` are the tenant profile's."""
    validate_correlation(request.labels, request.request_id)
    validate_argv(request.argv)
    if len(request.cwd.encode()) > PATH_MAX:
        raise Refusal("INVALID_ARGUMENT", f"cwd is longer than {PATH_MAX} bytes")
    applied = limits_mod.apply(dict(request.limits), tenant.limits)
    env = environment.build(tenant, request.env)
    if request.tty is not None:
        terminal.check_size(*request.tty)
        if not any(s.name == "mount_namespace" and s.applied for s in protections):
            # Its devpts instance is mounted in its own mount namespace.
            raise Refusal(
                "PROTECTION_UNAVAILABLE",
                "a terminal needs the mount_namespace protection (a devpts instance of the "
                "spawn's own), which this tenant's profile does not apply",
            )
        if "TERM" not in request.env:
            env["TERM"] = terminal.DEFAULT_TERM
    cwd = resolve_cwd(request.cwd, tenant)
    exe = executable.resolve(
        request.argv[0], tenant.path, tenant.allowed_executable_dirs, hash_cache
    )
    if exe.is_script:
        # The kernel cannot hand a close-on-exec fd to a script's interpreter.
        protections = tuple(
            ProtectionStatus(
                s.name, False, "a #! script is exec'd by its resolved path", s.required
            )
            if s.name == "exec_by_fd" and s.applied
            else s
            for s in protections
        )
    return Prepared(
        exe=exe,
        argv=request.argv,
        cwd=cwd,
        env=env,
        limits=applied,
        protections=protections,
    )
