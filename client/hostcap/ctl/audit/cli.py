"""The ``hostcapctl audit`` subcommands and their options (`register`), and
``python -m hostcap.ctl.audit`` (`main`)."""

from __future__ import annotations

import argparse

from hostcap_proto.audit import OUTCOMES

from hostcap.ctl.audit.argv import _cmd_verify_argv
from hostcap.ctl.audit.common import Handler
from hostcap.ctl.audit.filters import event_pattern, outcome_name, parse_time
from hostcap.ctl.audit.query import _cmd_query
from hostcap.ctl.audit.table import FORMATS
from hostcap.ctl.audit.tail import _cmd_tail
from hostcap.ctl.audit.verify import _cmd_export, _cmd_verify


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``audit verify|query|tail`` to hostcapctl's subcommands. Each sets
    ``func`` to a handler taking the parsed args and returning the exit code."""
    audit = subparsers.add_parser(
        "audit",
        help="verify, query and tail the audit log",
        description="Verify, query and tail the audit log: from its files (no daemon needed), "
        "or query and tail through the daemon's --admin-socket.",
    )
    commands = audit.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)

    verify = commands.add_parser(
        "verify",
        help="walk the hash chain; exit 0 if intact, 1 naming the first bad line",
        description="Walk the hash chain through the given files (in any order; rotated files "
        "are put in chain order). Exit 0 if intact, 1 naming the first bad line and why "
        "(edited, deleted, reordered, torn, chain broken), 2 if a file cannot be read.",
    )
    verify.add_argument(
        "files", nargs="*", metavar="FILE", help="audit files (current and rotated)"
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_cmd_verify)

    query = commands.add_parser(
        "query",
        help="print the records that match (a table, JSON, or the stored JSON lines)",
        description="Print audit records matching every filter given, from the files (--file) "
        "or from the daemon (--admin-socket: every kept file, in chain order). Times are UTC. "
        "Exit rows show the command they ended. Files a spawn changed are in its fs.changes "
        "record where the tenant has a disk budget (fs_changes applied). What the log cannot "
        "show: files changed by spawns of a tenant without one. A record a call caused names "
        "its caller (uid, gid, pid as the socket's front-end read them: its word, see "
        "docs/audit.md); --caller-uid and --caller-pid select by it.",
    )
    query.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    query.add_argument(
        "--tenant", metavar="T", help="one tenant's records (one no record names is an error)"
    )
    query.add_argument(
        "--since", type=parse_time, metavar="TIME", help="ISO time, time of day (14:00) or age (2h)"
    )
    query.add_argument(
        "--until", type=parse_time, metavar="TIME", help="ISO time, time of day (14:00) or age (2h)"
    )
    query.add_argument(
        "--event",
        type=event_pattern,
        metavar="E",
        help="event name or glob, e.g. 'process.*' (one naming no event is an error)",
    )
    query.add_argument(
        "--outcome",
        type=outcome_name,
        metavar="O",
        help=f"process.exit outcome: {', '.join(OUTCOMES)}",
    )
    query.add_argument(
        "--spawn", metavar="ID", help="one spawn's records: its id or a unique prefix of it"
    )
    query.add_argument(
        "--exe",
        metavar="PATH",
        help="spawns of this executable: a path or glob, or a name (python3) matching any dir",
    )
    query.add_argument(
        "--failed",
        action="store_true",
        help="exits that failed: non-zero code, a signal, a limit, a timeout, a cancel",
    )
    query.add_argument(
        "--exit-code", type=int, metavar="N", help="programs that exited with this code"
    )
    query.add_argument("--uid", type=int, metavar="UID", help="spawns run as this uid")
    query.add_argument(
        "--caller-uid",
        type=int,
        metavar="UID",
        help="records of calls made by a process of this uid (the caller its "
        "front-end read with SO_PEERCRED: docs/audit.md, 'Who asked')",
    )
    query.add_argument(
        "--caller-pid",
        type=int,
        metavar="PID",
        help="records of calls made by this process (as --caller-uid)",
    )
    query.add_argument(
        "--path",
        metavar="PATH",
        help="file writes, and spawns' fs.changes, at PATH or beneath it (or a glob): "
        "which spawn created, changed, renamed or deleted it, and when",
    )
    query.add_argument(
        "--changed-by",
        metavar="SPAWN",
        help="what a spawn changed (its fs.changes): its id or a unique prefix",
    )
    query.add_argument(
        "--host",
        metavar="DOMAIN",
        help="network.connect records of this host (or a glob: '*.github.com'): "
        "which spawns talked to it",
    )
    query.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="table (default), json (an array; exits gain `command`), jsonl (as stored)",
    )
    query.add_argument("--json", action="store_true", help="the same as --format jsonl")
    query.set_defaults(func=_cmd_query)

    export = commands.add_parser(
        "export",
        help="write chosen records with the chain hashes of the rest (verify checks it)",
        description="Write the records that match every filter given, and for the records "
        "between them only their chain hashes (runs of left-out records), so that "
        "`hostcapctl audit verify EXPORT` checks the chosen records against the chain without "
        "the other records' content. From the files (--file) or the daemon (--admin-socket).",
    )
    export.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    export.add_argument("--tenant", metavar="T", help="one tenant's records")
    export.add_argument("--event", type=event_pattern, metavar="E", help="event name or glob")
    export.add_argument("--spawn", metavar="ID", help="one spawn's records (id or unique prefix)")
    export.add_argument("--since", type=parse_time, metavar="TIME", help="as for query")
    export.add_argument("--until", type=parse_time, metavar="TIME", help="as for query")
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write here (a new file) instead of stdout"
    )
    export.set_defaults(func=_cmd_export, outcome=None)

    verify_argv = commands.add_parser(
        "verify-argv",
        help="check that an argv is the one a record was written for (by its argv_sha256)",
        description="Check an argv against a process.exec (--spawn ID, or --seq N) or a refused "
        "spawn's policy.deny (--seq N): exit 0 when its sha256 (each element's UTF-8 bytes, "
        "each followed by a NUL) is the record's argv_sha256, 1 when not. The record's argv "
        "may be redacted or cut; its digest is of the argv as given.",
    )
    verify_argv.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    verify_argv.add_argument("--seq", type=int, metavar="N", help="the record with this seq")
    verify_argv.add_argument("--spawn", metavar="ID", help="the process.exec of this spawn")
    verify_argv.add_argument(
        "--argv-json", metavar="JSON", help="the argv as a JSON array (instead of after --)"
    )
    verify_argv.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the argv")
    verify_argv.set_defaults(func=_cmd_verify_argv)

    tail = commands.add_parser(
        "tail",
        help="print the last records (-f: then follow, over the admin socket)",
        description="Print the last records of a file (--file), or ask the daemon over "
        "--admin-socket; with -f keep printing new records as they are written.",
    )
    tail.add_argument("--file", metavar="FILE", help="audit file (no daemon needed)")
    tail.add_argument("-n", "--lines", type=int, default=10, metavar="N", help="how many (10)")
    tail.add_argument(
        "-f", "--follow", action="store_true", help="then follow new records (admin socket)"
    )
    tail.add_argument("--json", action="store_true", help="JSON lines, exactly as stored")
    tail.set_defaults(func=_cmd_tail)


def main(argv: list[str] | None = None) -> int:
    """``python -m hostcap.ctl.audit``: the audit commands on their own."""
    parser = argparse.ArgumentParser(prog="hostcapctl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    handler: Handler = args.func
    return handler(args)
