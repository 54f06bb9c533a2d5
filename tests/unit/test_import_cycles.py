"""No import circles in the daemon (`hostcapd`), the client (`hostcap`) or
the wire package (`hostcap_proto`): a module's imports, read with ast, never
lead back to it. Imports under `if TYPE_CHECKING:` are for the type checker
only and do not count; an import inside a function does, since it runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "hostcapd": REPO / "daemon" / "hostcapd",
    "hostcap": REPO / "client" / "hostcap",
    "hostcap_proto": REPO / "proto" / "hostcap_proto",
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            if path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
                continue  # generated: they import only protobuf and each other
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement but those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for other in node.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]))
            continue
        yield from _imports(node)


def _targets(name: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The module names an import statement loads (the most specific each)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        here = name.split(".") if is_package else name.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    for alias in node.names:
        yield f"{base}.{alias.name}"  # a submodule, if there is one
        yield base


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = graph.setdefault(name, set())
        for node in _imports(tree):
            is_package = path.name == "__init__.py"
            targets = list(_targets(name, is_package, node))
            if isinstance(node, ast.ImportFrom):
                # `from a import b`: the submodule a.b if it exists, else a.
                pairs = zip(targets[::2], targets[1::2], strict=True)
                picked = [sub if sub in modules else base for sub, base in pairs]
            else:
                picked = targets
            edges.update(t for t in picked if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_of_the_daemon_client_or_wire_imports_itself_in_a_circle() -> None:
    graph = import_graph()
    assert len(graph) > 100, "the walk found too few modules to mean anything"
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        ({"a": "from pkg import b\n", "b": "import pkg.a\n"}, [["pkg.a", "pkg.b"]]),
        ({"a": "from . import b\n", "b": "from .a import x\n"}, [["pkg.a", "pkg.b"]]),
        (
            {
                "a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n",
                "b": "import pkg.a\n",
            },
            [],
        ),
        ({"a": "def f():\n    from pkg import b\n", "b": "import pkg.a\n"}, [["pkg.a", "pkg.b"]]),
    ],
    ids=["absolute", "relative", "type_checking_only", "inside_a_function"],
)
def test_the_walk_sees_a_circle_and_only_a_real_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    modules: dict[str, str],
    expected: list[list[str]],
) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in modules.items():
        (root / f"{name}.py").write_text(text)
    monkeypatch.setattr(f"{__name__}.PACKAGES", {"pkg": root})
    assert cycles(import_graph()) == expected
