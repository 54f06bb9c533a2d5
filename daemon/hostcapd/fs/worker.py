"""The fs worker: one process per tenant that performs its file operations.

    python -I -m hostcapd.fs.worker FD [READS_FD REPORTS_FD GENERATION]

started by the daemon (`hostcapd.fs.client.FsWorker`) as a fresh
interpreter (never a fork of the gRPC process), with one end of a
socketpair as FD. The daemon has already opened, as root, what the
worker inherits (`Handover`): a directory fd per root and the landlock
ruleset, as the spawner prepares a child. The worker reads the `hello`
frame (its `WorkerSettings` and those fd numbers), then confines itself,
in this order:

1. umask from the tenant config;
2. the run-as identity: setgroups([]), setresgid, setresuid (never root);
3. parent-death signal again (the uid change cleared it) and a check that
   the parent is still there; not dumpable, no core files;
4. no_new_privs;
5. landlock_restrict_self with the ruleset: read-write roots get every file
   right, read-only roots read rights only, nothing else (every module the
   worker needs is imported by then);
6. a check that the run-as identity may read and search each root.

From then on every lookup beneath a root fd is the tenant's, under the
kernel's permission checks and landlock; nothing above the roots needs to
be reachable by the tenant. It answers `ready` with what it applied, and serves one request at a time
until the link closes; given the front-end's read link and its report link
(`hostcapd.fs.direct`, decision 0034), it serves the front-end's reads
too, the two links in turn. Single-threaded by design: landlock_restrict_self
confines the calling thread, and the frames are strictly request / reply.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import select
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import prctl

from hostcapd import linux
from hostcapd.applied import Applied, Unavailable
from hostcapd.errors import Refusal
from hostcapd.fs import content, messages
from hostcapd.fs.direct_worker import DirectServer
from hostcapd.fs.messages import ProtocolError
from hostcapd.fs.messages import WorkerSettings as WorkerSettings  # callers import it from here
from hostcapd.fs.ops import FsOperations
from hostcapd.fs.policy import PathPolicy
from hostcapd.fs.protocol import read_frame, write_frame
from hostcapd.fs.scope import FsScope, RootSpec
from hostcapd.sandbox import landlock

REQUIRED = "required"
BEST_EFFORT = "best-effort"
OFF = "off"


def _drop_identity(settings: WorkerSettings) -> Applied:
    required = settings.uid_drop == REQUIRED
    if settings.uid == 0 or settings.gid == 0:
        raise Unavailable(
            "the fs worker never runs as root, and the tenant's run-as identity is root"
        )
    if os.geteuid() != 0 or "uid_drop" in settings.simulate_unavailable:
        if os.geteuid() == 0:
            raise Unavailable(
                "the fs worker never runs as root, and uid_drop is unavailable (simulated)"
            )
        if (os.getuid(), os.getgid()) == (settings.uid, settings.gid):
            return Applied(
                "uid_drop", True, f"already uid {settings.uid} gid {settings.gid}", required
            )
        if required:
            raise Unavailable("uid_drop is required but the daemon is not root")
        return Applied(
            "uid_drop", False, f"the daemon is not root: running as uid {os.getuid()}", required
        )
    # A root daemon always drops, whatever the profile says: file access as
    # root is exactly what this worker exists to avoid.
    os.setgroups([])
    os.setresgid(settings.gid, settings.gid, settings.gid)
    os.setresuid(settings.uid, settings.uid, settings.uid)
    if (
        os.getresuid() != (settings.uid,) * 3
        or os.getresgid() != (settings.gid,) * 3
        or os.getgroups()
    ):
        raise Unavailable("the identity change did not take effect")
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise Unavailable("root could be regained after the identity change")
    return Applied(
        "uid_drop",
        True,
        f"uid {settings.uid} gid {settings.gid}, no supplementary groups",
        required,
    )


@dataclass
class Handover:
    """What the daemon opens for the worker, as root, before it starts:
    the roots' directory fds and the landlock ruleset (the way the spawner
    prepares a child). The roots then need no path the tenant could
    traverse above them; everything beneath is looked up as the tenant."""

    root_fds: list[int]
    ruleset_fd: int | None
    #: The landlock decision: applied (pending restrict_self) or why not.
    landlock: Applied

    def fds(self) -> list[int]:
        return [*self.root_fds, *([] if self.ruleset_fd is None else [self.ruleset_fd])]

    def to_hello(self) -> messages.HandedOver:
        return messages.HandedOver(self.root_fds, self.ruleset_fd, self.landlock)

    @classmethod
    def from_hello(cls, hello: messages.HandedOver) -> Handover:
        return cls(list(hello.root_fds), hello.ruleset_fd, hello.landlock)

    def close(self) -> None:
        for fd in self.fds():
            os.close(fd)


def prepare_handover(settings: WorkerSettings) -> Handover:
    """Open the roots and build the landlock ruleset (in the daemon).
    Raises Unavailable naming a root that cannot be opened, or a required
    landlock the host cannot provide."""
    root_fds: list[int] = []
    try:
        for root in settings.roots:
            try:
                root_fds.append(os.open(root.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            except OSError as error:
                raise Unavailable(
                    f"root {root.path} cannot be opened: {os.strerror(error.errno or 0)}"
                ) from None
        ruleset_fd, decision = _landlock_ruleset(settings)
    except BaseException:
        for fd in root_fds:
            os.close(fd)
        raise
    return Handover(root_fds, ruleset_fd, decision)


def _landlock_ruleset(settings: WorkerSettings) -> tuple[int | None, Applied]:
    required = settings.landlock == REQUIRED
    if settings.landlock == OFF:
        return None, Applied("landlock", False, "off in the tenant's profile", False)
    support = landlock.probe()
    if "landlock" in settings.simulate_unavailable:
        support = landlock.LandlockSupport(0, "unavailable (simulated by the profile)")
    if support.abi <= 0:
        if required:
            raise Unavailable(f"landlock is required but unavailable: {support.reason}")
        return None, Applied("landlock", False, support.reason, required)
    rules = landlock.LandlockRules(
        read_write=tuple(_paths(settings.roots, read_only=False)),
        read_only=tuple(_paths(settings.roots, read_only=True)),
        read_exec=(),
        dev_files=(),
        restrict_tcp=True,
        scope=True,
    )
    try:
        ruleset = landlock.build_ruleset(rules, support.abi)
    except (OSError, landlock.LandlockError) as error:
        if required:
            raise Unavailable(f"landlock is required but could not be built: {error}") from None
        return None, Applied("landlock", False, f"could not be built: {error}", required)
    return ruleset, Applied(
        "landlock", True, f"ABI {support.abi}, confined to the tenant's roots", required
    )


def _restrict(handover: Handover) -> Applied:
    decision = handover.landlock
    if handover.ruleset_fd is None:
        return decision
    try:
        linux.landlock_restrict_self(handover.ruleset_fd)
    except OSError as error:
        if decision.required:
            raise Unavailable(f"landlock is required but could not be applied: {error}") from None
        return Applied("landlock", False, f"could not be applied: {error}", False)
    finally:
        os.close(handover.ruleset_fd)
        handover.ruleset_fd = None
    return decision


def _paths(roots: Sequence[RootSpec], read_only: bool) -> list[Path]:
    return [Path(root.path) for root in roots if root.read_only == read_only]


def confine(settings: WorkerSettings, handover: Handover) -> tuple[list[Applied], FsOperations]:
    """The confinement sequence of the module docstring; raises Unavailable."""
    _warm_content()
    os.umask(settings.umask)
    applied = [_drop_identity(settings)]
    prctl.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != settings.parent_pid:
        raise Unavailable("the daemon went away during start-up")
    # No core dumps and no ptrace by other processes of the same uid: the
    # tenant's own spawns run as the worker's uid and must not attach to it.
    prctl.set_dumpable(False)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    prctl.set_no_new_privs(1)
    applied.append(Applied("no_new_privs", True, "set on the fs worker", False))
    applied.append(_restrict(handover))
    for root, fd in zip(settings.roots, handover.root_fds, strict=True):
        # O_PATH needed no permission; every lookup beneath will, as the tenant
        if not os.access(f"/proc/self/fd/{fd}", os.R_OK | os.X_OK):
            raise Unavailable(
                f"root {root.path} is not readable and searchable by uid {os.getuid()}"
            )
    root_fds = handover.root_fds
    operations = FsOperations(
        FsScope(settings.roots),
        root_fds,
        PathPolicy(settings.protected_paths, settings.secret_paths),
        follow_symlinks=settings.follow_symlinks,
        file_mode=settings.file_mode,
        dir_mode=settings.dir_mode,
        umask=settings.umask,
    )
    return applied, operations


def _warm_content() -> None:
    """What a read touches that landlock would later deny: the media type
    table (`mimetypes` reads /etc/mime.types once, whatever it is asked),
    hashlib's provider and the UTF-8 decoder, loaded now."""
    content.sniff(b"x\n", "x.py", cut_start=False, cut_end=False)  # builds the table
    hashlib.sha256(b"").hexdigest()


Reply = tuple[messages.Answer, bytes | bytearray, int | None]


def handle(operations: FsOperations, request: messages.Request, data: bytearray) -> Reply:
    """One request to its answer (and data, an fd to pass); refusals become
    `Refused` answers."""
    if operations.pending is not None and not isinstance(
        request, (messages.WriteCommit, messages.WriteAbort)
    ):
        operations.abort_write()  # a daemon that moved on: drop, never keep, the write
    op = request.__struct_config__.tag
    try:
        if isinstance(request, messages.OpenRead):
            opened, fd = operations.open_for_read(request.path)
            return messages.Opened(**opened), b"", fd
        if isinstance(request, messages.WritePrepare):
            prepared = operations.prepare_write(
                request.path,
                data,
                create_parents=request.create_parents,
                exclusive=request.exclusive,
                expected_sha256=request.expected_sha256,
            )
            return messages.Prepared(**prepared), b"", None
        if isinstance(request, messages.WriteCommit):
            operations.commit_write()
            return messages.Done(), b"", None
        if isinstance(request, messages.WriteAbort):
            operations.abort_write()
            return messages.Done(), b"", None
        if isinstance(request, messages.ListDirectory):
            listing = operations.list_directory(
                request.path, request.max_entries, request.depth, request.include_hidden
            )
            entries = [messages.Entry(**entry) for entry in listing.pop("entries")]
            return messages.Listing(entries=entries, **listing), b"", None
        return messages.Statted(**operations.stat(request.path)), b"", None
    except Refusal as refusal:
        return messages.Refused(refusal.reason, refusal.message), b"", None
    except OSError as error:
        # an errno nobody mapped: name it, never the path Python attaches
        name = errno.errorcode.get(error.errno or 0, "unknown")
        return messages.Refused("INTERNAL", f"{op}: unexpected {name}"), b"", None


def serve(
    sock: socket.socket,
    operations: FsOperations,
    max_data: int,
    direct: DirectServer | None = None,
) -> None:
    """Until the link closes; a request that is not one of ours ends it
    (ProtocolError: the daemon restarts the worker). With `direct`, the
    front-end's reads are served too, the two links in turn."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if direct is not None:
        poller.register(direct.link, select.POLLIN)
        direct.announce()
    while True:
        if direct is not None:
            timeout = direct.idle_timeout()
            ready = {fd for fd, _ in poller.poll(None if timeout is None else timeout * 1000)}
            if not ready:
                direct.flush()
                continue
            if direct.link.fileno() in ready:
                direct.serve_one()
                if not direct.open:
                    poller.unregister(direct.link)
                    direct.flush()
                    direct = None
            if sock.fileno() not in ready:
                continue
        try:
            header, data = read_frame(sock, max_data)
        except EOFError:
            break
        answer, content_, fd = handle(operations, messages.decode_request(header), data)
        del data
        try:
            write_frame(sock, answer, content_, fd)
        finally:
            if fd is not None:
                os.close(fd)
    operations.abort_write()
    if direct is not None:
        direct.flush()


def _direct(args: list[str], operations: FsOperations, max_read_bytes: int) -> DirectServer | None:
    """The front-end's read link and the report link, when given (decision 0034)."""
    if not args:
        return None
    link, reports, generation = (int(arg) for arg in args)
    return DirectServer(
        socket.socket(fileno=link),
        socket.socket(fileno=reports),
        operations,
        max_read_bytes,
        generation,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) not in (1, 4) or not all(arg.isdigit() for arg in args):
        print(
            "usage: python -m hostcapd.fs.worker FD [READS_FD REPORTS_FD GENERATION]"
            " (started by hostcapd)",
            file=sys.stderr,
        )
        return 2
    sock = socket.socket(fileno=int(args[0]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides when it stops
    try:
        header, _ = read_frame(sock, max_data=0)
        hello = messages.decode_hello(header)
        applied, operations = confine(hello.settings, Handover.from_hello(hello.handover))
    except EOFError:
        return 0
    except Unavailable as error:
        write_frame(sock, messages.Refused("PROTECTION_UNAVAILABLE", str(error)))
        return 1
    except (ProtocolError, ValueError) as error:
        write_frame(sock, messages.Refused("INTERNAL", f"bad hello frame: {error}"))
        return 2
    direct = _direct(args[1:], operations, hello.settings.max_read_bytes)
    write_frame(sock, messages.Ready(os.getpid(), applied))
    try:
        serve(sock, operations, hello.settings.max_write_bytes, direct)
    except (ProtocolError, ConnectionError):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
