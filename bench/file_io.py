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
    socket: Path, quick: bool, grpc_rtt: Callable[[], Awaitable[Any]] | None = None
) -> Row:
    figures = await fs_bench.run(socket, quick, grpc_rtt)
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
