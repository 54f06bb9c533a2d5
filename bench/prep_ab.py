"""python -m bench.prep_ab [--rounds N]

In-process A/B of three per-spawn steps of the root, old form against new,
interleaved in one process (µs a call, the median of N rounds of 2000
calls each, each round alternating which goes first):

- the child's rlimits: `rlimits.plan` per spawn (old) against
  `order.plan_rlimits`, made once per merged limits (new);
- the exec record's limits: `limits.dumped` and `fast_encodable` per spawn
  (old) against `limits.dumped_plain` (new);
- a bridge read's ancillary room: `framing.ancillary_space(4)` per read
  (old) against the module's constant (new).

The limits are the tenant's defaults, as a bench Run's are.
"""

from __future__ import annotations

import argparse
import os
import statistics
from types import SimpleNamespace
from typing import Any

from hostcap_proto.audit import fast_encodable
from hostcapd import framing
from hostcapd.bridge import channel
from hostcapd.config import Limits, TenantLimits
from hostcapd.process import limits as limits_mod
from hostcapd.process.order import plan_rlimits
from hostcapd.sandbox import rlimits

from bench.stats import per_call_us

CALLS = 2000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prep_ab")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    tenant = TenantLimits(
        default=Limits(output_bytes=1 << 20, wall_seconds=120, cpu_seconds=60),
        ceiling=Limits(
            cpu_seconds=600,
            memory_bytes=1 << 30,
            pids=64,
            output_bytes=64 << 20,
            total_output_bytes=256 << 20,
            file_size_bytes=1 << 30,
            open_files=4096,
            wall_seconds=600,
        ),
    )
    merged = limits_mod.apply({}, tenant)
    prepared: Any = SimpleNamespace(limits=merged)
    profile: Any = SimpleNamespace(has=lambda name: name in {"rlimits", "cgroup"})
    pairs = {
        "rlimits plan": (
            lambda: (
                list(rlimits.plan(prepared.limits, profile.has("cgroup"), profile.has("cgroup")))
                if profile.has("rlimits")
                else []
            ),
            lambda: plan_rlimits(profile, prepared),
        ),
        "exec record's limits": (
            lambda: fast_encodable(limits_mod.dumped(merged)),
            lambda: limits_mod.dumped_plain(merged),
        ),
        "ancillary room": (
            lambda: framing.ancillary_space(4),
            lambda: channel._ANCILLARY,
        ),
    }
    print(f"load {os.getloadavg()[0]:.1f}, {args.rounds} rounds of {CALLS} calls")
    for name, (old, new) in pairs.items():
        olds: list[float] = []
        news: list[float] = []
        for index in range(args.rounds):
            if index % 2:
                olds.append(per_call_us(old, CALLS))
                news.append(per_call_us(new, CALLS))
            else:
                news.append(per_call_us(new, CALLS))
                olds.append(per_call_us(old, CALLS))
        o, n = statistics.median(olds), statistics.median(news)
        print(
            f"  {name}: old {o:.3f} us, new {n:.3f} us, new / old {n / o:.2f}, saves {o - n:.3f} us"
        )
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
