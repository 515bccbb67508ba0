"""The library core knows nothing of the app: no module of mha_viz outside ui/ and serve/ (and the URL state,
params.py, and the lessons, which are walks through the app written in its URL state) imports the app, Streamlit or the URL state, or reads a deployment's MHA_VIZ_ settings; serve/ stays
Streamlit-free; `import mha_viz` loads no Streamlit. Imports are read with ast, including those inside functions
and TYPE_CHECKING blocks."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mha_viz"
APP = ("mha_viz.ui", "mha_viz.serve", "mha_viz.params", "mha_viz.lessons")  # the app side (params: its URL state;
# lessons: steps through the app's views, each written as the URL state it opens)
STREAMLIT = ("streamlit",)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module path imports, absolute (relative imports resolved; `from a import b` gives a and a.b)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def modules(where: str) -> list[Path]:
    return sorted((PACKAGE / where).rglob("*.py")) if where else sorted(PACKAGE.rglob("*.py"))


def is_app(path: Path) -> bool:
    return any(module_name(path) == m or module_name(path).startswith(m + ".") for m in APP)


CORE = [path for path in modules("") if not is_app(path)]


def offending(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported(path) if any(m == f or m.startswith(f + ".") for f in forbidden))


def test_the_core_is_found() -> None:
    names = {module_name(p) for p in CORE}
    assert {"mha_viz", "mha_viz.sources", "mha_viz.export", "mha_viz.limits", "mha_viz.figures.lines",
            "mha_viz.pretrained.loading", "mha_viz.__main__"} <= names
    assert not names & {"mha_viz.params", "mha_viz.serve.hosting", "mha_viz.ui.cache"}


def test_imports_are_resolved() -> None:
    assert {"mha_viz.params", "mha_viz.params.ViewState", "mha_viz.pretrained.loading"} <= imported(
        PACKAGE / "serve" / "hosting.py")
    assert {"streamlit", "mha_viz.serve.hosting"} <= imported(PACKAGE / "ui" / "cache.py")


@pytest.mark.parametrize("path", CORE, ids=module_name)
def test_the_library_core_imports_no_app(path: Path) -> None:
    assert offending(path, APP + STREAMLIT) == [], f"{module_name(path)} is library core: it must not import the app"


@pytest.mark.parametrize("path", CORE, ids=module_name)
def test_the_library_core_reads_no_deployment_setting(path: Path) -> None:
    strings = [node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and "MHA_VIZ_" in node.value]
    assert strings == [], f"{module_name(path)} names a deployment setting (mha_viz.serve.hosting reads them)"


@pytest.mark.parametrize("path", modules("serve"), ids=module_name)
def test_serve_imports_no_streamlit_and_no_ui(path: Path) -> None:
    assert offending(path, ("mha_viz.ui", *STREAMLIT)) == []


def test_only_ui_imports_streamlit() -> None:
    importers = {module_name(p) for p in modules("") if offending(p, STREAMLIT)}
    assert importers and all(name.startswith("mha_viz.ui.") for name in importers), importers


@pytest.mark.slow
def test_import_mha_viz_and_serve_loads_no_streamlit() -> None:
    code = ("import sys, mha_viz, mha_viz.limits, mha_viz.sources, mha_viz.serve.hosting, mha_viz.serve.slot; "
            "print(sorted(m for m in sys.modules if m == 'streamlit' or m.startswith(('streamlit.', 'mha_viz.ui')) "
            "and m != 'mha_viz.ui' and not m.startswith('mha_viz.ui.parts')))")  # the parts' pure declarations
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
