"""The protected and secret tables: each default pattern's own examples, and
the matcher's rules (anchoring, `**`, ancestors, case folding)."""

from __future__ import annotations

import pytest
from hostcapd.config import DEFAULT_PROTECTED_PATHS, DEFAULT_SECRET_PATHS
from hostcapd.fs.policy import EXAMPLES, PathPattern, PathPolicy, PatternError, split


def test_every_default_pattern_carries_examples() -> None:
    assert set(DEFAULT_PROTECTED_PATHS) | set(DEFAULT_SECRET_PATHS) <= set(EXAMPLES)


@pytest.mark.parametrize("pattern", sorted(EXAMPLES))
def test_default_pattern_accepts_and_rejects_its_examples(pattern: str) -> None:
    compiled = PathPattern.compile(pattern)
    matches, non_matches = EXAMPLES[pattern]
    assert [p for p in matches if not compiled.matches(split(p))] == []
    assert [p for p in non_matches if compiled.matches(split(p))] == []


def test_secret_table_refuses_credentials_anywhere_in_the_tree() -> None:
    policy = PathPolicy(DEFAULT_PROTECTED_PATHS, DEFAULT_SECRET_PATHS)
    for path in (".env", "svc/.env.local", "home/me/.ssh/id_ed25519", "deploy/tls.pem", "id_rsa"):
        assert policy.is_secret(split(path)), path
    for path in ("README.md", "src/environment.py", "docs/ssh.md"):
        assert not policy.is_secret(split(path)), path


def test_protected_table_covers_nested_repositories() -> None:
    policy = PathPolicy(DEFAULT_PROTECTED_PATHS, DEFAULT_SECRET_PATHS)
    assert policy.is_protected(split(".git/hooks/pre-commit"))
    assert policy.is_protected(split(".git/config"))
    assert policy.is_protected(split("src/.git/hooks/pre-commit"))
    assert policy.is_protected(split("vendor/x/.git/config"))
    assert not policy.is_protected(split(".git/HEAD"))
    assert not policy.is_protected(split("src/git/hooks/pre-commit"))


def test_double_star_in_the_middle_spans_any_depth() -> None:
    pattern = PathPattern.compile("build/**/cache")
    assert pattern.matches(split("build/cache"))
    assert pattern.matches(split("build/a/b/cache/file"))
    assert not pattern.matches(split("build/cachex"))


def test_single_star_never_crosses_a_slash() -> None:
    pattern = PathPattern.compile("*.key")
    assert pattern.matches(split("a.key"))
    assert not pattern.matches(split("dir/a.key"))


@pytest.mark.parametrize("bad", ["", "/", "a//b", "../x", "a/./b"])
def test_unusable_patterns_are_refused(bad: str) -> None:
    with pytest.raises(PatternError):
        PathPattern.compile(bad)


def _reference(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """The matcher as first written (recursive, over each ancestor): what
    the one-pass matcher must agree with."""
    import fnmatch

    def match(pat: tuple[str, ...], rest: tuple[str, ...]) -> bool:
        if not pat:
            return not rest
        if pat[0] == "**":
            return match(pat[1:], rest) or (bool(rest) and match(pat, rest[1:]))
        return bool(rest) and fnmatch.fnmatchcase(rest[0], pat[0]) and match(pat[1:], rest[1:])

    folded = tuple(part.casefold() for part in path)
    return any(match(pattern, folded[:end]) for end in range(len(folded), 0, -1))


def test_the_one_pass_matcher_agrees_with_the_recursive_one() -> None:
    import random

    chance = random.Random(35)
    pattern_parts = ["**", "*", "a", "b*", "?", "[ab]", "[!a]", ".git", "hooks", "*.key", ".ENV"]
    names = ["a", "b", "B", "ab", ".git", "hooks", "x.key", ".env", "c", "[ab]"]
    checked = 0
    for _ in range(4000):
        text = "/".join(chance.choice(pattern_parts) for _ in range(chance.randint(1, 4)))
        pattern = PathPattern.compile(text)
        path = tuple(chance.choice(names) for _ in range(chance.randint(0, 6)))
        assert pattern.matches(path) == _reference(pattern.parts, path), (text, path)
        checked += pattern.matches(path)
    assert 400 < checked < 3600  # both answers were exercised


def test_a_table_agrees_with_its_patterns_one_by_one() -> None:
    """A policy's table matches `**/X` and `**/X/**` patterns together (one
    set of literals, one expression): it must answer as its patterns do."""
    import random

    chance = random.Random(36)
    pattern_parts = ["**", "*", "a", "b*", "?", "[ab]", "[!a]", ".git", "hooks", "*.key", ".ENV"]
    names = ["a", "b", "B", "ab", ".git", "hooks", "x.key", ".env", "c", "[ab]", "**"]
    checked = 0
    for _ in range(1500):
        texts = [
            chance.choice(["**/{}", "**/{}/**", "{}"]).format(
                "/".join(chance.choice(pattern_parts) for _ in range(chance.randint(1, 2)))
            )
            for _ in range(chance.randint(1, 4))
        ]
        policy = PathPolicy(texts, texts)
        path = tuple(chance.choice(names) for _ in range(chance.randint(0, 5)))
        expected = any(PathPattern.compile(t).matches(path) for t in texts)
        assert policy.is_secret(path) == policy.is_protected(path) == expected, (texts, path)
        checked += expected
    assert 150 < checked < 1350  # both answers were exercised
