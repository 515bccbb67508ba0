"""The app reaches Plotly and Streamlit through their public APIs only: no read of Plotly's private fields (`_full*`,
`calcdata`, any `_`-prefixed field of a graph div) and no Streamlit class name or data-testid, which change between
releases. (`.st-key-<key>` is public: a container's or widget's key is documented as its CSS class.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTERNALS = re.compile(r"_fullLayout|_fullData|calcdata|data-testid|stMarkdown|stLayoutWrapper|stElementToolbar|\.st[A-Z]")
PRIVATE_FIELD = re.compile(r"\.\s*_[A-Za-z]\w*")  # in JavaScript: gd._fullLayout, axis._offset, ...
JS_MARKERS = ("<script", "export default function", "=>")


def sources() -> list[Path]:
    return sorted([*(ROOT / "mha_viz").rglob("*.py"), *(ROOT / "mha_viz").rglob("*.js"), ROOT / "page.py",
                   ROOT / "app.py"])


def javascript(path: Path) -> list[str]:
    """The JavaScript of a file: all of a .js file; the string literals of a .py file that look like JavaScript."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".js":
        return [text]
    strings = [node.value for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Constant)
               and isinstance(node.value, str)]
    return [s for s in strings if any(marker in s for marker in JS_MARKERS)]


def test_no_plotly_private_field_or_streamlit_class_name_is_read() -> None:
    found = [f"{path.relative_to(ROOT)}: {match.group()}" for path in sources()
             for match in INTERNALS.finditer(path.read_text(encoding="utf-8"))]
    assert found == []


def test_no_javascript_reads_an_underscore_field() -> None:
    found = [f"{path.relative_to(ROOT)}: {match.group()}" for path in sources() for js in javascript(path)
             for match in PRIVATE_FIELD.finditer(js)]
    assert found == []


def test_the_checks_see_what_they_look_for() -> None:
    """The patterns match the reads they exist to catch (a check that cannot fail catches nothing)."""
    assert INTERNALS.search('const L = gd._fullLayout; gd.calcdata[0]; [data-testid="stCode"]')
    assert INTERNALS.search(".stMarkdown .katex-display")
    assert not INTERNALS.search(".st-key-share_link button, .katex-display, .modebar-group")
    assert PRIVATE_FIELD.search("box.left + xa._offset") and not PRIVATE_FIELD.search("gd.layout.shapes")
    assert any(javascript(ROOT / "mha_viz" / "renderer.js"))
    assert any("<script" in js for path in sources() if path.suffix == ".py" for js in javascript(path))


PLOTLY_PRIVATE = re.compile(r"_fullLayout|_fullData|calcdata|\._offset|\._length|\.l2p\(")


def test_tests_and_benchmarks_read_charts_through_plotly_public_state() -> None:
    """The browser tests, their harness and the benchmarks find points and values through gd.data, gd.layout and
    the drawn SVG, not Plotly's private state (they would break with Plotly's next release as the app would)."""
    files = [p for folder in ("tests", "harness", "bench") for p in (ROOT / folder).rglob("*.py")
             if p != Path(__file__).resolve()]
    assert PLOTLY_PRIVATE.search("box.left + xa._offset; gd._fullData") and not PLOTLY_PRIVATE.search("gd.layout.xaxis")
    found = [f"{path.relative_to(ROOT)}: {match.group()}" for path in files
             for match in PLOTLY_PRIVATE.finditer(path.read_text(encoding="utf-8"))]
    assert found == []
