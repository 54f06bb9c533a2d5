"""Scrubbing secret-shaped text from what an approver is shown.

The previews on an approval card are display copies: any span that looks
like a credential is replaced by `[redacted]`. The scrub runs over the whole
string, so a credential whose value spans a separator is still caught; it
may therefore also swallow part of a path, which is why a classifier reads
the unscrubbed copy and never the preview.

The patterns are a finite, public list: they cannot detect arbitrary
credentials pasted into free text.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"

# Each pattern, with examples checked by the tests (policy tables carry their
# own accept/reject examples).
SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
        ),
    ),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("llm_api_key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer", re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}")),
    ("url_userinfo", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")),
    (
        "assignment",
        re.compile(
            r"(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|auth)"
            r"[A-Za-z0-9_.-]*)(\s*[=:]\s*)([^\s&;,'\"]{4,})"
        ),
    ),
)


def redact_secret_shaped_text(text: str) -> str:
    """`text` with every secret-shaped span replaced by `[redacted]`."""
    for name, pattern in SECRET_PATTERNS:
        if name == "url_userinfo":
            text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
        elif name == "assignment":
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def looks_secret(text: str) -> bool:
    """Whether `text` contains a secret-shaped span."""
    return redact_secret_shaped_text(text) != text
