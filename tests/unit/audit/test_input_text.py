"""A process.input record's text (issue 31): redacted line by line with the
secret rules of argv, then cut to `[audit] input_text_bytes`; the writer
alone says whether either happened."""

from __future__ import annotations

from typing import Any

from hostcap_proto.audit import REDACTED
from hostcapd.audit.redact import redact_text, seal_input

TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"


def test_each_line_is_redacted_as_a_command_line() -> None:
    typed = f"ls -la\r\nexport API_TOKEN={TOKEN}\nmysql --password=hunter2 db\r"
    redacted = redact_text(typed)
    assert TOKEN not in redacted and "hunter2" not in redacted
    assert redacted.startswith("ls -la\r\n")
    assert redacted.endswith(f"--password={REDACTED} db\r")
    assert redacted.count("\n") == typed.count("\n")


def test_text_is_cut_after_redaction_and_the_writer_says_so() -> None:
    body: dict[str, Any] = {"text": f"echo {TOKEN} " + "é" * 100}
    seal_input(body, 20)
    assert TOKEN not in body["text"] and body["text_redacted"] and body["text_truncated"]
    assert len(body["text"].encode()) <= 20
    plain: dict[str, Any] = {"text": "print(6*7)\n", "text_redacted": True}
    seal_input(plain, 4096)
    assert plain == {"text": "print(6*7)\n", "text_redacted": False, "text_truncated": False}
    none: dict[str, Any] = {"text": "secret-free"}
    seal_input(none, 0)
    assert none["text"] == "" and none["text_truncated"]


def test_the_query_table_shows_an_input_record_with_its_control_characters_visible() -> None:
    from hostcap.ctl.audit.table import format_row

    row = format_row(
        {
            "event": "process.input",
            "seq": 7,
            "tenant": "alpha",
            "spawn_id": "s1",
            "index": 2,
            "bytes": 12,
            "text": "API_TOKEN=[REDACTED]\x03",
            "text_redacted": True,
            "close": True,
        }
    )
    assert "#2 12 bytes" in row
    assert "\\x03" in row and "\x03" not in row
    assert row.endswith("(redacted) +EOF")
