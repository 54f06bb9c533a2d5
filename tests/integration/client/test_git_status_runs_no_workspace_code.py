"""git_status only reads (issue 29, item 5), over a real hostcapd.

The attack: a clean filter defined in `$HOME/.gitconfig` (HOME is the
workspace) and named in `.gitattributes`, then a touched tracked file, then
`git_status` in Plan with an empty allowlist. Before, git ran the filter as
the tenant. The files are planted on disk here, as a checkout would bring
them: writing them through hostcap is refused (the last tests).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import hostcap
import pytest
from client_daemon import Daemon, make_ctx
from hostcap import (
    ApprovalPolicy,
    ToolCall,
    ToolDeniedByUserError,
    ToolHostDeniedError,
    ToolPolicy,
    ToolPolicyError,
)

FILTER = '[filter "pwn"]\n\tclean = touch {marker} && cat\n\tsmudge = cat\n'


async def _setup_repository(registry: hostcap.ToolRegistry, daemon: Daemon) -> None:
    """A repository made by the tenant itself (so git trusts its owner), one commit."""
    (daemon.workspace / "sub").mkdir(exist_ok=True)
    (daemon.workspace / "tracked.txt").write_text("one\n")
    (daemon.workspace / "sub" / "nested.txt").write_text("two\n")
    os.chmod(daemon.workspace / "sub", 0o777)
    ctx = make_ctx(tool_policy=ToolPolicy(allowed_commands={"git"}))
    for n, argv in enumerate(
        (
            ["init", "-q"],
            ["add", "tracked.txt", "sub/nested.txt"],
            ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
        )
    ):
        outcome = await registry.dispatch(
            ToolCall(f"setup-{n}", "run_command", {"command": "git", "args": argv}), ctx
        )
        assert outcome.result.unwrap().exit_code == 0, outcome.tool_result.unwrap()


def _plan() -> hostcap.DispatchContext:
    # Plan, with no command allowed at all: git_status is the pre-approved read.
    policy = ApprovalPolicy("accept-edits", contract="plan")
    return make_ctx(tool_policy=ToolPolicy(), approval=policy.context())


def _touch(path: Path) -> None:
    text = path.read_text()
    path.write_text(text)  # same content, new mtime: git must re-hash it (and would filter it)
    os.utime(path, None)


@pytest.fixture
async def repository(registry: hostcap.ToolRegistry, daemon: Daemon) -> Path:
    if not (daemon.workspace / ".git").exists():
        await _setup_repository(registry, daemon)
    for planted in (".gitconfig", ".gitattributes", "sub/.gitattributes"):
        (daemon.workspace / planted).unlink(missing_ok=True)
    subprocess.run(
        ["git", "-C", str(daemon.workspace), "-c", "safe.directory=*", "config", "--local",
         "--remove-section", "filter.pwn"],
        capture_output=True, check=False,
    )  # fmt: skip
    return daemon.workspace


async def test_the_issues_attack_is_refused_and_runs_no_filter(
    registry: hostcap.ToolRegistry, repository: Path
) -> None:
    marker = repository / "pwned-top"
    (repository / ".gitconfig").write_text(FILTER.format(marker=marker.name))
    (repository / ".gitattributes").write_text("* filter=pwn\n")
    _touch(repository / "tracked.txt")
    # The control: the same files make a plain `git status` run the filter.
    env = {**os.environ, "HOME": str(repository)}
    subprocess.run(
        ["git", "-c", "safe.directory=*", "status", "--porcelain"],
        cwd=repository, env=env, capture_output=True, check=True,
    )  # fmt: skip
    assert marker.exists(), "the control did not run the filter: the attack is not set up"
    marker.unlink()
    _touch(repository / "tracked.txt")

    with pytest.raises(ToolPolicyError) as refused:
        await registry.dispatch(ToolCall("gs-attack-1", "git_status", {}), _plan())
    assert refused.value.reason == "unsafe_repository"
    assert ".gitattributes" in str(refused.value) and "filter" in str(refused.value)
    assert not marker.exists()


async def test_a_filter_named_where_the_check_does_not_look_still_does_not_run(
    registry: hostcap.ToolRegistry, daemon: Daemon, repository: Path
) -> None:
    # A nested .gitattributes is not read by the check; the driver it names
    # is defined only in $HOME/.gitconfig, which git_status's git never reads.
    marker = repository / "pwned-nested"
    (repository / ".gitconfig").write_text(FILTER.format(marker=marker.name))
    (repository / "sub" / ".gitattributes").write_text("* filter=pwn\n")
    _touch(repository / "sub" / "nested.txt")
    index_before = (repository / ".git" / "index").read_bytes()

    outcome = await registry.dispatch(ToolCall("gs-attack-2", "git_status", {}), _plan())
    result = outcome.result.unwrap()
    assert result.exit_code == 0, result.stderr
    assert "sub/.gitattributes" in result.stdout  # it did run: the status lists the new file
    assert not marker.exists()
    # --no-optional-locks: the read left .git/index as it was.
    assert (repository / ".git" / "index").read_bytes() == index_before
    [spawn] = daemon.records_for("gs-attack-2", "process.exec")
    assert "--no-optional-locks" in spawn["argv"]


async def test_a_filter_in_the_repositorys_own_config_is_refused(
    registry: hostcap.ToolRegistry, repository: Path
) -> None:
    marker = repository / "pwned-local"
    with (repository / ".git" / "config").open("a") as config:
        config.write(FILTER.format(marker=marker.name))
    (repository / "sub" / ".gitattributes").write_text("* filter=pwn\n")
    _touch(repository / "sub" / "nested.txt")
    with pytest.raises(ToolPolicyError) as refused:
        await registry.dispatch(ToolCall("gs-attack-3", "git_status", {}), _plan())
    assert ".git/config: a filter driver" in str(refused.value)
    assert not marker.exists()


@pytest.mark.parametrize("path", [".gitconfig", ".gitattributes", "sub/.gitattributes"])
async def test_writing_what_git_runs_from_is_refused_by_the_daemon_and_carded_by_the_client(
    registry: hostcap.ToolRegistry, daemon: Daemon, path: str
) -> None:
    call = ToolCall("gs-write-1", "write_file", {"path": path, "content": '[filter "x"]\n'})
    target = daemon.workspace / path
    before = target.read_bytes() if target.exists() else None
    # The daemon's floor, whatever the engine's approval says.
    with pytest.raises(ToolHostDeniedError) as floor:
        await registry.dispatch(call, make_ctx())
    assert floor.value.reason == "protected_path"
    # The client's approval: accept-edits takes a card for it (none wired here: refused).
    policy = ApprovalPolicy("accept-edits")
    with pytest.raises(ToolDeniedByUserError) as carded:
        await registry.dispatch(call, make_ctx(approval=policy.context()))
    assert carded.value.label == "the path is protected"
    assert (target.read_bytes() if target.exists() else None) == before
