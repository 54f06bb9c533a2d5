"""Lexical location of request paths: which root, which components, and the
escapes refused before any file is touched."""

from __future__ import annotations

import pytest
from hostcapd.errors import Refusal
from hostcapd.fs.scope import FsScope, Located, RootSpec

SCOPE = FsScope(
    [
        RootSpec("/srv/ws", read_only=False),
        RootSpec("/srv/ref", read_only=True),
        RootSpec("/srv/ws/vendor", read_only=True),
    ]
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.txt", Located(0, ("a.txt",))),
        ("./src//main.py", Located(0, ("src", "main.py"))),
        ("src/../main.py", Located(0, ("main.py",))),
        (".", Located(0, ())),
        ("src/", Located(0, ("src",), trailing_slash=True)),
        ("/srv/ws/a.txt", Located(0, ("a.txt",))),
        ("/srv/ref/doc.md", Located(1, ("doc.md",))),
        ("/srv/ws/../ref/doc.md", Located(1, ("doc.md",))),
        ("/srv/ws/vendor/lib.py", Located(2, ("lib.py",))),
        ("/srv/ws", Located(0, ())),
    ],
)
def test_paths_beneath_a_root_are_located(path: str, expected: Located) -> None:
    assert SCOPE.locate(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "../../etc/passwd",
        "src/../../x",
        "/etc/passwd",
        "/proc/self/root/etc/passwd",
        "/srv/ws/../../etc/shadow",
        "/srv/wsx/file",
        "/",
    ],
)
def test_escapes_are_refused_lexically(path: str) -> None:
    with pytest.raises(Refusal) as refused:
        SCOPE.locate(path)
    assert refused.value.reason == "PATH_ESCAPES_ROOT"
    assert "etc" not in refused.value.message  # never echoes the outside path


@pytest.mark.parametrize("path", ["", "a\0b", "x" * 5000, "d/" + "n" * 256])
def test_malformed_paths_are_invalid(path: str) -> None:
    with pytest.raises(Refusal) as refused:
        SCOPE.locate(path)
    assert refused.value.reason == "INVALID_ARGUMENT"


def test_a_nested_read_only_root_keeps_its_tier_when_reached_through_its_parent() -> None:
    located = SCOPE.locate("vendor/lib.py")
    assert located.root == 0
    assert SCOPE.innermost_root(located.root, located.parts) == (2, ("lib.py",))
    assert SCOPE.roots[2].read_only


def test_display_is_the_absolute_path_children_see() -> None:
    assert SCOPE.display(1, ("a", "b.txt")) == "/srv/ref/a/b.txt"
    assert SCOPE.display(0, ()) == "/srv/ws"
