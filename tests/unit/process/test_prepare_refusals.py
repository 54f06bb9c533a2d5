"""`prepare` on its own, without a spawn: a request is validated and resolved
before anything runs, each bad field refused with its typed reason, and a
refusal leaves no fd open behind it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostcapd.config import Tenant
from hostcapd.errors import Refusal
from hostcapd.process.executable import HashCache
from hostcapd.process.request import (
    MAX_ARG_BYTES,
    MAX_ARGV_BYTES,
    PATH_MAX,
    Prepared,
    SpawnRequest,
    prepare,
)
from hostcapd.sandbox.profile import ProtectionStatus

CEILING = {
    "cpu_seconds": 60.0,
    "memory_bytes": 1 << 30,
    "wall_seconds": 600.0,
    "pids": 256,
    "output_bytes": 1 << 20,
    "file_size_bytes": 1 << 30,
    "open_files": 1024,
    "total_output_bytes": 1 << 24,
}
BY_FD = (ProtectionStatus("exec_by_fd", True, "", True),)


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    work, other = tmp_path / "work", tmp_path / "other"
    (work / "src").mkdir(parents=True)
    other.mkdir()
    (tmp_path / "outside").mkdir()
    (work / "out").symlink_to(tmp_path / "outside")
    (work / "bin").mkdir()
    script = work / "bin" / "hello"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    (work / "bin" / "plain").write_text("not executable\n")
    return work, other


@pytest.fixture
def tenant(tmp_path: Path, roots: tuple[Path, Path]) -> Tenant:
    return Tenant.model_validate(
        {
            "name": "unit",
            "socket": str(tmp_path / "unit.sock"),
            "run_as_user": 65534,
            "run_as_group": 65534,
            "roots": [{"path": str(r)} for r in roots],
            "env": {"PATH": "/usr/bin:/bin"},
            "env_allowlist": ["LANG", "TERM"],
            "limits": {"default": {"wall_seconds": 30.0}, "ceiling": CEILING},
        }
    )


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def run(tenant: Tenant) -> Iterator[Any]:
    opened: list[Prepared] = []

    def run(argv: tuple[str, ...] = ("true",), **fields: Any) -> Prepared:
        prepared = prepare(SpawnRequest(argv=argv, **fields), tenant, BY_FD, HashCache())
        opened.append(prepared)
        return prepared

    yield run
    for prepared in opened:
        prepared.close()


def refused(run: Any, argv: tuple[str, ...] = ("true",), **fields: Any) -> Refusal:
    """The refusal of a request; it must leave no fd open."""
    before = _open_fds()
    with pytest.raises(Refusal) as raised:
        run(argv, **fields)
    assert _open_fds() == before, "a refused request left an fd open"
    return raised.value


def test_a_valid_request_is_resolved_with_the_tenants_defaults(
    run: Any, roots: tuple[Path, Path]
) -> None:
    prepared = run(("true", "x"), cwd="src", env={"LANG": "C"}, limits={"cpu_seconds": 5})
    assert prepared.argv == ("true", "x")
    assert os.path.basename(prepared.exe.path) == "true" and prepared.exe.fd >= 0
    assert (prepared.cwd.root, prepared.cwd.relative) == (str(roots[0]), "src")
    assert prepared.cwd.path == str(roots[0] / "src")
    assert prepared.env == {"PATH": "/usr/bin:/bin", "LANG": "C"}
    assert prepared.limits.cpu_seconds == 5  # asked
    assert prepared.limits.wall_seconds == 30.0  # the tenant's default
    assert prepared.limits.pids == 256  # no default: the ceiling
    assert prepared.by_fd


def test_an_absolute_cwd_in_a_second_root_is_beneath_that_root(
    run: Any, roots: tuple[Path, Path]
) -> None:
    prepared = run(cwd=str(roots[1]))
    assert (prepared.cwd.root, prepared.cwd.relative) == (str(roots[1]), ".")


def test_a_script_is_exec_by_path_and_says_so(run: Any, roots: tuple[Path, Path]) -> None:
    prepared = run((str(roots[0] / "bin" / "hello"),))
    assert prepared.exe.is_script and not prepared.by_fd
    (status,) = prepared.protections
    assert not status.applied and "script" in status.reason


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        ((), "INVALID_ARGUMENT"),
        (("true", "a\0b"), "INVALID_ARGUMENT"),
        (("true", "x" * (MAX_ARG_BYTES + 1)), "TOO_LARGE"),
        (
            ("true", *["x" * (MAX_ARG_BYTES // 2)] * (2 * MAX_ARGV_BYTES // MAX_ARG_BYTES)),
            "TOO_LARGE",
        ),
    ],
    ids=["empty", "nul", "one_too_long", "all_too_long"],
)
def test_a_bad_argv_is_refused(run: Any, argv: tuple[str, ...], reason: str) -> None:
    assert refused(run, argv).reason == reason


@pytest.mark.parametrize(
    ("cwd", "reason"),
    [
        ("src\0", "INVALID_ARGUMENT"),
        ("x" * (PATH_MAX + 1), "INVALID_ARGUMENT"),
        ("../outside", "PATH_ESCAPES_ROOT"),
        ("src/../../outside", "PATH_ESCAPES_ROOT"),
        ("out", "PATH_ESCAPES_ROOT"),  # a symlink out of the root
        ("/proc/self/root", "PATH_ESCAPES_ROOT"),
        ("/", "PATH_ESCAPES_ROOT"),
        ("missing", "NOT_FOUND"),
        ("bin/hello", "NOT_FOUND"),  # a file, not a directory
    ],
    ids=[
        "nul",
        "too_long",
        "dotdot",
        "dotdot_inside",
        "symlink_out",
        "magic_link",
        "host_root",
        "missing",
        "not_a_directory",
    ],
)
def test_a_cwd_that_escapes_or_is_not_there_is_refused(run: Any, cwd: str, reason: str) -> None:
    assert refused(run, cwd=cwd).reason == reason


def test_an_absolute_cwd_beside_a_root_is_not_beneath_it(
    run: Any, roots: tuple[Path, Path]
) -> None:
    # A prefix of the name is not a parent: <root>-evil is outside <root>.
    sibling = Path(str(roots[0]) + "-evil")
    sibling.mkdir()
    assert refused(run, cwd=str(sibling)).reason == "PATH_ESCAPES_ROOT"


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"HOME": "/root"}, "ENV_NOT_ALLOWED"),  # not in the allowlist
        ({"LD_PRELOAD": "/tmp/x.so"}, "ENV_NOT_ALLOWED"),  # never, whatever the list
        ({"BAD NAME": "x"}, "ENV_NOT_ALLOWED"),
        ({"LANG": "C\0x"}, "INVALID_ARGUMENT"),
        ({"LANG": "x" * (256 * 1024)}, "TOO_LARGE"),
    ],
    ids=["not_allowed", "forbidden", "bad_name", "nul", "too_large"],
)
def test_an_env_the_tenant_does_not_allow_is_refused(
    run: Any, env: dict[str, str], reason: str
) -> None:
    assert refused(run, env=env).reason == reason


@pytest.mark.parametrize(
    "limits",
    [
        {"cpu_seconds": 61.0},
        {"memory_bytes": (1 << 30) + 1},
        {"pids": 0},
        {"open_files": -1},
        {"wall_seconds": float("inf")},
        {"wall_seconds": float("nan")},
    ],
    ids=["cpu_above_ceiling", "memory_above_ceiling", "zero", "negative", "inf", "nan"],
)
def test_a_limit_outside_the_ceiling_is_refused_never_clamped(
    run: Any, limits: dict[str, float]
) -> None:
    assert refused(run, limits=limits).reason == "LIMIT_INVALID"


def test_a_limit_at_the_ceiling_and_a_zero_output_are_accepted(run: Any) -> None:
    prepared = run(limits={"cpu_seconds": 60.0, "output_bytes": 0})
    assert (prepared.limits.cpu_seconds, prepared.limits.output_bytes) == (60.0, 0)


@pytest.mark.parametrize(
    ("argv0", "reason"),
    [
        ("bin/true", "EXECUTABLE_NOT_ALLOWED"),  # a slash, not absolute
        ("no-such-command-hostcap", "EXECUTABLE_NOT_FOUND"),
        ("..", "EXECUTABLE_NOT_FOUND"),
        ("/etc/passwd", "EXECUTABLE_NOT_ALLOWED"),  # not executable
        ("/nonexistent/true", "EXECUTABLE_NOT_ALLOWED"),
    ],
    ids=["relative_path", "not_on_path", "dotdot", "not_executable", "missing"],
)
def test_an_executable_that_cannot_be_resolved_is_refused(
    run: Any, argv0: str, reason: str
) -> None:
    assert refused(run, (argv0,)).reason == reason


def test_an_executable_outside_the_allowed_dirs_is_refused(
    tenant: Tenant, roots: tuple[Path, Path]
) -> None:
    confined = tenant.model_copy(update={"allowed_executable_dirs": (roots[0] / "bin",)})
    hello = str(roots[0] / "bin" / "hello")
    prepared = prepare(SpawnRequest(argv=(hello,)), confined, BY_FD, HashCache())
    prepared.close()
    before = _open_fds()
    # By path: refused; by name: what PATH finds outside the dirs is skipped.
    for argv0, reason in (
        ("/bin/true", "EXECUTABLE_NOT_ALLOWED"),
        ("true", "EXECUTABLE_NOT_FOUND"),
    ):
        with pytest.raises(Refusal) as raised:
            prepare(SpawnRequest(argv=(argv0,)), confined, BY_FD, HashCache())
        assert raised.value.reason == reason
    assert _open_fds() == before


@pytest.mark.parametrize(
    "fields",
    [
        {"request_id": "r" * 257},
        {"labels": {f"k{i}": "v" for i in range(33)}},
        {"labels": {"": "v"}},
        {"labels": {"k": "v" * 1025}},
    ],
    ids=["request_id_too_long", "too_many_labels", "empty_label_key", "label_too_long"],
)
def test_bad_correlation_fields_are_refused(run: Any, fields: dict[str, Any]) -> None:
    assert refused(run, **fields).reason == "INVALID_ARGUMENT"


def test_the_allowed_dirs_are_checked_against_the_file_opened(
    tmp_path: Path, tenant: Tenant, roots: tuple[Path, Path]
) -> None:
    bin_dir = roots[0] / "bin"
    confined = tenant.model_copy(update={"allowed_executable_dirs": (bin_dir,)})
    (bin_dir / "escape").symlink_to("/bin/true")  # in the dir, a file outside it
    (tmp_path / "into").symlink_to(bin_dir / "hello")  # outside, a file in it
    before = _open_fds()
    with pytest.raises(Refusal) as raised:
        prepare(SpawnRequest(argv=(str(bin_dir / "escape"),)), confined, BY_FD, HashCache())
    assert raised.value.reason == "EXECUTABLE_NOT_ALLOWED"
    assert "not inside an allowed executable directory" in raised.value.message
    with pytest.raises(Refusal) as raised:
        prepare(SpawnRequest(argv=(str(bin_dir / "plain"),)), confined, BY_FD, HashCache())
    assert "not an executable file" in raised.value.message
    prepared = prepare(SpawnRequest(argv=(str(tmp_path / "into"),)), confined, BY_FD, HashCache())
    try:
        assert prepared.exe.path == str(bin_dir / "hello")
        assert os.readlink(f"/proc/self/fd/{prepared.exe.fd}") == str(bin_dir / "hello")
    finally:
        prepared.close()
    assert _open_fds() == before
