"""landlock: a child under the ruleset attempts what the rules forbid."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcapd.sandbox import landlock
from sandbox_attempts import require_root, run_child, run_through_setup

SUPPORT = landlock.probe()
pytestmark = pytest.mark.skipif(SUPPORT.abi < 1, reason=f"no landlock: {SUPPORT.reason}")
ABI = SUPPORT.abi
SYSTEM = tuple(Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"))
DEV = tuple(
    Path(p)
    for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
)
CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE, MS_BIND = 1 << 14, 1 << 18, 1 << 12


class Tree:
    """A read-write root, a read-only root and something outside both."""

    def __init__(self, base: Path) -> None:
        self.rw = base / "rw"
        self.ro = base / "ro"
        self.outside = base / "outside"
        for d in (self.rw, self.ro, self.outside):
            d.mkdir()
        (self.ro / "notes.txt").write_text("read me")
        (self.outside / "secret.txt").write_text("not for the sandbox")
        shutil.copy("/bin/true", self.ro / "true")
        shutil.copy("/bin/true", self.rw / "true")

    def rules(
        self, *, restrict_tcp: bool = True, scope: bool = True, read_write: tuple[Path, ...] = ()
    ) -> landlock.LandlockRules:
        return landlock.LandlockRules(
            read_write=(self.rw, *read_write),
            read_only=(self.ro,),
            read_exec=SYSTEM,
            dev_files=DEV,
            restrict_tcp=restrict_tcp,
            scope=scope,
        )


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on loopback that accepts and closes; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def confined(
    rules: landlock.LandlockRules,
    attempts: list[tuple[str, object]],
    setup: list[list[object]] | None = None,
    abi: int = ABI,
) -> list[str]:
    fd = landlock.build_ruleset(rules, abi)
    try:
        return run_child(
            {"ruleset_fd": fd, "setup": setup or [], "attempts": attempts}, pass_fds=(fd,)
        )
    finally:
        os.close(fd)


def test_probe_reports_the_abi_and_what_it_restricts() -> None:
    assert SUPPORT.abi >= 1
    assert SUPPORT.reason == landlock.rights_summary(SUPPORT.abi)


@pytest.mark.parametrize(
    ("abi", "summary"),
    [
        (0, "no landlock"),
        (1, "ABI 1: fs"),
        (3, "ABI 3: fs"),
        (4, "ABI 4: fs, tcp"),
        (6, "ABI 6: fs, tcp, scope"),
        (7, "ABI 7: fs, tcp, scope"),
    ],
)
def test_rights_summary_names_what_each_abi_restricts(abi: int, summary: str) -> None:
    assert landlock.rights_summary(abi) == summary


def test_reading_or_writing_outside_the_rules_is_refused(tree: Tree) -> None:
    outcomes = confined(
        tree.rules(),
        [
            ("read", str(tree.outside / "secret.txt")),
            ("list", str(tree.outside)),
            ("write", str(tree.outside / "planted")),
            ("write", str(tree.ro / "planted")),
            ("write", str(tree.ro / "notes.txt")),
            ("truncate", str(tree.ro / "notes.txt")),
            ("mkdir", str(tree.ro / "dir")),
            ("exec", str(tree.ro / "true")),
            ("read", "/proc/self/status"),
        ],
    )
    assert outcomes == ["EACCES"] * 9
    assert not (tree.outside / "planted").exists()
    assert not (tree.ro / "planted").exists()
    assert (tree.ro / "notes.txt").read_text() == "read me"


def test_what_the_rules_grant_still_works(tree: Tree) -> None:
    outcomes = confined(
        tree.rules(),
        [
            ("read", str(tree.ro / "notes.txt")),
            ("list", str(tree.ro)),
            ("write", str(tree.rw / "made")),
            ("mkdir", str(tree.rw / "dir")),
            ("exec", str(tree.rw / "true")),
            ("exec", "/bin/true"),
            ("read", "/etc/hostname"),
            ("write", "/dev/null"),
            ("read", "/dev/urandom"),
        ],
    )
    assert outcomes == ["ok"] * 9
    assert (tree.rw / "made").read_bytes() == b"x"


def test_tcp_connect_and_bind_are_refused(tree: Tree, listener: int) -> None:
    if ABI < 4:
        pytest.skip("TCP rules need landlock ABI 4")
    assert confined(tree.rules(restrict_tcp=False), [("connect", listener)]) == ["ok"]
    assert confined(tree.rules(), [("connect", listener), ("bind", 0)]) == ["EACCES", "EACCES"]


def test_signals_and_abstract_sockets_do_not_leave_the_sandbox(tree: Tree) -> None:
    if ABI < 6:
        pytest.skip("scoping needs landlock ABI 6")
    outsider = subprocess.Popen(["sleep", "60"])
    name = f"hostcap-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + name)
    server.listen()
    try:
        attempts: list[tuple[str, object]] = [("signal", outsider.pid), ("abstract", name)]
        assert confined(tree.rules(scope=False), attempts) == ["ok", "ok"]
        assert confined(tree.rules(), attempts) == ["EPERM", "EPERM"]
        assert outsider.poll() is None
    finally:
        server.close()
        outsider.kill()
        outsider.wait()


def test_older_abis_build_and_leave_unknown_rights_alone(tree: Tree, listener: int) -> None:
    # An ABI 3 ruleset does not handle TCP: connect is not landlock's to refuse.
    outcomes = confined(tree.rules(), [("connect", listener), ("read", str(tree.outside))], abi=3)
    assert outcomes == ["ok", "EACCES"]
    for abi in range(1, ABI + 1):
        os.close(landlock.build_ruleset(tree.rules(), abi))


def test_template_builds_independent_rulesets(tree: Tree) -> None:
    template = landlock.RulesetTemplate(tree.rules(), ABI)
    try:
        first, second = template.build(), template.build()
        try:
            # A rule added to one ruleset (as the set-up adds mount rules) is not in the other.
            landlock.add_path_rule(first, tree.outside, landlock.READ_ONLY)
            attempts: list[tuple[str, object]] = [("read", str(tree.outside / "secret.txt"))]
            assert run_child({"ruleset_fd": first, "attempts": attempts}, (first,)) == ["ok"]
            assert run_child({"ruleset_fd": second, "attempts": attempts}, (second,)) == ["EACCES"]
        finally:
            os.close(first)
            os.close(second)
    finally:
        template.close()
    with pytest.raises(landlock.LandlockError):
        template.build()


@pytest.mark.usefixtures("no_fd_leak")
def test_bad_rules_are_refused_and_leave_nothing_open(tree: Tree) -> None:
    not_a_device = landlock.LandlockRules((), (), (), (tree.ro / "notes.txt",), True, True)
    with pytest.raises(landlock.LandlockError, match="not a character device"):
        landlock.build_ruleset(not_a_device, ABI)
    with pytest.raises(landlock.LandlockError, match="not available"):
        landlock.build_ruleset(tree.rules(), 0)
    missing = landlock.LandlockRules(
        (tree.rw / "absent",), (), (Path("/no/such/dir"),), (), True, True
    )
    os.close(landlock.build_ruleset(missing, ABI))


# ---- mounts made after the ruleset is built (the child's /tmp and /proc) ----


def _new_tmpfs(target: Path) -> list[list[object]]:
    return [
        ["unshare", CLONE_NEWNS],
        ["mount", None, "/", None, MS_REC | MS_PRIVATE, None],
        ["mount", "tmpfs", str(target), "tmpfs", 0, "size=1m"],
    ]


def test_a_rule_on_a_directory_does_not_reach_a_tmpfs_mounted_over_it(tree: Tree) -> None:
    """Kernel fact: landlock's walk up from a file skips the directory a mount
    sits on, so the host /tmp's rule does not cover the child's own tmpfs."""
    require_root()
    mountpoint = tree.outside / "tmp"
    mountpoint.mkdir()
    rules = tree.rules(read_write=(mountpoint,))
    attempts: list[tuple[str, object]] = [("write", str(mountpoint / "file"))]
    assert confined(rules, attempts) == ["ok"]  # the rule works on the directory itself
    assert confined(rules, attempts, setup=_new_tmpfs(mountpoint)) == ["EACCES"]


def test_a_rule_on_the_parent_of_a_mountpoint_does_reach_it(tree: Tree) -> None:
    # The walk skips the mountpoint but goes on to its parent: why a tenant
    # root's rule covers mounts inside it, and why a rule on / would cover all.
    require_root()
    mountpoint = tree.rw / "tmp"
    mountpoint.mkdir()
    outcomes = confined(
        tree.rules(), [("write", str(mountpoint / "file"))], setup=_new_tmpfs(mountpoint)
    )
    assert outcomes == ["ok"]


def test_a_rule_added_after_the_mount_covers_it(tree: Tree) -> None:
    require_root()
    mountpoint = tree.outside / "tmp"
    mountpoint.mkdir()
    ((path, access),) = landlock.mount_rules(ABI, proc=False, tmp=True)
    assert path == b"/tmp"
    setup = [*_new_tmpfs(mountpoint), ["rule", str(mountpoint), access]]
    outcomes = confined(
        tree.rules(),
        [
            ("write", str(mountpoint / "file")),
            ("mkdir", str(mountpoint / "dir")),
            ("read", str(tree.outside / "secret.txt")),
        ],
        setup=setup,
    )
    assert outcomes == ["ok", "ok", "EACCES"]


def test_a_bind_mount_keeps_a_rule_on_its_source_directory(tree: Tree) -> None:
    """The root of a bind mount is the source directory itself: a rule on that
    directory covers it wherever it is bound; a rule only on its parent does not."""
    require_root()
    ruled, unruled, target = tree.outside / "ruled", tree.rw / "unruled", tree.outside / "tmp"
    for d in (ruled, unruled, target):
        d.mkdir()

    def bind(source: Path) -> list[list[object]]:
        return [
            ["unshare", CLONE_NEWNS],
            ["mount", None, "/", None, MS_REC | MS_PRIVATE, None],
            ["mount", str(source), str(target), None, MS_BIND, None],
        ]

    rules = tree.rules(read_write=(ruled,))
    attempts: list[tuple[str, object]] = [("write", str(target / "file"))]
    assert confined(rules, attempts, setup=bind(ruled)) == ["ok"]
    assert (ruled / "file").exists()
    assert confined(rules, attempts, setup=bind(unruled)) == ["EACCES"]


def test_a_fresh_proc_needs_its_own_rule(tree: Tree) -> None:
    require_root()
    proc: list[list[object]] = [
        ["unshare", CLONE_NEWNS],
        ["mount", None, "/", None, MS_REC | MS_PRIVATE, None],
        ["mount", "proc", "/proc", "proc", 0, None],
    ]
    rules = landlock.LandlockRules(
        read_write=(tree.rw,),
        read_only=(tree.ro, Path("/proc")),
        read_exec=SYSTEM,
        dev_files=DEV,
        restrict_tcp=True,
        scope=True,
    )
    attempts: list[tuple[str, object]] = [("read", "/proc/self/status")]
    # The host's /proc inode has a rule; it no longer matters once a new procfs is over it.
    assert confined(rules, attempts) == ["ok"]
    assert confined(rules, attempts, setup=proc) == ["EACCES"]
    ((path, access),) = landlock.mount_rules(ABI, proc=True, tmp=False)
    assert confined(rules, attempts, setup=[*proc, ["rule", path.decode(), access]]) == ["ok"]


#: What namespaces.plan gives a child: private propagation, a fresh /proc, a tmpfs /tmp.
CHILD_MOUNTS = [
    (0, None, b"/", None, MS_REC | MS_PRIVATE, None),
    (0, b"proc", b"/proc", b"proc", 2 | 4 | 8, None),
    (0, b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, b"size=1m,mode=1777"),
]
CLONE_NEWPID = 0x20000000
SCRIPT = b"echo hi > /tmp/x && cat /tmp/x && ls /proc/self/fd"


def test_the_childs_own_tmp_and_proc_are_usable_with_mount_rules(tree: Tree) -> None:
    """Through the C set-up, which adds `mount_rules()` after its mounts."""
    require_root()
    template = landlock.RulesetTemplate(tree.rules(), ABI)
    rules = list(landlock.mount_rules(ABI, proc=True, tmp=True))
    outcomes = []
    try:
        for late in ([], rules):
            fd = template.build()
            try:
                outcomes.append(
                    run_through_setup(
                        [b"/bin/sh", b"-c", SCRIPT],
                        clone_flags=CLONE_NEWNS | CLONE_NEWPID,
                        mounts=CHILD_MOUNTS,
                        landlock_fd=fd,
                        landlock_rules=late,
                    )
                )
            finally:
                os.close(fd)
    finally:
        template.close()
    without, with_rules = outcomes
    assert without[0] != 0 and "Permission denied" in without[1]
    assert (with_rules[0], with_rules[1].split()) == (0, ["hi", "0", "1", "2", "3"])
