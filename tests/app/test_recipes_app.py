"""CONTRIBUTING.md's recipes "Add a view" and "Add an analysis section", tried as written: each recipe's file goes into
a package of its own (as mha_viz/ui/parts/views/ or sections/ would hold it), is registered by the same discovery
(mha_viz.parts.Registry.discover), and runs the recipe's own test and the registry checks of test_parts_app; then it
is unregistered."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mha_viz.parts import SECTIONS, VIEWS, Registry
from tests.app.test_parts_app import check_section, check_view

GUIDE = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"


def recipe(title: str) -> tuple[str, str]:
    """The part's file and its test: the first two Python blocks under the heading."""
    text = GUIDE.read_text(encoding="utf-8").split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 2, title
    return blocks[0], blocks[1]


@pytest.fixture
def added(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, Registry, str, str], str]]:
    """add(kind, registry, module name, source): the file in tmp_path/recipe_parts/<kind>/, discovered."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "recipe_parts").mkdir()
    (tmp_path / "recipe_parts" / "__init__.py").write_text("", encoding="utf-8")
    registered: list[tuple[Registry, str]] = []

    def add(kind: str, registry: Registry, module: str, source: str) -> str:
        (tmp_path / "recipe_parts" / kind).mkdir()
        (tmp_path / "recipe_parts" / kind / "__init__.py").write_text("", encoding="utf-8")
        (tmp_path / "recipe_parts" / kind / f"{module}.py").write_text(source, encoding="utf-8")
        (part,) = registry.discover(f"recipe_parts.{kind}")
        registered.append((registry, part.name))
        return part.name

    try:
        yield add
    finally:
        for registry, name in registered:
            registry.unregister(name)
        for name in [m for m in sys.modules if m == "recipe_parts" or m.startswith("recipe_parts.")]:
            del sys.modules[name]


def run_tests(source: str) -> int:
    """Run the test functions of a recipe's test file; returns how many ran."""
    namespace: dict = {}
    exec(compile(source, "recipe test", "exec"), namespace)  # noqa: S102 - the guide's own test, as saved
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    for test in tests:
        test()
    return len(tests)


def test_the_view_recipe_works_as_written(added) -> None:
    part, test = recipe("Add a view")
    name = added("views", VIEWS, "entropy", part)
    assert name == "Entropy" and VIEWS.menu("Configurable").index("Entropy") == VIEWS.menu("Configurable").index(
        "Analysis") - 1
    assert run_tests(test) == 1
    check_view("Entropy")


def test_the_section_recipe_works_as_written(added) -> None:
    part, test = recipe("Add an analysis section")
    assert added("sections", SECTIONS, "sinks", part) == "Sinks"
    assert run_tests(test) == 1
    check_section("Sinks")


def test_the_recipes_leave_nothing_registered() -> None:
    assert "Entropy" not in VIEWS and "Sinks" not in SECTIONS and "recipe_parts" not in sys.modules
