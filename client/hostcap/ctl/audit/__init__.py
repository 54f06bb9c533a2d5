"""``hostcapctl audit``: verify, query and tail the audit log.

    hostcapctl audit verify /var/log/hostcap/audit.jsonl*
    hostcapctl audit query --file audit.jsonl --tenant dev --since 1h --event 'process.*'
    hostcapctl audit tail --file audit.jsonl -n 20

With ``--file`` (and always for ``verify``) these read the files directly: no
socket, no daemon. Without ``--file`` and with ``--admin-socket``, ``query``
and ``tail`` ask the daemon instead, and ``tail -f`` follows new records as
they are written:

    hostcapctl --admin-socket /run/hostcap/admin.sock audit tail -f
    hostcapctl --admin-socket /run/hostcap/admin.sock audit query --outcome TIMEOUT --since 2h

The record contract lives in `hostcap_proto.audit`; the functions here that
print records take any iterable of records (`run_query`, `print_records`),
from a file or from the daemon alike.

The commands live one room each: `verify` (verify and export), `query`,
`tail` and `argv` (verify-argv), over `filters` (the query's flags and
`QueryFilter`), `table` (printing records), `daemon` (the admin socket's
streams) and `common`; `cli` registers them. What other code imports from
``hostcap.ctl.audit`` is re-exported here.
"""

from __future__ import annotations

from hostcap.ctl.audit.argv import argv_record, check_argv
from hostcap.ctl.audit.cli import main, register
from hostcap.ctl.audit.common import EXIT_BROKEN, EXIT_ERROR, EXIT_OK, Handler
from hostcap.ctl.audit.daemon import DaemonStreamError, daemon_records
from hostcap.ctl.audit.filters import (
    QueryFilter,
    changed_paths,
    event_pattern,
    failed,
    outcome_name,
    parse_time,
)
from hostcap.ctl.audit.table import FORMATS, command_of, format_row, print_records, run_query
from hostcap.ctl.audit.verify import print_export_report, print_verify_report

__all__ = [
    "EXIT_BROKEN",
    "EXIT_ERROR",
    "EXIT_OK",
    "FORMATS",
    "DaemonStreamError",
    "Handler",
    "QueryFilter",
    "argv_record",
    "changed_paths",
    "check_argv",
    "command_of",
    "daemon_records",
    "event_pattern",
    "failed",
    "format_row",
    "main",
    "outcome_name",
    "parse_time",
    "print_export_report",
    "print_records",
    "print_verify_report",
    "register",
    "run_query",
]
