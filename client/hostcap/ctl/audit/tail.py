"""``hostcapctl audit tail``: the last records of a file, or through the
daemon (and -f follows new records)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hostcap_proto.audit import AuditFileError, tail_records
from hostcap_proto.v1 import admin_pb2

from hostcap.ctl.audit.common import EXIT_OK, _admin_socket, _error
from hostcap.ctl.audit.daemon import DaemonStreamError, _stub, daemon_records
from hostcap.ctl.audit.table import print_records
from hostcap.ctl.common import channel


def _tail_daemon(args: argparse.Namespace, socket: Any) -> int:
    request = admin_pb2.TailAuditRequest(lines=args.lines, follow=args.follow)
    with channel(Path(socket)) as ch:
        call = _stub(ch).TailAudit(request)
        try:
            print_records(daemon_records(call), sys.stdout, json_lines=args.json, live=True)
        except DaemonStreamError as error:
            return _error(str(error))
        except KeyboardInterrupt:
            call.cancel()
            raise
    if args.follow:
        # A follow ends only when the daemon ends it: it is stopping.
        sys.stderr.write("hostcapctl audit: the daemon closed the stream (it is stopping)\n")
    return EXIT_OK


def _cmd_tail(args: argparse.Namespace) -> int:
    if args.lines < 0:
        return _error("-n must be 0 or more")
    if args.file is None:
        socket = _admin_socket(args)
        if socket is None:
            return _error("give the audit file with --file, or the daemon's --admin-socket")
        return _tail_daemon(args, socket)
    if args.follow:
        return _error("-f follows through the daemon: give --admin-socket instead of --file")
    try:
        records = tail_records(Path(args.file), args.lines)
    except AuditFileError as error:
        return _error(str(error))
    print_records(records, sys.stdout, json_lines=args.json)
    return EXIT_OK
