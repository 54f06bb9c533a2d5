"""git_status only reads (issue 29, item 5): the config and attributes it
refuses, the flags and environment git runs with, and the paths both the
client and the daemon protect. The attack itself runs over hostcapd in
tests/integration/client/test_git_status_runs_no_workspace_code.py."""

from __future__ import annotations

from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import BUILTIN_TOOLS, ToolCall, ToolPolicy, ToolPolicyError, create_tool_registry
from hostcap.approval import DEFAULT_PROTECTED_PATHS, path_matches
from hostcap.builtins.git_safety import attributes_refusals, config_refusals
from hostcap.testing import MemoryToolHost
from hostcap.testing.memory_fs import DEFAULT_PROTECTED
from hostcapd.config import DEFAULT_PROTECTED_PATHS as DAEMON_PROTECTED

SAFE_CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = false ; a comment
[remote "origin"]
\turl = https://example.com/r.git
[diff]
\trenames = true
[branch "main"] remote = origin
"""


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ('[filter "lfs"]\n\tclean = git-lfs clean -- %f\n', "a filter driver"),
        ("[filter.old]\n\tclean = x\n", "a filter driver"),
        ('[diff "pdf"]\n\ttextconv = pdftotext\n', "a diff driver"),
        ("[diff]\n\texternal = difftool\n", "a diff driver"),
        ("[include]\n\tpath = ../elsewhere\n", "an include of another config file"),
        ('[includeIf "gitdir:/"]\n\tpath = x\n', "an include of another config file"),
        ("[extensions]\n\tworktreeConfig = true\n", "per-worktree config"),
        ("[core\n", "a config line git_status cannot read"),
        ("[core]\n\tnot a key\n", "a config line git_status cannot read"),
    ],
)
def test_config_naming_a_program_is_refused(config: str, why: str) -> None:
    assert why in config_refusals(SAFE_CONFIG + config)


def test_an_ordinary_config_is_not_refused() -> None:
    assert config_refusals(SAFE_CONFIG) == []


@pytest.mark.parametrize(
    ("attributes", "refused"),
    [
        ("* filter=pwn\n", True),
        ("*.pdf diff=pdf\n", True),
        ("[attr]mine filter=x\n", True),
        ("*.png -diff binary\n*.sh text eol=lf\n", False),
        ("# * filter=pwn\n", False),
    ],
)
def test_attributes_naming_a_driver_are_refused(attributes: str, refused: bool) -> None:
    assert bool(attributes_refusals(attributes)) is refused


def _host_with_git() -> MemoryToolHost:
    async def git(io: Any) -> int:
        io.out("## main\n")
        return 0

    host = MemoryToolHost()
    assert host.process is not None and host.fs is not None
    host.process.programs["git"] = git
    host.fs.put(".git/config", SAFE_CONFIG)
    return host


@pytest.mark.parametrize(
    ("path", "content"),
    [
        (".gitattributes", "* filter=pwn\n"),
        (".git/info/attributes", "*.txt diff=x\n"),
        (".git/config", '[filter "pwn"]\n\tclean = touch pwned\n'),
    ],
)
async def test_git_status_refuses_before_spawning_anything(
    path: str, content: str, make_ctx: MakeCtx
) -> None:
    host = _host_with_git()
    assert host.fs is not None and host.process is not None
    host.fs.put(path, content)
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolPolicyError) as refused:
        await registry.dispatch(ToolCall("g", "git_status", {}), make_ctx(tool_policy=ToolPolicy()))
    assert refused.value.reason == "unsafe_repository"
    assert path in str(refused.value)
    assert host.process.spawns == []


async def test_a_gitdir_link_is_refused(make_ctx: MakeCtx) -> None:
    host = MemoryToolHost()
    assert host.fs is not None
    host.fs.put(".git", "gitdir: /elsewhere/.git\n")
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolPolicyError, match="not a directory"):
        await registry.dispatch(ToolCall("g", "git_status", {}), make_ctx(tool_policy=ToolPolicy()))


async def test_git_runs_with_no_global_config_no_attributes_file_and_no_optional_locks(
    make_ctx: MakeCtx,
) -> None:
    host = _host_with_git()
    assert host.process is not None
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    await registry.dispatch(ToolCall("g", "git_status", {}), make_ctx(tool_policy=ToolPolicy()))
    [spawn] = host.process.spawns
    argv = spawn.argv
    for flag in ("--no-optional-locks", "core.attributesFile=/dev/null", "core.fsmonitor=false",
                 "core.hooksPath=/dev/null", "--git-dir=.git", "--ignore-submodules=all"):  # fmt: skip
        assert flag in argv
    assert spawn.env_names == ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")


@pytest.mark.parametrize(
    "path",
    [".gitconfig", ".gitattributes", "sub/.gitattributes", ".gitmodules", ".config/git/config"],
)
def test_what_git_runs_from_is_protected_by_the_client_and_the_daemon(path: str) -> None:
    assert path_matches(path, DEFAULT_PROTECTED_PATHS)
    assert path_matches(path, DAEMON_PROTECTED)


def test_the_in_memory_host_protects_what_the_daemon_does() -> None:
    assert tuple(DEFAULT_PROTECTED) == tuple(DAEMON_PROTECTED)
