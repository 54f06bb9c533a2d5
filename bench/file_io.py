"""Row 5: ReadFile / WriteFile of 4 KiB and 1 MiB against local file I/O.

The measuring is bench/fs_bench.py's (its own engineer's module); this row
only turns its figures into lines of the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import fs_bench
from bench.report import Line, Row, Target, ms


async def measure(
    socket: Path,
    quick: bool,
    grpc_rtt: Callable[[], Awaitable[Any]] | None = None,
    read_floor: Callable[[], Awaitable[Any]] | None = None,
) -> Row:
    """`read_floor`: the least a 4 KiB ReadFile costs in this design (the
    relay on to a worker process that reads the file), timed in turns."""
    figures = await fs_bench.run(socket, quick, grpc_rtt, read_floor)
    row = Row("5 file I/O", figures=dict(figures))
    if grpc_rtt is not None:
        # The transport's own cost is the floor of a ReadFile (issue 15).
        row.lines.append(
            Line(
                "5",
                "ReadFile 4k / bare grpc.aio unary RTT",
                figures["fs.read_4k.ratio_vs_grpc_rtt"],
                ms(figures["fs.read_4k.daemon_us"]),
                f"grpc {ms(figures['fs.read_4k.grpc_rtt_us'])}",
                "fs_read_4k_over_grpc_rtt",
                Target("<=", 1.5),
            )
        )
    if "fs.read_4k.floor_us" in figures:
        floor_us = figures["fs.read_4k.floor_us"]
        rtt_us = figures["fs.read_4k.grpc_rtt_us"]
        row.lines.append(
            Line(
                "5",
                "floor: relay + hop to a worker that reads 4 KiB / bare grpc.aio unary RTT",
                floor_us / rtt_us,
                ms(floor_us),
                f"grpc {ms(rtt_us)}",
                "fs_read_4k_over_grpc_rtt_floor",
                Target("<=", 1.5),
                floor_of="fs_read_4k_over_grpc_rtt",
            )
        )
        row.lines.append(
            Line(
                "5",
                "ReadFile 4k / its floor",
                figures["fs.read_4k.daemon_us"] / floor_us,
                ms(figures["fs.read_4k.daemon_us"]),
                f"floor {ms(floor_us)}",
                "fs_read_4k_over_its_floor",
            )
        )
    for op in ("read", "write"):
        for label in fs_bench.SIZES:
            key = f"fs.{op}_{label}"
            row.lines.append(
                Line(
                    "5",
                    f"{op.capitalize()}File {label} / local {op}",
                    figures[f"{key}.ratio"],
                    ms(figures[f"{key}.daemon_us"]),
                    f"local {ms(figures[f'{key}.local_us'])}",
                    f"fs_{op}_{label}_over_local",
                )
            )
    for label in fs_bench.SIZES:
        key = f"fs.write_{label}"
        row.lines.append(
            Line(
                "5",
                f"WriteFile {label} / local atomic write (fsyncs)",
                figures[f"{key}.ratio_vs_atomic"],
                ms(figures[f"{key}.daemon_us"]),
                f"atomic {ms(figures[f'{key}.atomic_us'])}",
                f"fs_write_{label}_over_atomic",
            )
        )
    return row
