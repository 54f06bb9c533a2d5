"""Redaction of secret-shaped values in an argv before it is audited.

`redact_argv` runs on whole argv elements, before `bound_argv` cuts anything,
so a cut can never expose half a secret. What counts as secret-shaped:

- a flag named like a secret, with its value attached or as the next
  element: ``--password=x``, ``--api-key x``, ``-token=x``, ``--authtoken x``
  (but not ``--password-file x``, ``--no-password``, ``--sort-key=2``);
- an environment assignment named like a secret: ``TOKEN=x``, ``DB_PASS=x``,
  ``*_KEY=x``, ``*SECRET*=x`` (but not ``PWD=/x``, ``TOKENIZERS_PARALLELISM=1``);
- an ``Authorization:`` header (scheme kept), other secret-named headers,
  a standalone ``Bearer x``;
- the password of a URL's userinfo (``https://user:[REDACTED]@host``) and
  secret-named query parameters (``?access_token=``, ``&sig=``);
- tokens with a well-known prefix anywhere in a value (``ghp_``, ``sk-``,
  ``xoxb-``, ``AKIA``, ``AIza``, JWTs, PEM private keys, ...);
- a few programs' short flags: ``mysql -pSECRET``, ``sshpass -p x``,
  ``curl -u user:x``, ``docker login -p x``.

Generic "high-entropy" strings are *not* redacted: hashes and ids are what
an audit log is for. Every rule carries examples checked by the tests.

**A redaction never hides a command.** Any element may be a shell script
(``sh -c``, ``eval``, ``ssh host CMD``), so the span a rule replaces ends at
the first shell metacharacter (``; & | < > ( ) $ ` \\ " '``, a newline, and
for an assignment a blank): ``sh -c 'API_TOKEN=1; echo payload'`` is kept as
``API_TOKEN=[REDACTED]; echo payload``. A quoted value is replaced whole only
when nothing in it expands (no ``$``, backquote or backslash). The writer
records ``argv_redacted`` whenever anything was replaced, and the digest of
the argv as given, so what a rule does hide (a PEM key's body, say) can be
checked against a claimed argv (``hostcapctl audit verify-argv``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from hostcap_proto.audit import REDACTED, argv_sha256

#: Longest argv element kept whole, in characters.
MAX_ARG_CHARS = 4096
#: Longest argv kept, all elements together, in characters.
MAX_ARGV_CHARS = 64 * 1024

# A name's last word decides (``--password-file`` names a file, not a secret).
_SECRET_LAST_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pass",
        "passin",
        "passout",
        "pw",
        "secret",
        "secrets",
        "token",
        "tokens",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "bearer",
        "auth",
        "authorization",
        "otp",
    }
)
# Concatenated names (``--authtoken``, ``DBPASSWORD``) end with one of these.
_SECRET_SUFFIXES = ("password", "passwd", "token", "secret", "apikey")
# ``key`` is secret only when qualified (``--sort-key=2`` is not).
_KEY_QUALIFIERS = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "signing",
        "encryption",
        "master",
        "auth",
        "license",
        "session",
        "client",
        "account",
        "ssh",
        "deploy",
        "service",
        "subscription",
        "storage",
        "shared",
        "webhook",
    }
)
# Flags that only switch behaviour (``--no-password``, ``--ask-pass``) take no secret.
_BOOLEAN_PREFIXES = frozenset({"no", "ask", "prompt", "with", "without", "skip"})
# Query parameters that carry credentials though not named like a secret.
_SECRET_QUERY_NAMES = frozenset(
    {
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
    }
)

# The shell's metacharacters: a command separator, a redirection, a
# substitution, a quote or an escape. A replaced span never holds one.
_META = r";&|<>()$`\\\"'"
# A secret value's span at the start of a value: a quoted string in which
# nothing expands, or a run of characters that are not metacharacters. In an
# assignment a blank ends it too (``TOKEN=a b`` runs ``b``); in a flag's or
# a header's value a blank only separates the arguments of the same command.
_QUOTED_SPAN = r"""'[^'$`\\]*'|"[^"$`\\]*\""""
_WORD_SPAN = re.compile(rf"{_QUOTED_SPAN}|[^\s{_META}]+")
_VALUE_SPAN = re.compile(rf"{_QUOTED_SPAN}|[^\n\r{_META}]+")

_WORD_SPLIT = re.compile(r"[-_.]+|(?<=[a-z0-9])(?=[A-Z])")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)=(.+)", re.DOTALL)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLAG = re.compile(r"(-{1,2})([A-Za-z][A-Za-z0-9_.-]*)(?:=(.*))?", re.DOTALL)
_HEADER = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*:\s*(\S.*)", re.DOTALL)
_AUTHORIZATION = re.compile(
    r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)"
    r"(?:((?:bearer|basic|token|digest|negotiate|bot)\s+))?"
    rf"([^\s{_META}]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/=-]{16,})")
_URL_USERINFO = re.compile(
    rf"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/@:?#{_META}]*):([^\s/@?#{_META}]+)@"
)
_QUERY_PARAM = re.compile(rf"([?&;])([A-Za-z0-9_.-]+)=([^#\s{_META}]*)")
_KNOWN_TOKENS = re.compile(
    "|".join(
        [
            r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}",
            r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{22,}",
            r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}",
            r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}",
            r"(?<![A-Za-z0-9])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
            r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}",
            r"(?<![A-Za-z0-9])xapp-[A-Za-z0-9-]{10,}",
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
            r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}",
            r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}",
            r"(?<![A-Za-z0-9])pypi-[A-Za-z0-9_-]{50,}",
            r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}",
            r"(?<![A-Za-z0-9])SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
            r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            r"(?<=hooks\.slack\.com/services/)[A-Za-z0-9/]+",
            rf"-----BEGIN [A-Z ]*PRIVATE KEY-----[^{_META}]*?"
            rf"(?:-----END [A-Z ]*PRIVATE KEY-----|(?=[{_META}])|\Z)",
        ]
    )
)
# Inside a command-line string (``sh -c "..."``): a secret flag's value, an
# assignment's value. A token is a quoted string or a run of non-blanks.
_INLINE_TOKEN = rf"({_QUOTED_SPAN}|[^\s{_META}]+)"
_INLINE_FLAG = re.compile(r"(?<!\S)(-{1,2}[A-Za-z][A-Za-z0-9_.-]*)(=|\s+)" + _INLINE_TOKEN)
_INLINE_ASSIGNMENT = re.compile(r"(?<![\S])([A-Za-z_][A-Za-z0-9_]*)=" + _INLINE_TOKEN)
_INLINE_MYSQL_P = re.compile(r"(?<!\S)-p(?=\S)" + _INLINE_TOKEN)
# Each alternative of _KNOWN_TOKENS starts with one of these fixed texts (the
# slack one is its lookbehind): no match of this, no known token. Searching
# for these is far cheaper than trying the lookbehinds at every position.
_TOKEN_START = (
    r"gh[pousr]_|github_pat_|glpat-|sk-|[sr]k_|xox[abposr]-|xapp-|A[KS]IA|AIza|npm_|pypi-"
    r"|hf_|SG\.|eyJ|hooks\.slack\.com/services/|-----BEGIN "
)
_MAY_HOLD_TOKEN = re.compile(_TOKEN_START)
# Every rule of `redact_value` needs one of these in the value: "=" or ":"
# (assignments, headers, Authorization, URLs, query parameters), a blank
# (Bearer, PEM keys, command lines), or a known token's start. Most argv
# elements hold none, and are kept without running the rules.
_MAY_HOLD_SECRET = re.compile(r"[=:\s]|" + _TOKEN_START)
_BLANK = re.compile(r"\s")  # the same characters as str.isspace

# Programs whose short flags carry secrets: flag -> "value" (the whole value is
# secret) or "userinfo" (``user:secret``). Applied after the program's name.
_MYSQL_LIKE = ("mysql", "mysqldump", "mysqladmin", "mysqlcheck", "mysqlimport", "mysqlshow",
               "mariadb", "mariadb-dump", "mariadb-admin")  # fmt: skip
# One of the mysql-like programs named inside a command line.
_INLINE_MYSQL = re.compile(
    r"(?<![\w-])(?:" + "|".join(re.escape(name) for name in _MYSQL_LIKE) + r")(?![\w-])"
)
_PROGRAM_FLAGS: dict[str, dict[str, str]] = {
    **{name: {"-p": "attached"} for name in _MYSQL_LIKE},
    "sshpass": {"-p": "value"},
    "curl": {"-u": "userinfo", "--user": "userinfo", "-U": "userinfo", "--proxy-user": "userinfo"},
    "login": {"-p": "value"},  # docker / podman / nerdctl login
}


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


def secret_name(name: str, *, env: bool = False) -> bool:
    """Whether a flag, variable, header or query parameter name names a secret.

    `env` applies the environment-variable conventions: ``*_KEY`` and
    ``*SECRET*`` are secret, a lone ``PWD`` is the working directory."""
    words = _words(name)
    if not words:
        return False
    last = words[-1]
    if env:
        if any("secret" in w for w in words):
            return True
        if last == "key" and len(words) > 1:
            return True
    if last == "pwd":
        return len(words) > 1
    if last in _SECRET_LAST_WORDS:
        return True
    if last == "key":
        return len(words) > 1 and words[-2] in _KEY_QUALIFIERS
    return any(last.endswith(s) and last != s for s in _SECRET_SUFFIXES)


def _value_flag(name: str) -> bool:
    """A secret-named flag that takes its secret as a value."""
    if len(name) <= _CACHED_NAME_CHARS:
        return _known_value_flag(name)
    return _is_value_flag(name)


def _is_value_flag(name: str) -> bool:
    words = _words(name)
    return secret_name(name) and words[0] not in _BOOLEAN_PREFIXES


# Programs use the same few flags over and over; the answer depends on the
# name alone. Long names are not cached, so the cache stays small.
_CACHED_NAME_CHARS = 64
_known_value_flag = functools.lru_cache(maxsize=1024)(_is_value_flag)


def _redact_userinfo(value: str) -> str:
    user, sep, secret = value.partition(":")
    return f"{user}:{_redact_span(secret)}" if sep and secret else value


def _redact_span(value: str, *, word: bool = False) -> str:
    """A secret value: REDACTED in place of its span (to the first shell
    metacharacter, or a whole quoted string; `word`: to a blank, too), what
    follows kept and redacted by the rules of its own."""
    match = (_WORD_SPAN if word else _VALUE_SPAN).match(value)
    if match is None:
        return redact_value(value)  # nothing here can be replaced without hiding a command
    rest = value[match.end() :]
    return REDACTED + redact_value(rest) if rest else REDACTED


def redact_value(value: str) -> str:
    """Redact the secret-shaped parts of one value (an argv element, or the
    value of a flag). Returns `value` itself when nothing is secret."""
    if not value or not _MAY_HOLD_SECRET.search(value):
        return value
    return _redact_by_rules(value)


def _redact_by_rules(value: str) -> str:
    """`redact_value` without its pre-check: every rule, in order."""
    assignment = _ASSIGNMENT.fullmatch(value)
    if assignment:
        # TOKEN=x (environment conventions) or a dotted config key (user.password=x).
        name = assignment.group(1)
        if secret_name(name, env=bool(_ENV_NAME.fullmatch(name))):
            return f"{name}={_redact_span(assignment.group(2), word=True)}"
    header = _HEADER.fullmatch(value)
    if header and not _AUTHORIZATION.match(value) and secret_name(header.group(1)):
        return f"{header.group(1)}: {_redact_span(header.group(2))}"
    value = _AUTHORIZATION.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{REDACTED}", value)
    value = _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", value)
    value = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", value)
    value = _QUERY_PARAM.sub(_redact_query_param, value)
    if _MAY_HOLD_TOKEN.search(value):
        value = _KNOWN_TOKENS.sub(REDACTED, value)
    if _BLANK.search(value):
        value = _redact_inline(value)
    return value


def _redact_query_param(match: re.Match[str]) -> str:
    name = match.group(2)
    if match.group(3) and (name.lower() in _SECRET_QUERY_NAMES or secret_name(name)):
        return f"{match.group(1)}{name}={REDACTED}"
    return match.group(0)


def _redact_inline(text: str) -> str:
    """A value holding a whole command line: redact the flags and assignments in it."""

    def flag(m: re.Match[str]) -> str:
        name = m.group(1).lstrip("-")
        if _value_flag(name) and m.group(3).strip("'\"") and not m.group(3).startswith("--"):
            return f"{m.group(1)}{m.group(2)}{REDACTED}"
        return m.group(0)

    def assignment(m: re.Match[str]) -> str:
        if secret_name(m.group(1), env=True):
            return f"{m.group(1)}={REDACTED}"
        return m.group(0)

    text = _INLINE_FLAG.sub(flag, text)
    text = _INLINE_ASSIGNMENT.sub(assignment, text)
    if _INLINE_MYSQL.search(text):
        text = _INLINE_MYSQL_P.sub(f"-p{REDACTED}", text)
    return text


def redact_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with every secret-shaped value replaced by REDACTED (whole values,
    before any truncation). Elements that hold no secret are kept unchanged."""
    result: list[str] = []
    program: dict[str, str] = {}
    redact_next: str | None = None  # "value" or "userinfo": how to redact the next element
    for arg in argv:
        if redact_next is not None:
            if arg.startswith("--") and redact_next == "value":
                redact_next = None  # a flag, not the secret: the secret flag had no value
            else:
                result.append(
                    _redact_userinfo(arg) if redact_next == "userinfo" else _redact_span(arg)
                )
                redact_next = None
                continue
        base = arg.rpartition("/")[2]  # os.path.basename, without its overhead
        if base in _PROGRAM_FLAGS:
            program = _PROGRAM_FLAGS[base]
        out, redact_next = _redact_arg(arg, program)
        result.append(out)
    return result


def _redact_arg(arg: str, program: dict[str, str]) -> tuple[str, str | None]:
    """One element, and how the element after it must be redacted (or None)."""
    for flag, kind in program.items():
        if arg == flag and kind != "attached":
            return arg, kind
        if flag.startswith("--") and arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
            return (
                f"{flag}={_redact_userinfo(value) if kind == 'userinfo' else _redact_span(value)}",
                None,
            )
        if len(flag) == 2 and arg.startswith(flag) and len(arg) > 2:
            value = arg[2:]
            return (
                f"{flag}{_redact_userinfo(value) if kind == 'userinfo' else _redact_span(value)}",
                None,
            )
    match = _FLAG.fullmatch(arg)
    if match and not (match.group(1) == "-" and len(match.group(2)) == 1):
        dashes, name, value = match.groups()
        if value is None:
            return arg, ("value" if _value_flag(name) else None)
        if value and _value_flag(name):
            return f"{dashes}{name}={_redact_span(value)}", None
        return f"{dashes}{name}={redact_value(value)}", None
    return redact_value(arg), None


def bound_argv(
    argv: Sequence[str],
    *,
    max_arg_chars: int = MAX_ARG_CHARS,
    max_argv_chars: int = MAX_ARGV_CHARS,
) -> tuple[list[str], bool]:
    """`argv` cut to bounded size (run it on a redacted argv): each element to
    `max_arg_chars` with a marker saying how much was cut, and elements past
    `max_argv_chars` in total dropped. Returns the argv and whether it was cut.

    A cut element keeps its head and its tail (half of `max_arg_chars` each)
    around the marker ``...[N chars cut]...``: padding put before a payload
    cannot push the payload out of the record."""
    kept: list[str] = []
    total = 0
    cut = False
    head = max_arg_chars - max_arg_chars // 2
    tail = max_arg_chars // 2
    for arg in argv:
        if len(arg) > max_arg_chars:
            removed = len(arg) - max_arg_chars
            arg = f"{arg[:head]}...[{removed} chars cut]...{arg[len(arg) - tail :] if tail else ''}"
            cut = True
        if total + len(arg) > max_argv_chars:
            return kept, True
        kept.append(arg)
        total += len(arg)
    return kept, cut


_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")


def redact_text(text: str) -> str:
    """Input typed or piped to a command (a process.input's text): each line
    redacted as a value that may hold a whole command line, with argv's rules.
    A secret split across two writes (typed a key at a time) is not seen."""
    parts = _LINE_BREAK.split(text)
    return "".join(part if i % 2 else redact_value(part) for i, part in enumerate(parts))


def seal_input(body: dict[str, Any], max_bytes: int) -> None:
    """A process.input record's text as stored: redacted, then cut to
    `max_bytes` of UTF-8; the writer alone says whether either happened."""
    given: str = body.get("text", "")
    redacted = redact_text(given)
    encoded = redacted.encode("utf-8", "backslashreplace")
    cut = len(encoded) > max_bytes
    body["text"] = encoded[:max_bytes].decode("utf-8", "ignore") if cut else redacted
    body["text_redacted"] = redacted != given
    body["text_truncated"] = cut


#: An element longer than this is never exec'd (the daemon refuses it, see
#: hostcapd.process.request): a refusal's record names its size, not its text,
#: and redaction never runs over it.
MAX_REDACTED_ARG_CHARS = 128 * 1024


def _considered(argv: list[str]) -> list[str]:
    """The elements of `argv` that may end up in the record: those within
    twice the record's bound (redaction may lengthen a few), an element too
    long to be exec'd replaced by its size. `argv` itself when that is all
    of it (a refused call's argv may be far larger than any exec's)."""
    lengths = [len(arg) for arg in argv]
    if sum(lengths) <= 2 * MAX_ARGV_CHARS and max(lengths, default=0) <= MAX_REDACTED_ARG_CHARS:
        return argv
    kept: list[str] = []
    total = 0
    for arg in argv:
        if len(arg) > MAX_REDACTED_ARG_CHARS:
            arg = f"...[{len(arg)} chars not recorded]..."
        total += len(arg)
        if total > 2 * MAX_ARGV_CHARS:
            break
        kept.append(arg)
    return kept


def seal_argv(body: dict[str, Any]) -> None:
    """The argv of a record as stored, and what the writer alone says of it:
    the digest of the argv as given (before anything is redacted or cut),
    whether anything was redacted, whether it was cut (then argc). Whatever
    a caller passed for these is replaced."""
    for name in ("argv_truncated", "argc", "argv_redacted", "argv_sha256"):
        body.pop(name, None)
    given: list[str] = body["argv"]
    considered = _considered(given)
    # Redaction first, on whole values; only then may anything be cut.
    redacted = redact_argv(considered)
    argv, cut = bound_argv(redacted)
    body["argv"] = argv
    body["argv_sha256"] = argv_sha256(given)
    body["argv_redacted"] = redacted != considered
    body["argv_truncated"] = cut or considered is not given
    if cut:
        body["argc"] = len(given)
