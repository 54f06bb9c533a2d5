"""The redaction's cheap pre-checks never hide a secret: a value they let
through unexamined is one no rule would have changed. Checked on the
redaction table's values and on thousands of values built from secret-shaped
fragments (flags, assignments, headers, URLs, token prefixes, blanks)."""

from __future__ import annotations

import random
import re

from hostcap_proto.audit import REDACTED
from hostcapd.audit import redact
from test_audit_redact import MUST_KEEP, MUST_REDACT

FRAGMENTS = [
    "--password", "=", "hunter2", "-p", "TOKEN", "_", "KEY", "Bearer ", "bearer\t", "Authorization",
    ": ", "https://", "u", ":", "@h/x", "?", "&sig=", "access_token=", "ghp_", "gho_",
    "a1B2c3D4e5" * 4, "sk-", "Zx9" * 8, "eyJabcdefghij", ".", "AKIA", "ASIA", "ABCDEFGHIJKLMNOP",
    "xoxb-", "xapp-", "1234567890", " ", "\t", "\n", "\u00a0", "\u2028", "mysql", "mariadb-dump",
    " -psecret", "'q q'", '"d\\"q"', "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
    "hooks.slack.com/services/", "T0/B1/xx", "npm_", "x" * 36, "--", "-u", "user:pw", "é", "✓", "PWD",
    "api", "-key", "Cookie", "sortKey", "no-", "pass", "AIza", "y" * 35, "SG.", "z" * 16, "hf_",
    "pypi-", "glpat-", "github_pat_", "rk_live_", "sk_test_", "token", "secret", "DB", "--user",
    "curl", "sshpass", "login", "/usr/bin/mysql", "x=y", "a.b=c", "status", "/srv/work", "tests/unit",
]  # fmt: skip


def corpus() -> list[str]:
    values = {arg for argv, _ in MUST_REDACT for arg in argv}
    values.update(arg for argv in MUST_KEEP for arg in argv)
    rng = random.Random(7)
    for _ in range(20000):
        values.add("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 6))))
    return sorted(values)


VALUES = corpus()


def test_the_corpus_exercises_the_rules() -> None:
    redacted = [v for v in VALUES if redact._redact_by_rules(v) != v]
    assert len(redacted) > 2000  # plenty of secrets in it, of every kind
    assert any(REDACTED in redact._redact_by_rules(v) for v in VALUES if "ghp_" in v)


def test_a_value_the_pre_check_skips_is_one_no_rule_changes() -> None:
    skipped = [v for v in VALUES if not redact._MAY_HOLD_SECRET.search(v)]
    assert len(skipped) > 100
    for value in skipped:
        assert redact._redact_by_rules(value) == value, value


def test_redact_value_is_the_rules() -> None:
    for value in VALUES:
        assert redact.redact_value(value) == redact._redact_by_rules(value), value


def test_every_known_token_starts_where_the_token_check_looks() -> None:
    for value in VALUES:
        if redact._KNOWN_TOKENS.search(value):
            assert redact._MAY_HOLD_TOKEN.search(value), value


def test_the_blank_check_is_str_isspace() -> None:
    blanks = [chr(c) for c in range(0x3000 + 1) if chr(c).isspace()]
    assert all(redact._BLANK.fullmatch(c) for c in blanks)
    others = [chr(c) for c in range(0x3000 + 1) if not chr(c).isspace()]
    assert not any(redact._BLANK.fullmatch(c) for c in others)


def test_one_search_finds_a_mysql_like_program_as_each_name_alone_did() -> None:
    def named(text: str) -> bool:
        return any(
            re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) for name in redact._MYSQL_LIKE
        )

    texts = [*VALUES, "mysqldump -psecret db", "mysql-workbench -px", "my mysqlx", "mariadb-dump"]
    for text in texts:
        assert bool(redact._INLINE_MYSQL.search(text)) == named(text), text


def test_flag_names_are_judged_alike_cached_or_not() -> None:
    names = {v.lstrip("-").split("=")[0] for v in VALUES if v.startswith("-")}
    names.update(["password", "api-key", "no-password", "x" * 100 + "-token", "sort-key"])
    for name in names:
        assert redact._value_flag(name) == redact._is_value_flag(name), name
