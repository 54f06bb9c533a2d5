"""``hostcapctl audit query``: from the files (--file) or the daemon."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hostcap_proto.audit import AuditFileError, FilterError, RecordReader, resolve_spawn

from hostcap.ctl.audit.common import _admin_socket, _error
from hostcap.ctl.audit.daemon import DaemonStreamError, _stub, daemon_records
from hostcap.ctl.audit.filters import QueryFilter
from hostcap.ctl.audit.table import run_query
from hostcap.ctl.common import channel


def _output(args: argparse.Namespace) -> str:
    return "jsonl" if args.json else str(args.format or "table")


def _query_daemon(args: argparse.Namespace, socket: Any) -> int:
    query = QueryFilter.from_args(args)
    with channel(Path(socket)) as ch:
        try:
            # The daemon narrows the stream; the filter here gives each flag its meaning.
            return run_query(
                daemon_records(_stub(ch).QueryAudit(query.daemon_request())),
                query,
                sys.stdout,
                output=_output(args),
                check_tenant=False,
            )
        except (DaemonStreamError, FilterError) as error:
            return _error(str(error))


def _cmd_query(args: argparse.Namespace) -> int:
    if not args.file:
        socket = _admin_socket(args)
        if socket is not None:
            return _query_daemon(args, socket)
        return _error("give the audit file(s) with --file, or the daemon's --admin-socket")
    files = [Path(p) for p in args.file]
    try:
        query = QueryFilter.from_args(args)
        if query.spawn_id is not None:
            # An id or a unique prefix of one (as kill takes it): one pass to find it.
            ids = (r.get("spawn_id") for r in RecordReader(files))
            query = replace(
                query,
                spawn_id=resolve_spawn(query.spawn_id, (i for i in ids if isinstance(i, str))),
            )
        if query.changed_by is not None:
            ids = (r.get("spawn_id") for r in RecordReader(files))
            query = replace(
                query,
                changed_by=resolve_spawn(query.changed_by, (i for i in ids if isinstance(i, str))),
            )
        reader = RecordReader(files)
        code = run_query(reader, query, sys.stdout, output=_output(args))
    except (AuditFileError, FilterError) as error:
        return _error(str(error))
    if reader.skipped:
        path, line = reader.skipped[0]
        sys.stderr.write(
            f"warning: {len(reader.skipped)} unreadable line(s) skipped (first {path}:{line}); "
            "run `hostcapctl audit verify`\n"
        )
    return code
