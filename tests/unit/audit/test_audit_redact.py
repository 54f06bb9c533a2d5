"""The redaction table: argv values that must be redacted, and ordinary
arguments that must be kept exactly (an audit log that hides everything is
as useless as one that leaks)."""

from __future__ import annotations

import pytest
from hostcap_proto.audit import REDACTED as R
from hostcapd.audit.redact import bound_argv, redact_argv, secret_name

GHP = "ghp_" + "a1B2c3D4e5" * 4
SK = "sk-proj-" + "Zx9" * 12
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

MUST_REDACT: list[tuple[list[str], list[str]]] = [
    # flags named like secrets, value attached or next
    (["tool", "--password=hunter2"], ["tool", f"--password={R}"]),
    (["tool", "--password", "hunter2"], ["tool", "--password", R]),
    (["tool", "--db-password", "hunter2"], ["tool", "--db-password", R]),
    (["tool", "--api-key=k123"], ["tool", f"--api-key={R}"]),
    (["tool", "--apiKey", "k123"], ["tool", "--apiKey", R]),
    (["tool", "--access-token", "t"], ["tool", "--access-token", R]),
    (["tool", "--client-secret=s"], ["tool", f"--client-secret={R}"]),
    (["ngrok", "--authtoken", "t0k"], ["ngrok", "--authtoken", R]),
    (["tool", "-token=abc"], ["tool", f"-token={R}"]),
    (["aws", "--secret-access-key", "x"], ["aws", "--secret-access-key", R]),
    (["curl", "--oauth2-bearer", "x"], ["curl", "--oauth2-bearer", R]),
    (["openssl", "enc", "-passin", "pass:x"], ["openssl", "enc", "-passin", R]),
    # environment-shaped assignments
    (["env", "TOKEN=abc", "ls"], ["env", f"TOKEN={R}", "ls"]),
    (["env", "GITHUB_TOKEN=abc"], ["env", f"GITHUB_TOKEN={R}"]),
    (["env", "OPENAI_API_KEY=abc"], ["env", f"OPENAI_API_KEY={R}"]),
    (["env", "STRIPE_KEY=abc"], ["env", f"STRIPE_KEY={R}"]),
    (["env", "MY_SECRET_THING=abc"], ["env", f"MY_SECRET_THING={R}"]),
    (["env", "DB_PASS=abc"], ["env", f"DB_PASS={R}"]),
    (["docker", "run", "-e", "PGPASSWORD=abc"], ["docker", "run", "-e", f"PGPASSWORD={R}"]),
    (["docker", "run", "--env=API_TOKEN=abc"], ["docker", "run", f"--env=API_TOKEN={R}"]),
    (["git", "-c", "user.password=abc"], ["git", "-c", f"user.password={R}"]),
    # headers
    (
        ["curl", "-H", "Authorization: Bearer abc.def.ghi"],
        ["curl", "-H", f"Authorization: Bearer {R}"],
    ),
    (
        ["curl", "-H", "authorization:Basic dXNlcjpwYXNz"],
        ["curl", "-H", f"authorization:Basic {R}"],
    ),
    (["curl", "--header=Authorization: token abc"], ["curl", f"--header=Authorization: token {R}"]),
    (["curl", "-H", "X-Api-Key: abc"], ["curl", "-H", f"X-Api-Key: {R}"]),
    (["curl", "-H", "Cookie: session=abc"], ["curl", "-H", f"Cookie: {R}"]),
    (["curl", "-H", "PRIVATE-TOKEN: abc"], ["curl", "-H", f"PRIVATE-TOKEN: {R}"]),
    (
        ["git", "-c", "http.extraHeader=Authorization: Basic abc"],
        ["git", "-c", f"http.extraHeader=Authorization: Basic {R}"],
    ),
    (["tool", "Bearer abcdefghijklmnop1234"], ["tool", f"Bearer {R}"]),
    # URLs
    (
        ["git", "clone", "https://alice:s3cret@example.com/r.git"],
        ["git", "clone", f"https://alice:{R}@example.com/r.git"],
    ),
    (["psql", "postgres://app:pw@db:5432/x"], ["psql", f"postgres://app:{R}@db:5432/x"]),
    (
        ["curl", "https://api.example.com/v1?access_token=abc&page=2"],
        ["curl", f"https://api.example.com/v1?access_token={R}&page=2"],
    ),
    (
        ["curl", "https://x.blob.core.windows.net/c/f?sv=2020&sig=abc%3D"],
        ["curl", f"https://x.blob.core.windows.net/c/f?sv=2020&sig={R}"],
    ),
    # tokens with well-known prefixes, anywhere in a value
    (["gh", "auth", GHP], ["gh", "auth", R]),
    (
        ["git", "push", f"https://x-access-token:{GHP}@github.com/o/r"],
        ["git", "push", f"https://x-access-token:{R}@github.com/o/r"],
    ),
    (
        ["git", "clone", f"https://{GHP}@github.com/o/r"],
        ["git", "clone", f"https://{R}@github.com/o/r"],
    ),
    (["llm", "--model", "x", SK], ["llm", "--model", "x", R]),
    (["tool", "key:sk-ant-api03-abcdefghijklmnopqrstuvwx"], ["tool", f"key:{R}"]),
    (["slack", "xoxb-1234567890-abcdefghij"], ["slack", R]),
    (["aws", "AKIAIOSFODNN7EXAMPLE"], ["aws", R]),
    (["maps", "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234"], ["maps", R]),
    (["tool", JWT], ["tool", R]),
    (["tool", "glpat-abcdefghijklmnopqrst"], ["tool", R]),
    (["tool", "sk_live_abcdefghijklmnop1234"], ["tool", R]),
    (["tool", "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"], ["tool", R]),
    (["tool", "npm_abcdefghijklmnopqrstuvwxyz0123456789"], ["tool", R]),
    (
        ["curl", "https://hooks.slack.com/services/T000/B000/XXXXXXXX"],
        ["curl", f"https://hooks.slack.com/services/{R}"],
    ),
    (
        [
            "tool",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA\n-----END OPENSSH PRIVATE KEY-----",
        ],
        ["tool", R],
    ),
    # program-specific short flags
    (["mysql", "-u", "root", "-phunter2", "db"], ["mysql", "-u", "root", f"-p{R}", "db"]),
    (["/usr/bin/mysqldump", "-pX", "db"], ["/usr/bin/mysqldump", f"-p{R}", "db"]),
    (["sshpass", "-p", "hunter2", "ssh", "h"], ["sshpass", "-p", R, "ssh", "h"]),
    (["curl", "-u", "alice:pw", "https://x"], ["curl", "-u", f"alice:{R}", "https://x"]),
    (["curl", "-ualice:pw"], ["curl", f"-ualice:{R}"]),
    (["curl", "--user=alice:pw"], ["curl", f"--user=alice:{R}"]),
    (["docker", "login", "-p", "pw", "-u", "me"], ["docker", "login", "-p", R, "-u", "me"]),
    # a command line inside one argument
    (
        ["sh", "-c", "mysql -phunter2 db && curl --token abc x && DB_PASSWORD=x ./run"],
        ["sh", "-c", f"mysql -p{R} db && curl --token {R} x && DB_PASSWORD={R} ./run"],
    ),
    (["bash", "-c", "export GITHUB_TOKEN='abc def'"], ["bash", "-c", f"export GITHUB_TOKEN={R}"]),
]

MUST_KEEP: list[list[str]] = [
    ["ls", "-la", "/tmp"],
    ["git", "commit", "-m", "fix tokenizer for passwords page"],
    ["git", "log", "--pretty=format:%H %s", "-n", "5"],
    ["git", "checkout", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
    ["sort", "--key=2", "-k", "3", "file"],
    ["ssh", "-p", "22", "user@host"],
    ["mkdir", "-p", "a/b"],
    ["docker", "run", "-p", "8080:80", "img"],
    ["psql", "--no-password", "-h", "db"],
    ["ansible-playbook", "--ask-pass", "site.yml"],
    ["gh", "auth", "login", "--with-token"],
    ["tool", "--password-file", "/run/secrets/db"],
    ["tool", "--token-file=/run/secrets/t"],
    ["tool", "--secret-file", "/x"],
    ["tool", "--auth-type=basic"],
    ["tool", "--password", "--verbose"],  # the flag had no value: the next is a flag
    ["env", "PWD=/srv", "OLDPWD=/", "TOKENIZERS_PARALLELISM=false", "GIT_ASKPASS=/bin/true"],
    ["env", "SSH_AUTH_SOCK=/run/ssh.sock", "KEYBOARD=us", "HOME=/root"],
    ["pip", "install", "scikit-learn", "sk-video", "task-runner-framework-for-things"],
    ["curl", "https://github.com/org/repo.git", "https://example.com/?page=2&sort=asc"],
    ["curl", "-H", "Content-Type: application/json", "-H", "Accept: */*"],
    ["grep", "-r", "password", "src/"],
    ["python3", "-c", "print('hello world')"],
    ["sh", "-c", "ls -la && echo done"],
    ["uuidgen", "3fa85f64-5717-4562-b3fc-2c963f66afa6"],
    ["tool", "--sessions=4", "--key", "name"],
    ["mysql", "-p", "db"],  # -p alone prompts; db is the database
]


@pytest.mark.parametrize(
    ("argv", "expected"), MUST_REDACT, ids=[" ".join(a)[:50] for a, _ in MUST_REDACT]
)
def test_secret_shaped_values_are_redacted(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


@pytest.mark.parametrize("argv", MUST_KEEP, ids=[" ".join(a)[:50] for a in MUST_KEEP])
def test_ordinary_arguments_are_kept_exactly(argv: list[str]) -> None:
    assert redact_argv(argv) == argv


@pytest.mark.parametrize(
    ("name", "env", "secret"),
    [
        ("password", False, True),
        ("password-file", False, False),
        ("sort-key", False, False),
        ("api-key", False, True),
        ("SORT_KEY", True, True),  # the *_KEY convention of environment names
        ("KEY", True, False),
        ("PWD", True, False),
        ("DB_PWD", True, True),
        ("SECRETS_DIR", True, True),
        ("secrets-dir", False, False),
    ],
)
def test_secret_names(name: str, env: bool, secret: bool) -> None:
    assert secret_name(name, env=env) is secret


def test_redaction_runs_before_truncation_so_no_half_secret_survives() -> None:
    secret = "Zq" * 5000
    argv = redact_argv(["tool", f"--token={secret}", f"Authorization: Bearer {secret}"])
    kept, cut = bound_argv(argv, max_arg_chars=100)
    assert kept == ["tool", f"--token={R}", f"Authorization: Bearer {R}"]
    assert not cut
    assert all("Zq" not in a for a in kept)


def test_bounding_marks_what_it_cut() -> None:
    kept, cut = bound_argv(["a" * 50, "b" * 10, "c" * 10], max_arg_chars=20, max_argv_chars=50)
    assert cut
    assert kept[0] == "a" * 10 + "...[30 chars cut]..." + "a" * 10
    assert kept[1:] == ["b" * 10]
    assert bound_argv(["x", "y"]) == (["x", "y"], False)


def test_a_cut_element_keeps_its_head_and_its_tail() -> None:
    """Issue 29's second cloak: blanks before the payload cannot push it out."""
    script = " " * 4096 + "echo payload; touch ~/x"
    (kept,), cut = bound_argv([script])
    assert cut
    assert kept.startswith(" " * 2048) and kept.endswith("echo payload; touch ~/x")
    assert f"...[{len(script) - 4096} chars cut]..." in kept


# Issue 29's first cloak and its relatives: a secret-shaped assignment, flag,
# header or URL inside a script. Only the value's span is replaced; the
# command after it stays in the record.
SCRIPTS_KEEP_THEIR_COMMANDS: list[tuple[str, str]] = [
    ("API_TOKEN=1; echo payload; touch ~/x", f"API_TOKEN={R}; echo payload; touch ~/x"),
    ("API_TOKEN=1;echo${IFS}payload", f"API_TOKEN={R};echo${{IFS}}payload"),
    ("API_TOKEN=1&&touch ~/x", f"API_TOKEN={R}&&touch ~/x"),
    ("API_TOKEN=1|sh", f"API_TOKEN={R}|sh"),
    ("API_TOKEN=1 touch ~/x", f"API_TOKEN={R} touch ~/x"),
    ("API_TOKEN=1\ntouch ~/x", f"API_TOKEN={R}\ntouch ~/x"),
    ("API_TOKEN=$(touch ~/x)", "API_TOKEN=$(touch ~/x)"),
    ("API_TOKEN=`touch ~/x`", "API_TOKEN=`touch ~/x`"),
    ('API_TOKEN="$(touch ~/x)"', 'API_TOKEN="$(touch ~/x)"'),
    ("API_TOKEN='a b'; touch ~/x", f"API_TOKEN={R}; touch ~/x"),
    ('API_TOKEN="a b";touch ~/x', f"API_TOKEN={R};touch ~/x"),
    ("echo hi; API_TOKEN=abc touch ~/x", f"echo hi; API_TOKEN={R} touch ~/x"),
    ("echo hi; API_TOKEN=abc;touch ~/x", f"echo hi; API_TOKEN={R};touch ~/x"),
    (" API_TOKEN='$(touch ~/x)'", " API_TOKEN='$(touch ~/x)'"),
    ("run --password=x;touch ~/x", f"run --password={R};touch ~/x"),
    ("--password=x;touch ~/x", f"--password={R};touch ~/x"),
    ("X-Api-Key: abc; touch ~/x", f"X-Api-Key: {R}; touch ~/x"),
    ("Authorization: Bearer abc;touch ~/x", f"Authorization: Bearer {R};touch ~/x"),
    ("curl https://u:pw;touch@h", "curl https://u:pw;touch@h"),
    ("curl https://h/?token=abc|sh", f"curl https://h/?token={R}|sh"),
    ("echo -----BEGIN RSA PRIVATE KEY-----abc; touch ~/x", f"echo {R}; touch ~/x"),
]


@pytest.mark.parametrize(("script", "kept"), SCRIPTS_KEEP_THEIR_COMMANDS)
def test_a_redaction_never_hides_a_command(script: str, kept: str) -> None:
    assert redact_argv(["sh", "-c", script]) == ["sh", "-c", kept]


def test_a_secret_flag_value_keeps_what_follows_a_metacharacter() -> None:
    assert redact_argv(["sh", "-c", "eval $1", "--token", "x;touch ~/x"]) == [
        "sh", "-c", "eval $1", "--token", f"{R};touch ~/x"
    ]  # fmt: skip
    assert redact_argv(["tool", "--password", "pass word"]) == ["tool", "--password", R]
    assert redact_argv(["sshpass", "-p", "s3;touch ~/x"]) == ["sshpass", "-p", f"{R};touch ~/x"]
