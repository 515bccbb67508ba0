"""What only a browser shows, in Debian's headless Chromium: formulas that render, a phone layout, clicks on
overview thumbnails and on tokens of the lines view, a copy button without hovering, labels not cut off.

Screenshots of the new views are saved into assets/ (the README shows them) with --update-assets,
else into a temporary folder.
"""

from __future__ import annotations

import io
import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, renderers, wait_for_heatmaps, wait_for_query

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

PHONE_UA = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
            "Version/17.0 Mobile/15E148 Safari/604.1")
# Reading a chart through Plotly's public state only: gd.data and gd.layout (the figure as sent, with the ranges
# Plotly's autorange writes back) and the subplot's drag box (its data-subplot attribute) for where it is drawn.
# VALUES: a trace's array as the figure sent it, a list or Plotly's base64 spec {dtype, bdata, shape}.
VALUES = """const values = (v) => {
    if (!v || Array.isArray(v) || ArrayBuffer.isView(v) || typeof v.bdata !== 'string') return v;
    const types = {f4: Float32Array, f8: Float64Array, i1: Int8Array, u1: Uint8Array, i2: Int16Array,
                   u2: Uint16Array, i4: Int32Array, u4: Uint32Array};
    const flat = new types[v.dtype](Uint8Array.from(atob(v.bdata), (c) => c.charCodeAt(0)).buffer);
    const shape = String(v.shape === undefined ? flat.length : v.shape).split(',').map(Number);
    if (shape.length === 1) return Array.from(flat);
    return Array.from({length: shape[0]}, (_, r) => Array.from(flat.subarray(r * shape[1], (r + 1) * shape[1])));
};"""
# A data point of a Plotly chart, in page pixels: [chart index, trace index, point index] -> [x, y].
POINT_JS = """([chart, curve, point]) => {
    """ + VALUES + """
    const gd = document.querySelectorAll('.js-plotly-plot')[chart];
    const trace = gd.data[curve], xname = trace.xaxis || 'x', yname = trace.yaxis || 'y';
    const [x0, x1] = gd.layout[xname.replace('x', 'xaxis')].range, [y0, y1] = gd.layout[yname.replace('y', 'yaxis')].range;
    const box = gd.querySelector(`.nsewdrag[data-subplot="${xname}${yname}"]`).getBoundingClientRect();
    const x = values(trace.x)[point], y = values(trace.y)[point];
    return [box.left + (x - x0) / (x1 - x0) * box.width, box.top + (y1 - y) / (y1 - y0) * box.height];
}"""
LINES_JS = """(chart) => {
    """ + VALUES + """
    const gd = document.querySelectorAll('.js-plotly-plot')[chart];
    if (!gd || !gd.data) return -1;  // between two paints
    const xs = gd.data.filter(t => t.mode === 'lines').map(t => values(t.x) || []);
    return xs.filter(x => x.length > 1).reduce((n, x) => n + x.length / 3, 0);
}"""
# The index of the first trace of chart 0 for which `test` (a JS expression of t, values) holds.
FIND_JS = """(test) => {
    """ + VALUES + """
    return document.querySelector('.js-plotly-plot').data.findIndex((t) => eval(test));
}"""


def new_page(browser, **kwargs):
    page = browser.new_page(**({"viewport": {"width": 1400, "height": 1000}} | kwargs))
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    return page


def settle(page, timeout: float = 120) -> None:
    """Wait until the app has finished its run for the page's measured width (the first run lays the page out for
    a guessed width; the width probe's report reruns it): a chart, the renderer's heads, an alert or a formula is shown
    and no spinner runs."""
    page.wait_for_selector('[data-page-width]', state="attached", timeout=timeout * 1000)
    page.wait_for_selector('[data-testid="stPlotlyChart"], [data-mha-viz="renderer"] canvas, [data-testid="stAlert"], .katex',
                           timeout=timeout * 1000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout * 1000)


VIEWS = {
    "": ("Heads", "Lines", "One head", "Concat → W_O", "Analysis", "Shapes & cost", "Formulas"),
    "causal=true&cross=true&context=le+chat&": ("Formulas", "Shapes & cost", "One head"),
    "weights=trained&": ("Heads", "Lines", "One head", "Concat → W_O", "Analysis", "Shapes & cost", "Formulas"),
    "mode=Pretrained&": ("Heads", "Lines", "Overview", "One head", "Concat → W_O", "Analysis"),
    "mode=Train&h=2&d_model=32&steps=40&": ("Training", "Lines", "One head", "Concat → W_O", "Analysis"),
}


def test_no_view_shows_a_formula_error(server: str, browser) -> None:
    page = new_page(browser)
    try:
        for prefix, views in VIEWS.items():
            for view in views:
                page.goto(f"{server}/?{prefix}view={urllib.parse.quote(view)}")
                settle(page)
                assert page.locator(".katex-error").count() == 0, (prefix, view)
                assert page.locator('[data-testid="stException"]').count() == 0, (prefix, view)
        page.goto(f"{server}/?view=Formulas")
        settle(page)
        assert page.locator(".katex").count() >= 6  # the formulas are there, rendered
    finally:
        assert page.errors == []
        page.close()


def test_a_phone_gets_wrapped_heads_thinned_labels_and_scrolling_formulas(server: str, browser, assets: Path) -> None:
    page = new_page(browser, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                    device_scale_factor=2, user_agent=PHONE_UA)
    try:
        page.goto(f"{server}/?h=4")
        wait_for_heatmaps(page, 4)
        widths = page.locator('[data-mha-viz="renderer"] canvas.mv-heatmap').evaluate_all(
            "cs => cs.map(c => c.getBoundingClientRect().width)")
        assert min(widths) >= 100  # squares one a row, not 45 px strips
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390  # nothing runs off the edge
        assert all(r["right"] <= 390 for r in renderers(page))  # every head and its labels inside the phone's width
        page.screenshot(path=str(assets / "phone.png"))
        page.goto(f"{server}/?view=Formulas")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.katex-display').length >= 6")
        page.wait_for_function("() => [...document.querySelectorAll('.katex-display')].some(e => e.scrollWidth > e.clientWidth)",
                               timeout=30_000)  # a formula wider than the phone ...
        scroll = page.evaluate("""() => [...document.querySelectorAll('.katex-display')].map(
            e => [e.scrollWidth > e.clientWidth, getComputedStyle(e).overflowX])""")
        assert any(wide for wide, _ in scroll) and all(overflow == "auto" for _, overflow in scroll)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    finally:
        assert page.errors == []
        page.close()


def test_clicking_an_overview_thumbnail_opens_that_head(server: str, browser, assets: Path) -> None:
    page = new_page(browser)
    try:
        page.goto(f"{server}/?mode=Pretrained&view=Overview")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 1")
        curve = page.evaluate(FIND_JS, "t.type === 'scatter' && values(t.customdata)[0][0] === 3 "
                                       "&& values(t.customdata)[0][1] === 5")
        x, y = page.evaluate(POINT_JS, [0, curve, 4])  # the centre of layer 3, head 5
        page.mouse.move(x, y)
        page.get_by_text("layer 3, head 5").wait_for(timeout=30_000)  # the hover says what a click opens
        page.mouse.click(x, y)
        wait_for_query(page, r"layer=3.*compare=5|compare=5.*layer=3")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 2", timeout=60_000)
        page.locator(".gtitle").filter(has_text="layer 3").first.wait_for(timeout=60_000)  # the head, opened below
        page.screenshot(path=str(assets / "overview-click.png"))
    finally:
        assert page.errors == []
        page.close()


def test_lines_view_hover_shows_the_top_keys_and_a_click_keeps_one_tokens_lines(server: str, browser, assets: Path) -> None:
    page = new_page(browser)
    try:
        page.goto(f"{server}/?weights=trained&view=Lines&sequence=a+b+c+d+a+b+c+d")
        settle(page)
        # the lines chart first, then the trained page's accuracy-vs-KV-cache chart
        page.wait_for_function("() => { const p = document.querySelectorAll('.js-plotly-plot'); return p.length === 2 "
                               "&& p[0].data && p[0].data.some(t => t.name === 'query tokens'); }")
        page.screenshot(path=str(assets / "lines.png"))
        every = page.evaluate(LINES_JS, 0)
        assert every > 4  # every head's lines
        curve = page.evaluate(FIND_JS, "t.name === 'query tokens'")
        x, y = page.evaluate(POINT_JS, [0, curve, 5])
        page.mouse.move(x, y)
        page.get_by_text("only this query's lines").wait_for(timeout=30_000)
        page.mouse.click(x, y)
        wait_for_query(page, r"pick=q5")
        page.wait_for_function(f"() => {{ const f = {LINES_JS}; const n = f(0); return n >= 0 && n < {every}; }}",
                               timeout=60_000)
        assert 1 <= page.evaluate(LINES_JS, 0) <= 4  # query 5's lines only: at most one a head
        page.get_by_role("button", name="Show all lines").click()
        page.wait_for_function(f"() => {{ const f = {LINES_JS}; return f(0) === {every}; }}", timeout=60_000)
    finally:
        assert page.errors == []
        page.close()


def test_the_copy_link_button_shows_without_hovering(server: str, browser) -> None:
    page = new_page(browser)
    try:
        page.goto(f"{server}/?h=2")
        settle(page)
        page.get_by_text("Export and share").click()
        button = page.get_by_role("button", name="Copy to clipboard")
        button.wait_for(state="attached", timeout=60_000)
        page.mouse.move(0, 0)  # hover nothing
        assert button.is_visible()
        assert page.evaluate("""(b) => { for (let e = b; e; e = e.parentElement) {
            if (parseFloat(getComputedStyle(e).opacity) < 0.99) return false; } return true; }""",
                             button.element_handle())
    finally:
        assert page.errors == []
        page.close()


def test_the_trained_switch_screenshot_and_a_png_download_keeps_its_labels(server: str, browser, assets: Path) -> None:
    from PIL import Image

    page = new_page(browser, accept_downloads=True)
    try:
        page.goto(f"{server}/?weights=trained&h=1")
        wait_for_heatmaps(page, 1)
        settle(page)
        page.screenshot(path=str(assets / "trained-h1.png"))
        page.goto(f"{server}/?weights=trained&h=4")
        wait_for_heatmaps(page, 4)
        settle(page)
        page.screenshot(path=str(assets / "trained.png"))
        chart = page.locator('[data-testid="stPlotlyChart"]').first  # the accuracy of every h (the heads: renderer)
        chart.hover()
        with page.expect_download() as info:
            chart.get_by_role("button", name="Download plot as a PNG").click()
        download = info.value
        assert download.suggested_filename == "trained-prev-first-h4-d64-accuracy-by-h.png"
        image = Image.open(io.BytesIO(Path(download.path()).read_bytes())).convert("L")
        height = page.evaluate("() => document.querySelector('.js-plotly-plot').layout.height")
        assert image.size == (2 * 1100, 2 * height)  # the figure's own size: nothing cropped
        bottom = image.crop((0, image.size[1] - 2 * 30, image.size[0], image.size[1]))
        assert bottom.getextrema()[0] < 128  # the axis labels reach into the bottom margin: they are in the file
    finally:
        assert page.errors == []
        page.close()


def test_report_labels_are_not_cut_off(browser, tmp_path: Path) -> None:
    import mha_viz
    from mha_viz.figures import (
        contributions_figure,
        head_steps_figure,
        heads_figure,
        output_path_figure,
        projections_figure,
        score_terms_figure,
    )
    from mha_viz.report import html_report
    from mha_viz.sources import configurable_trace

    t = configurable_trace("The animal didn't cross the street because it was too tired", mha_viz.MHAConfig(64, 4))
    figures = [heads_figure(t), output_path_figure(t), contributions_figure(t), head_steps_figure(t, 1),
               score_terms_figure(t, 1, 9, 1), projections_figure(t, 1)]
    path = tmp_path / "report.html"
    path.write_text(html_report(t, title="labels", figures=figures), encoding="utf-8")
    page = new_page(browser)
    try:
        page.goto(path.as_uri())
        page.wait_for_function("n => document.querySelectorAll('.plotly-graph-div .main-svg').length >= n", arg=6)
        clipped = page.evaluate("""() => [...document.querySelectorAll('.plotly-graph-div')].flatMap((gd, i) => {
            const box = gd.querySelector('.main-svg').getBoundingClientRect();
            return [...gd.querySelectorAll('.xtick text, .ytick text, .g-xtitle text, .g-ytitle text')]
                .map(e => [i, e.textContent, e.getBoundingClientRect()])
                .filter(([, , r]) => r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1
                                                      || r.top < box.top - 1 || r.bottom > box.bottom + 1))
                .map(([n, text]) => n + ': ' + text);
        })""")
        assert clipped == []
    finally:
        assert page.errors == []
        page.close()


def test_watch_the_bundled_model_write_and_open_the_head_that_wrote_a_token(server: str, browser, assets: Path) -> None:
    """The issue's scenario: offline, the bundled causal model, a repeated sequence, step through generation."""
    page = new_page(browser, viewport={"width": 1400, "height": 1500})
    try:
        page.goto(server + "/?mode=Pretrained")
        settle(page)
        page.get_by_role("button", name="induction-2l (causal)").click()
        wait_for_query(page, r"view=Generate")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000)
        page.get_by_role("button", name="▶").click()  # the next token
        wait_for_query(page, r"gen_step=2")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000)
        dla = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].findIndex("
                            "gd => gd.data.some(t => t.type === 'scatter' && t.customdata))")
        x, y = page.evaluate(POINT_JS, [dla, 1, 1 * 4 + 2])  # layer 1, head 2 of the attribution heatmap
        page.mouse.move(x, y)
        page.get_by_text("click to open this head").wait_for(timeout=30_000)  # the chart takes clicks now
        page.mouse.click(x, y)
        wait_for_query(page, r"layer=1.*head=2|head=2.*layer=1")
        page.wait_for_function("() => document.body.innerText.includes('Layer 1, head 2 (click a head')",
                               timeout=60_000)  # the head opened below, not just the hover label
        page.mouse.move(0, 0)
        settle(page)
        page.screenshot(path=str(assets / "generate.png"))
    finally:
        assert page.errors == []
        page.close()


def test_head_detectors_screenshot_and_a_click_opens_the_head(server: str, browser, assets: Path) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1500})
    try:
        page.goto(server + "/?mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Head+detectors")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 2", timeout=60_000)
        x, y = page.evaluate(POINT_JS, [0, 1, 1 * 4 + 1])  # layer 1, head 1
        page.mouse.move(x, y)
        page.get_by_text("click to open this head").wait_for(timeout=30_000)  # the chart takes clicks now
        page.mouse.click(x, y)
        wait_for_query(page, r"layer=1.*head=1|head=1.*layer=1")
        page.locator(".gtitle").filter(has_text="layer 1, head 1").wait_for(timeout=60_000)
        page.screenshot(path=str(assets / "detectors.png"))
    finally:
        assert page.errors == []
        page.close()


def test_circuits_fit_a_phone_and_a_desktop_and_the_copying_ov_circuit_screenshot(server: str, browser,
                                                                                   assets: Path) -> None:
    url = server + "/?mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Circuits&layer=1&head=1"
    for width in (390, 1400):
        page = new_page(browser, viewport={"width": width, "height": 1200})
        try:
            page.goto(url)
            settle(page)
            table = page.locator(".st-key-figure_circuits_table")
            table.locator(".gtitle").filter(has_text="OV circuit").wait_for(timeout=60_000)
            assert page.locator(".js-plotly-plot").count() == 3  # copying scores, singular values, the OV table
            assert page.evaluate("() => document.documentElement.scrollWidth") <= width  # nothing runs off the edge
            if width == 1400:
                table.screenshot(path=str(assets / "circuits-ov.png"))
        finally:
            assert page.errors == []
            page.close()
