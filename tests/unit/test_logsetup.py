"""The daemon's log formats on their own: one line per record whatever the
message holds, syslog priorities for the journal, JSON fields, and the
rate limit refusals are logged under."""

from __future__ import annotations

import json
import logging
import sys

from hostcapd.logsetup import JsonFormatter, RateLimited, TextFormatter, fields


def record(level: int, message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("hostcapd.test", level, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_multi_line_message_is_one_text_line() -> None:
    line = TextFormatter(journal=False).format(
        record(logging.ERROR, "reload rejected: cfg: invalid config\n  a: bad\n  b: worse")
    )
    assert "\n" not in line
    assert line.endswith("reload rejected: cfg: invalid config | a: bad | b: worse")


def test_a_traceback_is_part_of_the_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        made = record(logging.ERROR, "failed")
        made.exc_info = sys.exc_info()
    for formatter in (TextFormatter(journal=False), JsonFormatter(journal=False)):
        line = formatter.format(made)
        assert "\n" not in line and "ValueError: boom" in line


def test_the_journal_gets_each_levels_syslog_priority() -> None:
    formatter = TextFormatter(journal=True)
    expected = {
        logging.DEBUG: "<7>",
        logging.INFO: "<6>",
        logging.WARNING: "<4>",
        logging.ERROR: "<3>",
        logging.CRITICAL: "<2>",
    }
    for level, prefix in expected.items():
        assert formatter.format(record(level, "x")).startswith(prefix + "hostcapd ")
    assert JsonFormatter(journal=True).format(record(logging.ERROR, "x")).startswith("<3>{")


def test_json_carries_the_fields_that_apply() -> None:
    line = JsonFormatter(journal=False).format(
        record(logging.INFO, "refused", **fields(tenant="ci", spawn_id="ab12", request_id=""))
    )
    body = json.loads(line)
    assert (body["level"], body["logger"], body["message"]) == ("INFO", "hostcapd.test", "refused")
    assert (body["tenant"], body["spawn_id"]) == ("ci", "ab12")
    assert "request_id" not in body


def test_one_line_per_key_in_an_interval_and_the_next_counts_the_rest() -> None:
    limit = RateLimited(interval=3600)
    assert limit.allow("ci", "QUOTA_EXCEEDED") == 0
    assert [limit.allow("ci", "QUOTA_EXCEEDED") for _ in range(3)] == [None, None, None]
    assert limit.allow("ci", "ENV_NOT_ALLOWED") == 0  # another reason
    assert limit.allow("web", "QUOTA_EXCEEDED") == 0  # another tenant
    limit.interval = 0
    assert limit.allow("ci", "QUOTA_EXCEEDED") == 3


#: A child that writes line by line, with pauses, then dies with a traceback.
CHILD = """
import sys, time
for i in range(3):
    sys.stderr.write(f"line {i}\\n"); sys.stderr.flush(); time.sleep(0.02)
raise ValueError("front-end broke")
"""


async def test_a_childs_traceback_on_stderr_is_one_record() -> None:
    import asyncio
    import subprocess

    from hostcapd.logsetup import relay_stderr

    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    logger = logging.getLogger("hostcapd.test.relay")
    logger.addHandler(Keep())
    logger.propagate = False
    child = subprocess.Popen([sys.executable, "-c", CHILD], stderr=subprocess.PIPE)
    assert child.stderr is not None
    relay_stderr(child.stderr, logger, "tenant ci: its front-end says: ", fields(tenant="ci"))
    for _ in range(500):
        if child.stderr.closed:
            break
        await asyncio.sleep(0.01)
    child.wait()
    assert len(got) == 1, [r.getMessage() for r in got]
    line = TextFormatter(journal=False).format(got[0])
    assert "\n" not in line and got[0].levelno == logging.WARNING
    assert "tenant ci: its front-end says: line 0 | line 1 | line 2 | Traceback " in line
    assert line.endswith("ValueError: front-end broke")
    assert got[0].tenant == "ci"  # type: ignore[attr-defined]
