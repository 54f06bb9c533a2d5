"""hostcapd's command line: serve, check-config.

hostcapd serve --config /etc/hostcap/hostcapd.toml   # SIGHUP re-reads the file
hostcapd serve --dev                                   # the embedded config
hostcapd check-config /etc/hostcap/hostcapd.toml
hostcapd --version
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from hostcap_proto.version_action import VersionAction

from hostcapd.config import Config, ConfigError, dev_config, load_config, prepare_dev_state
from hostcapd.logsetup import FORMATS, LEVELS


def version_line() -> str:
    """`hostcapd 0.2.0 (commit 1a2b3c4d, hostcap_proto 0.2.0, grpcio 1.85.3, python 3.11.2)`."""
    from importlib import metadata

    from hostcapd import __commit__, __version__

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    proto = installed("hostcap-proto")
    if proto == "not installed":  # the daemon's own distribution carries it
        proto = __version__
    python = ".".join(str(n) for n in sys.version_info[:3])
    return (
        f"hostcapd {__version__} (commit {__commit__}, hostcap_proto {proto}, grpcio {installed('grpcio')}, "
        f"python {python})"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hostcapd", description="the hostcap daemon")
    parser.add_argument("--version", action=VersionAction, line=version_line)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve every tenant of a config")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="TOML config file")
    source.add_argument("--dev", action="store_true", help="the embedded development config")
    serve.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".hostcap"),
        help="state directory for --dev (default ./.hostcap)",
    )
    serve.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LEVELS,
        help="the least severe level logged (default INFO)",
    )
    serve.add_argument(
        "--log-format",
        default="text",
        choices=FORMATS,
        help="text lines (default), or one JSON object per line",
    )
    serve.add_argument(
        "--network",
        choices=("none", "proxy", "host"),
        help="--dev: the dev tenant's network mode (default none)",
    )
    serve.add_argument(
        "--allow", action="append", default=[], metavar="RULE", help="--dev: an egress allow rule"
    )
    serve.add_argument(
        "--deny", action="append", default=[], metavar="RULE", help="--dev: an egress deny rule"
    )
    serve.add_argument(
        "--resolve",
        action="append",
        default=[],
        metavar="NAME=ADDR",
        help="--dev: resolve NAME to ADDR in the proxy (tests, offline mirrors)",
    )
    check = sub.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("file", type=Path)
    return parser


def _check_config(path: Path) -> int:
    """Every check start-up and reload run, on this host; one line a problem."""
    from hostcapd.checks import check_config, probe_host_readonly

    # The probes' log lines are not findings: only problems are printed.
    logging.getLogger("hostcapd").addHandler(logging.NullHandler())
    logging.getLogger("hostcapd").propagate = False
    try:
        config = load_config(path)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    from hostcapd.egress.rules import warnings_of

    for tenant in config.tenants:
        for warning in warnings_of(tenant.network):
            print(f"{path}: warning: tenant {tenant.name!r}: {warning}", file=sys.stderr)
    problems = check_config(config, probe_host_readonly(config.daemon.cgroup_parent))
    if problems:
        print(f"{path}: {len(problems)} problem(s)", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    print(
        f"{path}: ok ({len(config.tenants)} tenant(s): "
        + ", ".join(t.name for t in config.tenants)
        + ")"
    )
    return 0


def _dev_network(args: argparse.Namespace) -> dict[str, object]:
    """The dev tenant's [network] table from --network/--allow/--deny/--resolve."""
    if not (args.network or args.allow or args.deny or args.resolve):
        return {}
    resolve = {}
    for item in args.resolve:
        name, sep, address = item.partition("=")
        if not sep:
            raise ConfigError(f"--resolve {item!r}: not NAME=ADDR")
        resolve[name] = address
    table: dict[str, object] = {"mode": args.network or "proxy"}
    if args.allow:
        table["allow"] = list(args.allow)
    if args.deny:
        table["deny"] = list(args.deny)
    if resolve:
        table["resolve"] = resolve
    return table


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check-config":
        return _check_config(args.file)

    from hostcapd.logsetup import configure

    configure(args.log_level, args.log_format)  # timestamps unless stderr is the journal
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    reload_source: Callable[[], Config] | None = None
    try:
        if args.dev:
            state_dir: Path = args.state_dir
            network = _dev_network(args)
            config = dev_config(state_dir, network)
            prepare_dev_state(config)
            path = None

            # A reload (SIGHUP) re-applies the embedded config: a no-op that
            # still validates, audits and reports.
            def reload_source() -> Config:
                return dev_config(state_dir, network)
        else:
            if args.network or args.allow or args.deny or args.resolve:
                print("--network, --allow, --deny and --resolve go with --dev", file=sys.stderr)
                return 2
            config = load_config(args.config)
            path = args.config
    except ConfigError as error:
        logging.getLogger("hostcapd").error("%s", error)  # one record: its lines joined
        return 2
    # HOSTCAPD_EVENT_LOOP, when set, overrides daemon.event_loop (the test
    # suite and the bench use it, for --dev daemons too).
    loop_name = os.environ.get("HOSTCAPD_EVENT_LOOP") or config.daemon.event_loop
    try:
        loop_factory = event_loop_factory(loop_name)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    logging.getLogger("hostcapd").info("event loop: %s", loop_name)
    from hostcapd.daemon import Daemon

    # With frontend_processes = false, grpc.aio binds to the running loop
    # when the front-end code first builds a server in this process, so
    # under uvloop it is initialised on uvloop's loop.
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(Daemon(config, path, reload_source).serve())


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for `daemon.event_loop`; None is asyncio's default.

    Fails closed: "uvloop" without uvloop installed is a ConfigError, not a
    silent fall-back to asyncio."""
    if name == "asyncio":
        return None
    if name == "uvloop":
        try:
            import uvloop
        except ImportError as error:
            raise ConfigError(
                'daemon.event_loop = "uvloop" but uvloop is not importable '
                f'({error}); reinstall hostcap (uvloop is a dependency) or set "asyncio"'
            ) from error
        return uvloop.new_event_loop
    raise ConfigError(f"daemon.event_loop: unknown loop {name!r}")


if __name__ == "__main__":
    sys.exit(main())
