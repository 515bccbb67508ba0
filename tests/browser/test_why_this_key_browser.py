"""Analysis -> Why this key (and Layer reach) in Debian's headless Chromium, on the bundled induction model at 390,
1024, 1400 and 2560 px: the source table paints with the library's numbers, fits the page, its sentence names what
carries the score, its controls work from the keyboard, and axe finds no serious or critical violation; the README's
screenshot (assets/why-this-key.png, written only with --update-assets)."""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, wait_for_query
from mha_viz.analysis import score_attribution
from mha_viz.params import CAUSAL_EXAMPLE
from mha_viz.pretrained import INDUCTION_MODEL, load_model
from tests.axe import axe_path, axe_violations, summary
from tests.browser.test_accessibility import pick_with_keyboard
from tests.browser.test_browser_views import VALUES, new_page, settle

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)


@contextlib.contextmanager
def painted(browser, server: str, section: str, hover: str, width: int = 1400) -> Iterator[tuple[object, dict]]:
    """A page at this width on the induction model's layer 1 and its example text, in this Analysis section, once
    the heatmap whose hover text starts with `hover` has painted: (the page, that heatmap's z and right edge, as
    Plotly holds them in the page: public state, gd.data). No page error, and the page closed, afterwards."""
    heatmap_js = """() => {
    """ + VALUES + """
    const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g.data && g.data[0].type === 'heatmap'
        && String(g.data[0].hovertemplate).startsWith(""" + repr(hover) + """));
    return gd ? {z: values(gd.data[0].z), right: gd.getBoundingClientRect().right} : null;
}"""
    page = new_page(browser, viewport={"width": width, "height": 1400}, is_mobile=width == 390)
    try:
        page.goto(f"{server}/?mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section="
                  f"{urllib.parse.quote(section)}&layer=1&text={urllib.parse.quote(CAUSAL_EXAMPLE)}")
        settle(page)
        page.wait_for_function(heatmap_js, timeout=120_000)
        yield page, page.evaluate(heatmap_js)
    finally:
        assert page.errors == []
        page.close()


def assert_fits_and_axe_clean(page, heatmap: dict, width: int) -> None:
    """The heatmap and the page within the width, and no serious or critical axe violation."""
    assert 0 < heatmap["right"] <= width and page.evaluate("() => document.documentElement.scrollWidth") <= width
    if axe_path() is not None:
        violations = axe_violations(page)
        assert violations == [], summary(violations)


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_the_source_table_paints_fits_and_passes_axe(server: str, browser, width: int, assets: Path) -> None:
    with painted(browser, server, "Why this key", "query side", width) as (page, table):
        model = load_model(INDUCTION_MODEL)
        sa = score_attribution(model, CAUSAL_EXAMPLE, layer=1, head=0, query=len(model.tokens(CAUSAL_EXAMPLE)) - 1)
        expected = sa.table(sa.winner)
        assert len(table["z"]) == len(sa.sources) and max(
            abs(a - b) for row, want in zip(table["z"], expected, strict=True) for a, b in zip(row, want, strict=True)
        ) < 1e-5
        a, b, _ = sa.largest(sa.winner, 1)[0]
        assert page.get_by_text(f"Its largest terms: (query: {a}) × (key: {b})", exact=False).count() == 1
        assert_fits_and_axe_clean(page, table, width)
        if width == 1400:
            page.screenshot(path=str(assets / "why-this-key.png"), full_page=True)


def test_the_key_is_picked_from_the_keyboard(server: str, browser) -> None:
    with painted(browser, server, "Why this key", "query side") as (page, _):
        pick_with_keyboard(page, "Key", "1: ")  # Tab to the select box, type the option, Enter
        wait_for_query(page, r"why_key=1\b")
        page.get_by_text("gives key 1 (the)", exact=False).wait_for(timeout=60_000)  # the sentence follows


CELL_JS = """([query, key]) => {
    """ + VALUES + """
    const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g.data && g.data.some(t => t.name === 'pick a cell'));
    if (!gd) return null;
    const trace = gd.data.find(t => t.name === 'pick a cell'), cells = values(trace.customdata);
    const i = cells.findIndex(c => c[0] === query && c[1] === key);
    const [x0, x1] = gd.layout.xaxis.range, [y0, y1] = gd.layout.yaxis.range;
    const box = gd.querySelector('.nsewdrag[data-subplot="xy"]').getBoundingClientRect();
    const x = values(trace.x)[i], y = values(trace.y)[i];
    return [box.left + (x - x0) / (x1 - x0) * box.width, box.top + (y1 - y) / (y1 - y0) * box.height];
}"""


def test_a_click_on_the_heads_pattern_picks_the_query_and_key(server: str, browser) -> None:
    """The head's pattern above the table: every cell a query sees is a click target; a click explains that cell."""
    with painted(browser, server, "Why this key", "query side") as (page, _):
        page.wait_for_function(f"() => ({CELL_JS})([5, 2]) !== null", timeout=60_000)
        x, y = page.evaluate(CELL_JS, [5, 2])
        page.mouse.move(x, y)
        page.get_by_text("query 5, key 2: weight", exact=False).wait_for(timeout=30_000)
        page.mouse.click(x, y)
        wait_for_query(page, r"why_query=5.*why_key=2|why_key=2.*why_query=5")
        page.get_by_text("Query 5 (", exact=False).first.wait_for(timeout=60_000)  # the sentence follows
        page.get_by_text("gives key 2 (", exact=False).first.wait_for(timeout=60_000)


@pytest.mark.parametrize("width", [390, 1400])
def test_layer_reach_paints_the_causal_reach_fits_and_passes_axe(server: str, browser, width: int) -> None:
    """Analysis -> Layer reach (the same page, another section): layer 1 probed as declared, causal, drawn whole."""
    with painted(browser, server, "Layer reach", "query %{y}, key", width) as (page, reach):
        T = len(reach["z"])
        assert reach["z"] == [[int(j <= i) for j in range(T)] for i in range(T)]
        assert page.get_by_text("as declared").count() >= 1
        assert_fits_and_axe_clean(page, reach, width)
