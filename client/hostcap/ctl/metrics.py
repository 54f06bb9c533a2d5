"""``hostcapctl metrics``: print the daemon's Prometheus metrics.

    hostcapctl --admin-socket /run/hostcap/admin.sock metrics   # run/metrics.sock beside it
    hostcapctl metrics --metrics-socket /run/hostcap/metrics.sock
    hostcapctl metrics --url http://127.0.0.1:9464/metrics

The endpoint is what the config's `[metrics]` section serves (off by
default; `--dev` serves it at `run/metrics.sock`). Plain HTTP/1.1 `GET
/metrics`; the text is printed as the daemon sends it.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import Any

#: The endpoint could not be reached or answered with an error.
EXIT_UNREACHABLE = 2
TIMEOUT_S = 10.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def endpoint(args: argparse.Namespace) -> tuple[http.client.HTTPConnection, str, str]:
    """(connection, request path, what to call it in errors)."""
    if args.url:
        url = urllib.parse.urlsplit(args.url)
        if url.scheme != "http" or not url.hostname:
            raise SystemExit(f"hostcapctl: metrics: --url {args.url!r} must be http://HOST:PORT/…")
        path = url.path or "/metrics"
        return (
            http.client.HTTPConnection(url.hostname, url.port or 80, timeout=TIMEOUT_S),
            path,
            args.url,
        )
    sock = args.metrics_socket
    if sock is None and getattr(args, "admin_socket", None) is not None:
        sock = Path(args.admin_socket).parent / "metrics.sock"
    if sock is None:
        raise SystemExit(
            "hostcapctl: metrics: give --metrics-socket, --url, or --admin-socket "
            "(its directory's metrics.sock)"
        )
    return _UnixConnection(Path(sock), TIMEOUT_S), "/metrics", str(sock)


def fetch(args: argparse.Namespace) -> str:
    """The exposition text. Raises OSError / http.client errors."""
    connection, path, where = endpoint(args)
    try:
        connection.request("GET", path, headers={"Accept": "text/plain"})
        response = connection.getresponse()
        body = response.read().decode("utf-8", errors="replace")
        if response.status != 200:
            raise OSError(f"{where} answered {response.status} {response.reason}: {body.strip()}")
        return body
    finally:
        connection.close()


def cmd_metrics(args: argparse.Namespace) -> int:
    try:
        text = fetch(args)
    except (OSError, http.client.HTTPException) as error:
        detail = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        print(f"hostcapctl: metrics: cannot read the metrics: {detail}", file=sys.stderr)
        return EXIT_UNREACHABLE
    sys.stdout.write(text)
    return 0


def register(sub: Any) -> None:
    metrics = sub.add_parser(
        "metrics",
        help="print the daemon's Prometheus metrics (its [metrics] endpoint)",
        description="GET /metrics from the daemon's metrics endpoint and print it. By default "
        "the metrics.sock beside --admin-socket (as --dev serves it).",
    )
    metrics.add_argument(
        "--metrics-socket",
        type=Path,
        default=os.environ.get("HOSTCAP_METRICS_SOCKET"),
        help="the metrics Unix socket (default $HOSTCAP_METRICS_SOCKET)",
    )
    metrics.add_argument(
        "--url", help="an HTTP endpoint instead, e.g. http://127.0.0.1:9464/metrics"
    )
    metrics.set_defaults(func=cmd_metrics)
