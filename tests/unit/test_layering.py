"""The library core knows nothing of the app: no module of mha_viz outside ui/ and serve/ (and the URL state,
params.py, and the lessons, which are walks through the app written in its URL state) imports the app, Streamlit or the URL state, or reads a deployment's MHA_VIZ_ settings; serve/ stays
Streamlit-free; `import mha_viz` loads no Streamlit. Imports are read with ast, including those inside functions
and TYPE_CHECKING blocks.

The package is built in floors, each importing only its own floor and those below (FLOORS, bottom first):
    math -> models -> analysis -> figures -> app
math: the data model, the layer, its variants and their arithmetic, and the declarations a variant's or a part's
URL fields are made of (parts.py: StateField, Part and the registries, importing nothing of mha_viz, the parts'
render functions named as strings; fields.py: the field parsers, importing only parts.py); models: the models that
make traces (pretrained/ and training/, which trains mha-viz's own); analysis: measures of traces and models
(and sources.py, which offers them per source); figures: Plotly figures and what draws them to files and notebooks;
app: the Streamlit app, its URL state and server, the lessons, the CLI and the package's front door (__init__).
Every module sits on exactly one floor, so a new module is placed by adding it to FLOORS."""

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
    return imported_from(module_name(path), path, path.read_text(encoding="utf-8"))


def imported_from(name: str, path: Path, source: str) -> set[str]:
    """imported() of the module `name` at path whose text is source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
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


FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (  # bottom first; a name covers its submodules
    ("math", ("mha_viz.names", "mha_viz.limits", "mha_viz.config", "mha_viz.trace", "mha_viz.checks", "mha_viz.mixers",
              "mha_viz.attention", "mha_viz.long", "mha_viz.weights", "mha_viz.variants", "mha_viz.variants_cost",
              "mha_viz.cost", "mha_viz.formulas", "mha_viz.divergence", "mha_viz.text", "mha_viz.token_labels",
              "mha_viz.sampling", "mha_viz.export", "mha_viz.cache", "mha_viz.parts", "mha_viz.fields")),
    ("models", ("mha_viz.pretrained", "mha_viz.training")),
    ("analysis", ("mha_viz.analysis", "mha_viz.sources")),
    ("figures", ("mha_viz.figures", "mha_viz.layer_payload", "mha_viz.paper", "mha_viz.renderer", "mha_viz.report", "mha_viz.widget")),
    ("app", ("mha_viz.ui", "mha_viz.serve", "mha_viz.params", "mha_viz.lessons",
             "mha_viz.__main__", "mha_viz")),
)


def floor(name: str) -> int | None:
    """The floor (index in FLOORS) of a module or of a name inside one; None if no floor holds it. "mha_viz" holds
    only the package's own __init__, not every module below it."""
    held = [(len(prefix), i) for i, (_, prefixes) in enumerate(FLOORS) for prefix in prefixes
            if name == prefix or (prefix != "mha_viz" and name.startswith(prefix + "."))]
    return max(held)[1] if held else None


def arrows_up(name: str, imports: set[str]) -> list[str]:
    """The imports of module `name` that point to a higher floor than its own. The bare package "mha_viz" is no
    arrow: Python runs its __init__ before any of its modules, whoever imports them."""
    own = floor(name)
    assert own is not None, f"{name} sits on no floor: add it to FLOORS in {Path(__file__).name}"
    return sorted(m for m in imports if m.startswith("mha_viz.") and (floor(m) or 0) > own)


def test_every_module_sits_on_one_floor() -> None:
    homeless = [module_name(p) for p in modules("") if floor(module_name(p)) is None]
    assert homeless == [], f"add these modules to a floor in FLOORS: {homeless}"
    assert [name for name, _ in FLOORS] == ["math", "models", "analysis", "figures", "app"]


def test_an_arrow_up_is_found_at_module_level_in_functions_and_for_type_checkers() -> None:
    training = PACKAGE / "training" / "fake.py"
    source = ("from typing import TYPE_CHECKING\nfrom ..trace import AttentionTrace\nfrom . import layer\n"
              "if TYPE_CHECKING:\n    from ..analysis.readout import Readout\n"
              "def f():\n    from ..figures import heads_figure\n    import mha_viz.ui.state\n")
    imports = imported_from("mha_viz.training.fake", training, source)
    assert arrows_up("mha_viz.training.fake", imports) == [
        "mha_viz.analysis.readout", "mha_viz.analysis.readout.Readout", "mha_viz.figures",
        "mha_viz.figures.heads_figure", "mha_viz.ui.state"]
    assert arrows_up("mha_viz.figures.fake", imports) == ["mha_viz.ui.state"]
    assert arrows_up("mha_viz.ui.fake", imports) == []


@pytest.mark.parametrize("path", modules(""), ids=module_name)
def test_no_import_arrow_points_up_a_floor(path: Path) -> None:
    name = module_name(path)
    up = arrows_up(name, imported(path))
    assert up == [], f"{name} ({FLOORS[floor(name)][0]}) imports from a higher floor: {up}"


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


def test_import_analysis_loads_no_pretrained_model_code() -> None:
    """The configurable page imports mha_viz.analysis: the Hugging Face side (mha_viz.pretrained, what a model's
    family needs) waits until a model is loaded, which keeps it out of the default page's first paint."""
    code = "import sys, mha_viz.analysis; print(sorted(m for m in sys.modules if m.startswith('mha_viz.pretrained')))"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
