"""The version and commit of this build, for `hostcapd --version`,
`hostcapctl --version` and the audit log's daemon records.

setuptools-scm derives both from git when a package is built or installed
(tag vX.Y.Z: release X.Y.Z; between tags X.Y.(Z+1).devN+g<commit>) and
writes them to `_version.py` beside this file, which is not in git. A source
tree that was never installed has no such file and says so.
"""

from __future__ import annotations

UNKNOWN = "unknown"

try:
    from hostcap_proto._version import commit_id as _commit
    from hostcap_proto._version import version as _version
except ImportError:  # a source tree, never built or installed
    _version, _commit = f"0+{UNKNOWN}", None

#: PEP 440, e.g. "0.2.0" or "0.2.1.dev3+g1a2b3c4d".
VERSION: str = _version
#: The abbreviated git commit the build was made from ("unknown" without one).
COMMIT: str = (_commit or UNKNOWN).removeprefix("g")


def describe() -> str:
    """`0.2.0 (commit 1a2b3c4d)`."""
    return f"{VERSION} (commit {COMMIT})"
