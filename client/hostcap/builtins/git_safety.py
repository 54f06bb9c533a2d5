"""What `git_status` may run, and the repositories it refuses.

`git status` reads configuration and attributes the workspace can hold, and
git runs programs they name: a clean or process filter (`filter.<driver>`),
a diff driver or textconv (`diff.<driver>`), the fsmonitor and hooks. With
HOME in the workspace, `$HOME/.gitconfig` is a file the model may write.

`git_status` therefore runs git

- with no global or system configuration (`GIT_CONFIG_GLOBAL=/dev/null`,
  `GIT_CONFIG_NOSYSTEM=1`), no attributes file (`core.attributesFile`), no
  hooks, no fsmonitor, no pager;
- without optional locks (`--no-optional-locks`: it never rewrites
  `.git/index`), without recursing into submodules (each has its own
  config), on the workspace root's own `.git` (`--git-dir`, `--work-tree`);

and refuses a repository whose own configuration or attributes name a
filter, diff or textconv driver, or that it cannot read whole: an
`include` it would have to follow, per-worktree config, a `.git` that is a
file pointing elsewhere. A driver named only in a nested `.gitattributes`
runs nothing: the only configuration git reads is the one checked here, and
git has no built-in filter program.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Environment of every git_status spawn (the host's env allowlist must admit it).
GIT_READ_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
#: git's global options for a read: nothing the workspace names is run.
GIT_READ_OPTIONS = (
    "--no-pager",
    "--no-optional-locks",
    "--git-dir=.git",
    "--work-tree=.",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "core.attributesFile=/dev/null",
)  # fmt: skip

_SECTION = re.compile(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\](.*)')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:=|$|[#;])")
_DRIVER_ATTRIBUTE = re.compile(r"(?:^|\s)(filter|diff)=\S")


def config_refusals(text: str) -> list[str]:
    """What in a repository's config makes git_status refuse it (empty: nothing)."""
    found: list[str] = []
    section, subsection = "", None
    continued = False
    for raw in text.splitlines():
        line = raw.strip()
        if continued:
            continued = line.endswith("\\")
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            header = _SECTION.match(line)
            if header is None:
                found.append("a config line git_status cannot read")
                continue
            section, subsection = header.group(1).lower(), header.group(2)
            if section.startswith(("filter", "diff.")) or (section == "diff" and subsection):
                found.append(f"a {section.split('.')[0]} driver")
            if section in ("include", "includeif"):
                found.append("an include of another config file")
            line = header.group(3).strip()
            if not line or line[0] in "#;":
                continue
        key = _KEY.match(line)
        if key is None:
            found.append("a config line git_status cannot read")
            continue
        name = key.group(1).lower()
        continued = line.endswith("\\")
        if name == "textconv" or (section == "diff" and name in ("external", "command")):
            found.append("a diff driver")
        if section == "extensions" and name == "worktreeconfig":
            found.append("per-worktree config")
    return _unique(found)


def attributes_refusals(text: str) -> list[str]:
    """What in an attributes file makes git_status refuse the repository."""
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            for match in _DRIVER_ATTRIBUTE.finditer(line):
                found.append(f"an attribute naming a {match.group(1)} driver")
    return _unique(found)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
