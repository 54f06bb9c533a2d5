"""A Run whose kept output is at the ceiling must reach the client: with
output_bytes at the --dev ceiling (256 MiB) on both streams the RunResult is
over 512 MiB, which the client's maximum message used to refuse
("Received message larger than max"), losing the output of a command that
succeeded. The client's receive limit and the daemon's send limit are now
sized from the ceilings (hostcap_proto.messages), and a config whose
ceilings would produce a larger reply is refused, LIMIT_INVALID."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import hostcap
import pytest
from hostcap.host import Outcome, ProcessLimits, SpawnOptions
from hostcap_proto import messages
from hostcap_proto.limits import DEV_CEILING, GiB, MiB
from hostcapd.config import ConfigError, dev_config, parse_config
from support.daemon import Daemon, daemon_config, tenant_config

CEILING = DEV_CEILING.output_bytes
assert CEILING is not None
EXTRA = 4096  # beyond the kept window on each stream: the marker line is kept too


async def test_both_streams_at_the_output_ceiling_are_received(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(
        tenants={
            "dev": {
                "limits": {
                    "ceiling": {"output_bytes": CEILING, "total_output_bytes": 2 * GiB},
                }
            }
        }
    )
    script = f"head -c {CEILING + EXTRA} /dev/zero; head -c {CEILING + EXTRA} /dev/zero >&2"
    async with hostcap.connect(daemon.socket) as host:
        result = await host.process.spawn(
            "sh",
            ["-c", script],
            {},
            SpawnOptions(
                labels={"session": "ceiling", "node_id": "n1", "tool_call_id": "t1"},
                limits=ProcessLimits(output_bytes=CEILING, wall_seconds=100),
            ),
        )
    assert result.outcome is Outcome.EXITED and result.exit_code == 0, result.message
    assert result.stdout_dropped_bytes == EXTRA and result.stderr_dropped_bytes == EXTRA
    for stream in (result.stdout, result.stderr):
        assert len(stream) > CEILING and f"{EXTRA} bytes dropped by hostcapd" in stream


def _tenant(state: Path, **over: object) -> dict[str, object]:
    return tenant_config(state, "big", **over)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (
            {"limits": {"ceiling": {"output_bytes": messages.MAX_OUTPUT_BYTES_CEILING + 1}}},
            "output_bytes",
        ),
        ({"fs": {"max_read_bytes": messages.MAX_READ_BYTES_CEILING + 1}}, "max_read_bytes"),
    ],
)
def test_a_ceiling_whose_reply_no_client_receives_is_refused_at_config_load(
    tmp_path: Path, override: dict[str, object], named: str
) -> None:
    config = daemon_config(tmp_path, {"big": _tenant(tmp_path, **override)})
    with pytest.raises(ConfigError, match=rf"LIMIT_INVALID.*{named}"):
        parse_config(config)


def test_the_largest_accepted_ceilings_fit_the_clients_message(tmp_path: Path) -> None:
    over = {
        "limits": {"ceiling": {"output_bytes": messages.MAX_OUTPUT_BYTES_CEILING}},
        "fs": {"max_read_bytes": messages.MAX_READ_BYTES_CEILING},
    }
    parse_config(daemon_config(tmp_path, {"big": _tenant(tmp_path, **over)}))
    largest = messages.reply_bytes(
        messages.MAX_OUTPUT_BYTES_CEILING, messages.MAX_READ_BYTES_CEILING
    )
    assert largest <= messages.MAX_REPLY_BYTES < 2**31 - 1
    assert dev_config(tmp_path).tenants[0].limits.ceiling.output_bytes == CEILING
    assert 2 * CEILING + MiB < messages.MAX_REPLY_BYTES
