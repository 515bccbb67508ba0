"""No import circles among the modules of mha_viz.

Each module's imports are read with ast, not run: module-level imports, imports under `if TYPE_CHECKING:` (a
circle that only type checkers follow is still a circle in the design) and imports inside functions and classes
(the usual way of hiding a circle) all count. `from .pkg import name` is an edge to the submodule pkg.name where
that is a module, else to pkg itself. The implicit edge from a submodule to its parent package's __init__ (which
Python runs first) is not counted: it would make every package that imports its own submodules a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mha_viz

PACKAGE = Path(mha_viz.__file__).resolve().parent


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under root (a package's name for its __init__.py)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules among `modules` that the module `name` at path imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
    return (found & modules) - {name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    names = module_names(root)
    return {name: imported(name, path, set(names)) for name, path in names.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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


def test_the_graph_reader_finds_a_circle_and_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("import pkg.sub.d\nfrom .sub import d\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "d.py").write_text("from .. import c\n")
    graph = import_graph(pkg)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b"}  # under TYPE_CHECKING
    assert graph["pkg.b"] == {"pkg.a"}  # inside a function
    assert graph["pkg.c"] == {"pkg.sub.d"}
    assert graph["pkg.sub.d"] == {"pkg.c"}
    assert circles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"]]


def test_mha_viz_has_no_import_circles() -> None:
    graph = import_graph()
    assert len(graph) > 50 and graph["mha_viz.pretrained.model"]  # the whole package was read
    assert circles(graph) == []
