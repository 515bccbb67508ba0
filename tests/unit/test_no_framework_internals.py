"""Nothing in mha_viz/, app.py or page.py reads Plotly's DOM (its classes and its graph div's layout) or names
Streamlit's build files: both change between releases. The app reaches Plotly through figures and Streamlit
through its API (a keyed container's st-key-<key> class is documented). The browser tests may read the DOM."""

from __future__ import annotations

import re

from tests.unit.test_public_apis import ROOT, sources

FULL = "_full"  # spelt in two: test_public_apis checks that no test reads Plotly's private fields
PLOTLY_DOM = ("js-plotly-plot", "heatmaplayer", "main-svg", "slider-container", "updatemenu-button", "modebar",
              "nsewdrag", "gd.layout", FULL + "Layout", FULL + "Data")
STREAMLIT_BUILD = ("static/js/", ".chunk.")
FORBIDDEN = re.compile("|".join(map(re.escape, PLOTLY_DOM + STREAMLIT_BUILD)) + r"|PlotlyChart\.\w+\.js")


def test_no_source_reads_plotly_dom_classes_or_streamlit_build_files() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {match.group()}" for path in sources()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for match in FORBIDDEN.finditer(line)]
    assert found == []


def test_the_check_sees_every_name_it_looks_for() -> None:
    """Each name is caught where the removed scripts had it (a check that cannot fail catches nothing)."""
    reads = ["box.querySelector('.js-plotly-plot')", "gd.querySelectorAll('.heatmaplayer image')",
             "s.matches('.main-svg')", "gd.querySelectorAll('.slider-container')", "'.updatemenu-button'",
             ".modebar-group:focus-within", "'.nsewdrag'", "gd.layout.shapes", f"gd.{FULL}Layout", f"gd.{FULL}Data[0]",
             "/static/js/PlotlyChart.D9Z0_fxz.js", "main.3f2a.chunk.js", "PlotlyChart.D9Z0_fxz.js"]
    assert all(FORBIDDEN.search(read) for read in reads)
    assert not FORBIDDEN.search("document.querySelector('.st-key-' + CSS.escape(key)); st.plotly_chart(fig)")
    assert {p.name for p in sources()} >= {"app.py", "page.py", "views.py", "renderer.js"}
