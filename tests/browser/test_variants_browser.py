"""Every attention variant of the configurable mode in Debian's headless Chromium, at a phone's width (390 px), a
projector's (1024), a laptop's (1400) and a large screen's (2560): the Heads view and the variant's own view paint
their charts with no exception and no page error, nothing runs past the page's edge, every chart fits its column and
no chart text runs past its chart. One page a width, one visit a view. The keyboard picks a variant from the
sidebar. With --update-assets the README's screenshot of each variant is saved into assets/.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, renderers, wait_for_query
from tests.browser.test_accessibility import tab_until
from tests.browser.test_browser_views import VALUES, new_page, settle
from tests.browser.test_layout_browser import PROBLEMS_JS
from tests.browser.test_layout_browser import settle as settle_layout

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

# Each variant's URL, its own view (GQA's is Heads, with the group frames) and the screenshot the README shows.
VARIANTS = {
    "gqa": ("variant=gqa&kv_heads=2&h=8", "Heads", "variant-gqa.png"),
    "mla": ("variant=mla&kv_latent=8&rope_dim=4", "Latent (MLA)", "variant-mla.png"),
    "window-logit": ("variant=window&window=3&sinks=logit&causal=true", "Window & sinks", "variant-window.png"),
    "window-tokens": ("variant=window&window=3&sinks=tokens&causal=true", "Window & sinks", None),
    "diff": ("variant=diff", "Two maps", "variant-diff.png"),
    "moh": ("variant=moh&moh_k=2&moh_shared=1&h=8", "Router (MoH)", "variant-moh.png"),
}
# Per chart, from Plotly's public gd.data and gd.layout: its trace count, its heatmaps, the heatmaps Plotly painted
# (one <image> each), its drawn width and the width of the column it sits in.
CHARTS_JS = """() => {
    """ + VALUES + """
    return [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].map(c => {
        const gd = c.querySelector('.js-plotly-plot'), svg = c.querySelector('.main-svg');
        const data = (gd && gd.data) || [];
        return {traces: data.length, heatmaps: data.filter(t => t.type === 'heatmap').length,
                painted: [...c.querySelectorAll('.heatmaplayer image')]
                    .filter(e => (e.getAttribute('xlink:href') || e.getAttribute('href') || '').startsWith('data:image'))
                    .length,
                width: svg ? svg.getBoundingClientRect().width : 0, column: c.getBoundingClientRect().width,
                right: svg ? svg.getBoundingClientRect().right : 1e9};
    });
}"""

# The region of the README's screenshot: the charts' column, from the view menu to the bottom of the view's n-th chart
# (the renderer's heads grid counts as one; at most 1300 px).
SHOT_JS = """(n) => {
    const menu = document.querySelector('[data-testid="stMain"] [data-testid="stButtonGroup"]').getBoundingClientRect();
    const charts = [...document.querySelectorAll('.st-key-figure_heads, [data-testid="stPlotlyChart"]')];
    const last = charts[Math.min(n, charts.length) - 1].getBoundingClientRect();
    const top = menu.top - 8, bottom = Math.min(last.bottom + 8, top + 1300);
    const column = charts[0].getBoundingClientRect();
    return {x: column.left - 8, y: top, width: column.width + 16, height: bottom - top};
}"""


def visit(page, server: str, query: str, view: str) -> list[dict]:
    """Open the view with this variant query; wait until it is drawn for the page's width; return its charts."""
    page.goto(f"{server}/?{query}&view={urllib.parse.quote(view)}")
    settle(page)
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
                           ".every(c => c.querySelector('.main-svg'))", timeout=60_000)
    settle_layout(page)
    return page.evaluate(CHARTS_JS) + [  # and the renderer's heads grid, as one chart of one heatmap a head
        {"traces": r["heads"], "heatmaps": r["heads"], "painted": r["heads"], "width": r["right"] - r["left"],
         "column": r["width"], "right": r["right"]} for r in renderers(page) if r["view"] == "heads"]


def check_view(page, name: str, charts: list[dict]) -> None:
    width = page.viewport_size["width"]
    assert page.locator('[data-testid="stException"]').count() == 0, name
    assert page.errors == [], name
    assert charts and all(c["traces"] > 0 for c in charts), (name, charts)  # every chart has data
    assert all(c["painted"] == c["heatmaps"] for c in charts), (name, charts)  # ... and Plotly painted it
    assert all(c["width"] <= c["column"] + 1 and c["right"] <= width + 1 for c in charts), (name, charts)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width, name
    assert page.evaluate(PROBLEMS_JS) == [], name


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_every_variant_paints_its_views_and_fits_the_width(server: str, browser, assets: Path, width: int) -> None:
    page = new_page(browser, viewport={"width": width, "height": 768 if width == 1024 else 1000},
                    is_mobile=width == 390)
    try:
        for name, (query, view, shot) in VARIANTS.items():
            for shown in dict.fromkeys(("Heads", view)):
                charts = visit(page, server, query, shown)
                check_view(page, f"{name} {shown} at {width}", charts)
                if name == "gqa" and shown == "Heads":
                    assert charts[-1]["painted"] == 8  # one heatmap per query head (the renderer's grid)
            if shot and width == 1400:  # the README's picture: the view's menu and first charts
                page.set_viewport_size({"width": width, "height": 2000})  # the app scrolls its own main area
                settle_layout(page)
                page.screenshot(path=str(assets / shot), clip=page.evaluate(SHOT_JS, 1 if name == "gqa" else 2))
                page.set_viewport_size({"width": width, "height": 1000})
    finally:
        assert page.errors == []
        page.close()


def test_the_keyboard_picks_a_variant_and_its_parameters(server: str, browser) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/?h=8")
        settle(page)
        tab_until(page, "e => e.getAttribute('role') === 'radio' && e.innerText.trim() === 'MHA' "
                        "&& !!e.closest('[data-testid=\"stSidebar\"]')")  # the Variant control: one tab stop
        page.keyboard.press("ArrowRight")  # to GQA ...
        assert page.evaluate("() => document.activeElement.innerText.trim()") == "GQA"
        page.keyboard.press("Enter")  # ... chosen
        wait_for_query(page, r"variant=gqa")
        settle(page)
        radio = "e => e.getAttribute('type') === 'radio' && !!e.closest('[data-testid=\"stRadio\"]')" \
                "?.innerText.startsWith('Key/value heads')"
        tab_until(page, radio)
        page.keyboard.press("ArrowRight")  # the next kv_heads
        wait_for_query(page, r"kv_heads=2")
    finally:
        assert page.errors == []
        page.close()
