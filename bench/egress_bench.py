"""What the egress proxy costs (issue 32): a download through it against the
same download straight from the host's network, and a connection's set-up
through it against a direct connect.

    python -m bench.egress_bench [--quick]
    results = run(quick=True)

A hostcapd with one proxy-mode tenant (`allowed.test` resolved to the
bench's own HTTP server on 127.0.0.1, no internet). Interleaved, round by
round:

- ``egress.download``: `curl` fetches 256 MiB (64 MiB with --quick) in a
  spawn, through the proxy (plain HTTP proxying), against the same `curl`
  run here in the host's network namespace; curl's own `time_total` for
  both, so the spawn's start is not counted.
- ``egress.setup``: a Python loop in a spawn opens N connections through
  the proxy (CONNECT, up to its `200`), against the same loop here opening N
  direct TCP connections to the server; the median per connection.
- ``egress.netns``: what a proxy-mode spawn's namespace costs the daemon
  (`hostcapd.egress.netns.make_namespace`: loopback, listeners, the tun with
  its address and routes), against a bare one (unshare, loopback up, one
  listener), made here on threads, N of each interleaved; the medians. And
  `close_us`, the full one's removal (the tun device's unregistering waits
  for RCU grace periods): the daemon and the proxy do it on a thread, off
  the request path and their event loops.

Keys: ``egress.download.{proxy,direct}_s``, ``egress.download.ratio``,
``egress.download.proxy_mib_s``, ``egress.setup.{proxy,direct}_us``,
``egress.setup.ratio``, ``egress.netns.{full,bare,close}_us``, ``egress.netns.ratio``,
``egress.rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hostcap_proto.v1 import process_pb2

from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.native import BenchError
from bench.report import Line, Row

MiB = 1 << 20
SETUP_LOOP = r"""
import socket, sys, time, statistics
mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times = []
for _ in range(n):
    t = time.perf_counter()
    if mode == "proxy":
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n" % port)
        got = b""
        while b"\r\n\r\n" not in got:
            more = s.recv(4096)
            if not more:
                raise SystemExit("the proxy hung up: " + got.decode(errors="replace"))
            got += more
        assert got.startswith(b"HTTP/1.1 200"), got
    else:
        s = socket.create_connection(("127.0.0.1", port))
    times.append(time.perf_counter() - t)
    s.close()
print(statistics.median(times))
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        size = int(self.path.rsplit("/", 1)[1])
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        chunk = b"x" * MiB
        left = size
        while left:
            n = min(left, len(chunk))
            self.wfile.write(chunk[:n])
            left -= n

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    # socketserver's backlog of 5 would make a burst of direct connects wait
    # for SYN retransmits: the baseline would measure the queue, not a connect.
    request_queue_size = 1024
    daemon_threads = True


async def _spawn(client: TenantClient, argv: list[str]) -> bytes:
    request = process_pb2.SpawnRequest(argv=argv)
    result = await client.process.Run(request)
    if result.exited.outcome != 1 or result.exited.exit_code != 0:  # EXITED, 0
        raise BenchError(f"{argv[0]} in the spawn failed: {result.stderr.decode(errors='replace')}")
    return bytes(result.stdout)


def _curl_time(stdout: bytes) -> float:
    return float(stdout.decode().split()[0])


def _bare_namespace() -> None:
    """The baseline of egress.netns: a namespace with loopback up and one listener."""
    from hostcapd import linux
    from hostcapd.egress import netns

    def work() -> None:
        linux.unshare(netns.CLONE_NEWNET)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            netns._up(s, b"lo")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 3128))
        listener.listen(128)
        box.append((os.open("/proc/thread-self/ns/net", os.O_RDONLY), listener))

    box: list[tuple[int, socket.socket]] = []
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    fd, listener = box[0]
    os.close(fd)
    listener.close()


def measure_namespaces(count: int) -> dict[str, float]:
    from hostcapd.egress.netns import make_namespace

    full: list[float] = []
    bare: list[float] = []
    closes: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        way = make_namespace()
        full.append(time.perf_counter() - started)
        started = time.perf_counter()
        way.close()
        closes.append(time.perf_counter() - started)
        started = time.perf_counter()
        _bare_namespace()
        bare.append(time.perf_counter() - started)
    f, b = statistics.median(full), statistics.median(bare)
    return {
        "egress.netns.full_us": f * 1e6,
        "egress.netns.bare_us": b * 1e6,
        "egress.netns.ratio": f / b,
        "egress.netns.close_us": statistics.median(closes) * 1e6,
    }


async def measure(quick: bool) -> dict[str, Any]:
    curl = shutil.which("curl")
    if curl is None:
        raise BenchError("curl is not installed")
    size = (64 if quick else 256) * MiB
    rounds = 3 if quick else 5
    connects = 100 if quick else 300
    server = _Server(("127.0.0.1", 0), _Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state = Path(tempfile.mkdtemp(prefix="egress-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", ("full",))
    daemon.config["daemon"]["allow_resolve_overrides"] = True
    daemon.config["tenants"]["full"]["network"] = {
        "mode": "proxy",
        "allow": [f"allowed.test:{port}"],
        "resolve": {"allowed.test": "127.0.0.1"},
        "max_bytes": 64 * 1024 * MiB,
        "max_connections": 100_000,
    }
    times: dict[str, list[float]] = {k: [] for k in ("proxy", "direct", "sproxy", "sdirect")}
    try:
        daemon.start()
        workspace = daemon.workspace("full")
        (workspace / "setup.py").write_text(SETUP_LOOP)
        client = TenantClient(daemon.socket("full"))
        write_out = ["-sS", "-o", "/dev/null", "-w", "%{time_total}\n"]
        try:
            for _ in range(rounds):
                out = await _spawn(
                    client, ["curl", *write_out, f"http://allowed.test:{port}/big/{size}"]
                )
                times["proxy"].append(_curl_time(out))
                direct = subprocess.run(
                    [curl, *write_out, "--noproxy", "*", f"http://127.0.0.1:{port}/big/{size}"],
                    capture_output=True, check=True,
                )  # fmt: skip
                times["direct"].append(_curl_time(direct.stdout))
                out = await _spawn(
                    client,
                    ["python3", str(workspace / "setup.py"), "proxy", str(port), str(connects)],
                )
                times["sproxy"].append(float(out))
                here = subprocess.run(
                    [sys.executable, "-c", SETUP_LOOP, "direct", str(port), str(connects)],
                    capture_output=True, check=True,
                )  # fmt: skip
                times["sdirect"].append(float(here.stdout))
        finally:
            await client.close()
    finally:
        daemon.stop()
        server.shutdown()
        shutil.rmtree(state, ignore_errors=True)
    proxy, direct = statistics.median(times["proxy"]), statistics.median(times["direct"])
    sproxy, sdirect = statistics.median(times["sproxy"]), statistics.median(times["sdirect"])
    return {
        "egress.rounds": rounds,
        "egress.download.bytes": size,
        "egress.download.proxy_s": proxy,
        "egress.download.direct_s": direct,
        "egress.download.ratio": proxy / direct,
        "egress.download.proxy_mib_s": size / MiB / proxy,
        "egress.download.direct_mib_s": size / MiB / direct,
        "egress.setup.proxy_us": sproxy * 1e6,
        "egress.setup.direct_us": sdirect * 1e6,
        "egress.setup.ratio": sproxy / sdirect,
        **measure_namespaces(50 if quick else 200),
    }


def row(results: dict[str, Any]) -> Row:
    """Row 7 of `make bench`: the proxy against the host's own network."""
    mib = results["egress.download.bytes"] // MiB
    return Row(
        "7 egress proxy",
        [
            Line(
                "7", f"{mib} MiB download through the proxy",
                results["egress.download.ratio"],
                f"{results['egress.download.proxy_mib_s']:.0f} MiB/s",
                f"{results['egress.download.direct_mib_s']:.0f} MiB/s direct",
                key="egress_download_ratio",
            ),
            Line(
                "7", "connection set-up through the proxy (CONNECT to its 200)",
                results["egress.setup.ratio"],
                f"{results['egress.setup.proxy_us']:.0f} us",
                f"{results['egress.setup.direct_us']:.0f} us direct connect",
                key="egress_setup_ratio",
            ),
        ],
        {k: float(v) for k, v in results.items()},
    )  # fmt: skip


def run(quick: bool = False) -> dict[str, Any]:
    return asyncio.run(measure(quick))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.egress_bench")
    parser.add_argument("--quick", action="store_true")
    results = run(parser.parse_args().quick)
    print(json.dumps(results, indent=2))
    print(
        f"download {results['egress.download.bytes'] // MiB} MiB: proxy "
        f"{results['egress.download.proxy_mib_s']:.0f} MiB/s, direct "
        f"{results['egress.download.direct_mib_s']:.0f} MiB/s, ratio "
        f"{results['egress.download.ratio']:.2f}x the time; connection set-up: proxy "
        f"{results['egress.setup.proxy_us']:.0f} us, direct {results['egress.setup.direct_us']:.0f} us, "
        f"ratio {results['egress.setup.ratio']:.1f}x; a spawn's namespace: "
        f"{results['egress.netns.full_us']:.0f} us with its tun, "
        f"{results['egress.netns.bare_us']:.0f} us bare, ratio {results['egress.netns.ratio']:.1f}x "
        f"(its removal {results['egress.netns.close_us']:.0f} us, on a thread)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
