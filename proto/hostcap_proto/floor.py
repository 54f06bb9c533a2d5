"""The daemon's floor defaults that hold for every tenant unless a config says
otherwise: protected and secret path patterns, file read and write ceilings,
the environment names that never reach a child, and the environment allowlist
of the ``--dev`` tenant.

hostcapd's config (`hostcapd.config.FsSettings`, `FORBIDDEN_ENV`, `dev_config`)
and the in-memory test host (``hostcap.testing``) both take them from here, so
the double refuses what the daemon refuses. Limits are in `hostcap_proto.limits`.
"""

from __future__ import annotations

import re

from hostcap_proto.limits import MiB

#: Paths a spawn's writes may not touch (a hook or git config runs code later).
PROTECTED_PATHS: tuple[str, ...] = ("**/.git/hooks/**", "**/.git/config")
#: Paths neither read nor written: credentials.
SECRET_PATHS: tuple[str, ...] = (
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/.ssh/**",
    "**/id_*",
)
#: The most one ReadFile returns, and the most one WriteFile takes.
MAX_READ_BYTES = 16 * MiB
MAX_WRITE_BYTES = 64 * MiB

#: Names that never reach a child, whatever a config or request says.
FORBIDDEN_ENV = re.compile(
    r"^(LD_.*|NOTIFY_SOCKET|LISTEN_.*|BASH_ENV|ENV|PYTHONSTARTUP|PYTHONPATH|PERL5OPT|PERL5LIB|RUBYOPT|NODE_OPTIONS|GCONV_PATH|MALLOC_.*|GLIBC_TUNABLES|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN)$"
)

#: The environment names a ``--dev`` spawn may pass through.
DEV_ENV_ALLOWLIST: tuple[str, ...] = (
    "TERM",
    "LANG",
    "LC_ALL",
    "TZ",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    # git_status runs git with no global or system config (the client's git_safety).
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
    "NO_COLOR",
    "CI",
)
