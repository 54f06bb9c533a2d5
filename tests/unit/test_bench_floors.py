"""The bench's floor lines (issue 35): how a floor is shown beside the
target it bounds, and the exec record's size the floor's append copies."""

from __future__ import annotations

import json
from pathlib import Path

from bench.design_floor import RECORD_BYTES, exec_record_bytes
from bench.report import Line, Row, Target, document, table


def _rows(floor_ratio: float) -> list[Row]:
    row = Row("1 spawn latency")
    row.lines.append(
        Line("1", "default / bwrap p50", 1.6, "5 ms", "bwrap 3 ms", "k", Target("<=", 0.9))
    )
    row.lines.append(
        Line(
            "1",
            "floor / bwrap p50",
            floor_ratio,
            "2 ms",
            "bwrap 3 ms",
            "k_floor",
            Target("<=", 0.9),
            floor_of="k",
        )
    )
    return [row]


def test_a_floor_that_meets_the_target_leaves_room() -> None:
    doc = document(_rows(0.6), {})
    assert doc["targets"]["k"] == {
        "target": "<= 0.9",
        "holds": False,
        "floor": 0.6,
        "floor_key": "k_floor",
        "below_floor": False,
    }
    assert doc["k_floor"] == 0.6
    assert "k_floor" not in doc["targets"]  # a floor is not a target of its own
    assert "room" in table(_rows(0.6))


def test_a_target_below_its_floor_is_said_so() -> None:
    doc = document(_rows(1.2), {})
    assert doc["targets"]["k"]["below_floor"] is True
    lines = table(_rows(1.2)).splitlines()
    assert "FLOOR" in next(line for line in lines if "floor / bwrap" in line)
    assert "MISS" in next(line for line in lines if "default / bwrap" in line)


def test_the_record_size_is_the_daemons_exec_records(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    records = [
        {"event": "process.exec", "argv": ["/bin/true"], "pad": "x" * 600},
        {"event": "process.exit", "pad": "y" * 100},
        {"event": "process.exec", "argv": ["/bin/true"], "pad": "x" * 620},
        {"event": "process.exec", "argv": ["/bin/true"], "pad": "x" * 640},
    ]
    lines = [json.dumps(r).encode() + b"\n" for r in records]
    log.write_bytes(b"".join(lines))
    assert exec_record_bytes(log) == len(lines[2])
    assert exec_record_bytes(tmp_path / "missing.jsonl") == RECORD_BYTES


def test_the_relay_floor_server_records_callers_reads_and_streams(tmp_path: Path) -> None:
    """The relay floor's parts do their work: a call through the relay is
    answered with its caller found, a call that bypasses the relay (straight
    to the inner server) finds none and fails, Read returns the file's bytes
    from the hop process, Stream returns every byte asked for."""
    import asyncio
    import os

    import grpc
    import pytest

    from bench import floor_servers
    from bench.baselines import start_server, stop

    data = os.urandom(4096)
    (tmp_path / "f").write_bytes(data)
    proc = start_server("relay", tmp_path / "relay.sock")

    async def calls() -> None:
        async with grpc.aio.insecure_channel(f"unix:{tmp_path / 'relay.sock'}") as channel:
            assert await channel.unary_unary(floor_servers.HOP)(b"ping") == b"ping"
            assert await channel.unary_unary(floor_servers.ECHO)(b"ping") == b"ping"
            read = channel.unary_unary(floor_servers.READ)
            assert await read(bytes(tmp_path / "f")) == data
            got = b"".join(
                [m async for m in channel.unary_stream(floor_servers.STREAM)(b"3000000")]
            )
            assert len(got) == 3000000
        inner = f"unix-abstract:hostcap-bench-floor-{proc.pid}"
        async with grpc.aio.insecure_channel(inner) as bypass:
            with pytest.raises(grpc.aio.AioRpcError):
                await bypass.unary_unary(floor_servers.HOP)(b"ping")

    try:
        asyncio.run(calls())
    finally:
        stop(proc)
