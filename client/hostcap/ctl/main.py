"""hostcapctl entry point: global options, and each command group's register()."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from hostcap_proto.version_action import VersionAction

#: Command groups; each module has register(subparsers) and sets func=handler(args) -> int.
COMMAND_MODULES = (
    "hostcap.ctl.process",
    "hostcap.ctl.terminal",
    "hostcap.ctl.fs",
    "hostcap.ctl.audit",
    "hostcap.ctl.admin",
    "hostcap.ctl.metrics",
)


def version_line() -> str:
    """`hostcapctl 0.2.0 (commit 1a2b3c4d, hostcap-client)`: the version and
    commit of this build (written into the wire package at build time, from
    the same checkout as the client), and the distribution it came with (the
    client's own wheel, or the daemon's)."""
    from importlib import metadata

    from hostcap_proto.build import COMMIT, VERSION

    for distribution in ("hostcap-client", "hostcap"):
        try:
            metadata.distribution(distribution)
        except metadata.PackageNotFoundError:
            continue
        return f"hostcapctl {VERSION} (commit {COMMIT}, {distribution})"
    return f"hostcapctl {VERSION} (commit {COMMIT}, run from a source tree, not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hostcapctl", description="talk to hostcapd")
    parser.add_argument("--version", action=VersionAction, line=version_line)
    parser.add_argument(
        "--socket",
        type=Path,
        default=os.environ.get("HOSTCAP_SOCKET"),
        help="a tenant socket (default $HOSTCAP_SOCKET)",
    )
    parser.add_argument(
        "--admin-socket",
        type=Path,
        default=os.environ.get("HOSTCAP_ADMIN_SOCKET"),
        help="the admin socket (default $HOSTCAP_ADMIN_SOCKET)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            continue  # a command group not built yet
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
