"""Every view and analysis section is one module of mha_viz/ui/parts/ that declares its PART: discovery registers
them all, every render target resolves (imported, callable), and a part module's top level stays pure (no Streamlit,
no app module, no torch), so that reading a link with every part's fields (mha_viz.params) needs none of them."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import mha_viz.params  # noqa: F401  (runs the discovery)
from mha_viz.parts import DOES, SECTIONS, VIEWS, Part, Registry
from tests.unit.test_layering import PACKAGE, module_name

PACKAGES = {"mha_viz.ui.parts.views": VIEWS, "mha_viz.ui.parts.sections": SECTIONS}
MODULES = [(info.name, registry) for package, registry in PACKAGES.items()
           for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + ".")]
PARTS = [(registry.kind, name) for registry in (VIEWS, SECTIONS) for name in registry]


def test_every_part_module_is_registered_and_every_registered_part_has_a_module() -> None:
    assert len(MODULES) >= 27  # 14 views and 13 sections at the time of writing
    declared = {}
    for name, registry in MODULES:
        part = importlib.import_module(name).PART
        assert registry.part(part.name) is part, name
        declared[part.name] = name
    assert set(declared) == set(VIEWS) | set(SECTIONS)  # no part registered outside its module


@pytest.mark.parametrize(("kind", "name"), PARTS)
def test_every_render_target_resolves(kind: str, name: str) -> None:
    part = (VIEWS if kind == "view" else SECTIONS).part(name)
    assert callable(part.renderer()), f"{name}: {part.render!r} is not a function"


def _top_level_imports(path: Path) -> set[str]:
    """The modules path imports at its top level (not inside a function), absolute."""
    name = module_name(path)
    package = name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            found.add(".".join([*base, *([node.module] if node.module else [])]))
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "ui" / "parts").rglob("*.py")), ids=module_name)
def test_a_part_module_imports_the_app_only_when_it_draws(path: Path) -> None:
    heavy = sorted(m for m in _top_level_imports(path) if m.split(".")[0] in ("streamlit", "torch", "plotly")
                   or (m.startswith("mha_viz.ui") and not m.startswith("mha_viz.ui.parts")))
    assert heavy == [], f"{module_name(path)} imports {heavy} at its top: import them inside render"


def test_capabilities_are_declared_not_named() -> None:
    assert VIEWS.part("Heads").can("draws_long") and VIEWS.part("Training").can("trains")
    assert [v for v in VIEWS if VIEWS.part(v).can("trains")] == ["Training"]
    assert not VIEWS.part("Lines").can("switches_layers")
    with pytest.raises(ValueError, match="unknown capability 'flies'"):
        Part("Kite", ("Configurable",), "x:y", does=("flies",))
    assert [v for v in VIEWS if VIEWS.part(v).can("reads_long")] == ["Generate"]
    assert set(DOES) == {"trains", "draws_long", "reads_long", "switches_layers"}


def test_discovery_refuses_a_module_without_its_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stray_parts").mkdir()
    (tmp_path / "stray_parts" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "stray_parts" / "helper.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="stray_parts.helper declares no PART"):
        Registry("view").discover("stray_parts")
    sys.modules.pop("stray_parts.helper", None)
    sys.modules.pop("stray_parts", None)


def test_reading_a_link_loads_no_streamlit() -> None:
    code = ("import sys; from mha_viz.params import parse_query; "
            "s, notes = parse_query({'view': 'Analysis', 'section': 'Knockout', 'off': '1,2', 'zoom': '8'}); "
            "assert notes == [] and s.off == (1, 2) and s.zoom == 8, notes; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly')))")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
