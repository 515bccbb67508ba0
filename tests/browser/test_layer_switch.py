"""Layers switched in Chromium: a click repaints the heads (or opens an overview thumbnail's head) before the server
hears of it, with the numbers the server then draws itself (the bytes' decoding: tests.unit.test_layer_payload.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from harness.browser import CHROMIUM, wait_for_heatmaps, wait_for_query
from mha_viz.figures.heads import layer_stack
from tests.unit.test_layer_payload import minilm_traces, to_fixed_3  # noqa: F401 - a fixture

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason=f"{CHROMIUM} not installed")
# z of every heatmap from a chart's public data (gd.data; Plotly's typed-array spec decoded)
GD_Z_JS = """(gd) => gd.data.map(t => {
    const z = t.z;
    if (Array.isArray(z)) return z.map(r => Array.from(r, v => v === null ? NaN : v));
    const bytes = Uint8Array.from(atob(z.bdata), c => c.charCodeAt(0));
    const kinds = {f4: Float32Array, f8: Float64Array};
    const flat = Array.from(new kinds[z.dtype](bytes.buffer));
    const [rows, cols] = String(z.shape).split(',').map(Number);
    return Array.from({length: rows}, (_, r) => flat.slice(r * cols, (r + 1) * cols));
})"""
DATA_Z_JS = f"(key) => ({GD_Z_JS})(document.querySelector(`.st-key-${{key}} .js-plotly-plot`))"
Z_JS = DATA_Z_JS
# resolves with the chart's z as Plotly's own redraw after the fast paint leaves it (this chart's redraw, from the
# browser's numbers: the server's rerun mounts a new chart)
REPLOTTED_JS = f"""(key) => {{ const gd = document.querySelector(`.st-key-${{key}} .js-plotly-plot`);
    return new Promise(done => gd.once('plotly_afterplot', () => done(({GD_Z_JS})(gd)))); }}"""
SWITCH_JS = """(layer) => {
    const host = [...document.querySelector('.st-key-layer_switch').querySelectorAll('*')].find(e => e.shadowRoot);
    host.shadowRoot.querySelectorAll('button')[layer].click();
}"""


HREFS_JS = "(key) => [...document.querySelectorAll(`.st-key-${key} .heatmaplayer image`)].map(e => e.getAttribute('href'))"
SHADOW = "[...document.querySelector('.st-key-layer_switch').querySelectorAll('*')].find(e => e.shadowRoot).shadowRoot"
MARK_JS = f"() => {SHADOW}.querySelectorAll('button').forEach(b => b.dataset.drawn = 'before')"
REDRAWN_JS = f"() => !{SHADOW}.querySelector('button[data-drawn]')"  # a rerun at another layer draws new buttons


def frames_sent(page) -> list[int]:
    """A list that grows by one for every websocket message the page sends to the server."""
    sent: list[int] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda _: sent.append(1)))
    return sent


@needs_chromium
def test_a_layer_button_repaints_before_the_server_hears_and_the_server_agrees(server: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    sent = frames_sent(page)
    try:
        page.goto(f"{server}/?mode=Pretrained")
        wait_for_heatmaps(page, 12, timeout=180)
        page.get_by_role("button", name="3", exact=True).wait_for()  # the layer buttons (Playwright sees the shadow root)
        page.wait_for_timeout(1000)
        old = page.evaluate(Z_JS, "heads")
        before = len(sent)
        page.evaluate(MARK_JS)
        hrefs = page.evaluate(HREFS_JS, "heads")
        page.evaluate(f"() => {{ window.redrawn = ({REPLOTTED_JS})('heads'); }}")
        page.evaluate(SWITCH_JS, 3)  # synchronous: the heatmap images are repainted when this returns
        assert len(sent) == before  # nothing went to the server yet
        assert all(a != b for a, b in zip(page.evaluate(HREFS_JS, "heads"), hrefs, strict=True))
        client = page.evaluate("() => window.redrawn")  # then Plotly's own redraw, from the same numbers
        assert not np.allclose(np.array(client), np.array(old))
        wait_for_query(page, r"layer=3")  # the URL follows at once
        page.wait_for_function(REDRAWN_JS, timeout=60_000)  # then the server reran at layer 3
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        assert len(sent) > before
        server_z = np.array(page.evaluate(Z_JS, "heads"))
        assert np.nanmax(np.abs(np.array(client) - server_z)) <= 1e-4  # the browser drew the server's numbers
        assert page.get_by_text("encoder layer 3 of 6").count() == 1
        # Three quick steps cost one rerun, at the last layer.
        page.evaluate(MARK_JS)
        for layer in (4, 5, 4):
            page.evaluate(SWITCH_JS, layer)
        wait_for_query(page, r"layer=4")
        page.wait_for_function(REDRAWN_JS, timeout=60_000)
        assert page.locator('.st-key-layer_switch button[aria-pressed="true"]').inner_text() == "4"
    finally:
        page.close()
    assert errors == []


FIXED_GD_JS = f"""(gd) => ({GD_Z_JS})(gd).map(z => z.map(r => r.map(v => Number.isNaN(v) ? 'NaN' : v.toFixed(3))))"""
FIXED_JS = f"(key) => ({FIXED_GD_JS})(document.querySelector(`.st-key-${{key}} .js-plotly-plot`))"
HOVER_JS = """(gd, head, row, col) => {
    // Plotly's own hover label of one cell of a heads chart ("... weight 0.123 ...")
    const trace = gd.data[head];
    window.Plotly.Fx.hover(gd, {xval: col, yval: row}, trace.xaxis + trace.yaxis);
    return gd.querySelector('.hoverlayer').textContent;
}"""


@needs_chromium
def test_hover_after_a_layer_click_shows_the_servers_three_decimals(server: str, browser, minilm_traces) -> None:  # noqa: F811
    """Before the server's rerun, every cell's hover value (%{z:.3f}, toFixed(3)) is the one the server's chart
    then shows, also on the cells whose nearest uint16 code would decode to other digits."""
    stack = layer_stack(minilm_traces)[3]  # (H, t, s): layer 3, as the server draws it
    full = layer_stack(minilm_traces)
    lo, hi = min(float(np.nanmin(full)), 0.0), float(np.nanmax(full))  # as pack() finds them
    step = (hi - lo) / 65534
    nearest = (lo + np.rint((stack.astype(np.float64) - lo) / step) * step).astype(np.float32)  # (H, t, s)
    tricky = np.argwhere(to_fixed_3(nearest) != to_fixed_3(stack))  # the nearest code would show other digits
    assert len(tricky) > 3
    head, row, col = (int(i) for i in tricky[0])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/?mode=Pretrained")
        wait_for_heatmaps(page, 12, timeout=180)
        page.get_by_role("button", name="3", exact=True).wait_for()
        page.wait_for_timeout(1000)
        # the click repaints; once Plotly has redrawn that chart, its hover and digits are read
        page.evaluate(MARK_JS)
        label, client = page.evaluate(f"""async () => {{
            const gd = document.querySelector('.st-key-heads .js-plotly-plot');
            const read = new Promise(done => gd.once('plotly_afterplot',  // this chart's own redraw after the click
                () => done([({HOVER_JS})(gd, {head}, {row}, {col}), ({FIXED_GD_JS})(gd)])));
            ({SWITCH_JS})(3);
            return await read; }}""")
        page.wait_for_function(REDRAWN_JS, timeout=60_000)  # the server reran at layer 3
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        page.wait_for_timeout(500)
        served = page.evaluate(FIXED_JS, "heads")
        assert np.array_equal(np.array(served), to_fixed_3(stack))  # the server drew this stack
        assert np.array_equal(np.array(client), np.array(served))  # every cell's 3 decimals, before the rerun
        assert f"weight {to_fixed_3(stack)[head, row, col]}" in label  # Plotly's hover shows them
        assert to_fixed_3(stack)[head, row, col] != to_fixed_3(nearest)[head, row, col]
    finally:
        page.close()


CELLS_JS = """async ([hrefs, rows, cols]) => {
    // Heatmap images sampled at each cell's centre: [heads][rows * cols][r, g, b]
    return Promise.all(hrefs.map(async (href) => {
        const picture = new Image();
        picture.src = href;
        await picture.decode();
        const canvas = document.createElement('canvas');
        canvas.width = cols; canvas.height = rows;
        const context = canvas.getContext('2d');
        context.imageSmoothingEnabled = false;
        context.drawImage(picture, 0, 0, cols, rows);
        const data = context.getImageData(0, 0, cols, rows).data;
        return Array.from({length: rows * cols}, (_, i) => [data[4 * i], data[4 * i + 1], data[4 * i + 2]]);
    }));
}"""


@needs_chromium
def test_the_fast_repaint_shows_the_colours_plotly_then_draws(server: str, browser) -> None:
    """A layer button paints the heatmap images itself at once; Plotly's own redraw a frame later agrees."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/?mode=Pretrained")
        wait_for_heatmaps(page, 12, timeout=180)
        page.get_by_role("button", name="2", exact=True).wait_for()
        rows, cols = np.array(page.evaluate(Z_JS, "heads")[0]).shape
        before = page.evaluate(HREFS_JS, "heads")
        # Plotly's own images, taken the moment its redraw ends (the server's rerun, 0.4 s after the click,
        # mounts a new chart beside the old one for a moment: read this chart's images only)
        page.evaluate("""() => { const gd = document.querySelector('.st-key-heads .js-plotly-plot');
            gd.on('plotly_afterplot', () => { window.replotted = window.replotted ||
                [...gd.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href')); }); }""")
        fast_hrefs = page.evaluate(f"() => {{ ({SWITCH_JS})(2); return [window.replotted, ({HREFS_JS})('heads')]; }}")
        assert fast_hrefs[0] is None  # captured right after the click, before Plotly's redraw
        fast_hrefs = fast_hrefs[1]
        assert all(f != b for f, b in zip(fast_hrefs, before, strict=True))  # every head repainted already
        page.wait_for_function("() => Array.isArray(window.replotted)", timeout=10_000)  # then Plotly redrew the grid
        fast = np.array(page.evaluate(CELLS_JS, [fast_hrefs, rows, cols]), dtype=int)  # (12, rows * cols, 3)
        plotly = np.array(page.evaluate(CELLS_JS, [page.evaluate("window.replotted"), rows, cols]), dtype=int)
        assert fast.shape == plotly.shape == (12, rows * cols, 3)
        assert np.abs(fast - plotly).max() <= 3  # the same colour in every cell of every head
        assert len(np.unique(fast.reshape(-1, 3), axis=0)) > 20  # not a blank or one-colour image
    finally:
        page.close()


@needs_chromium
def test_an_overview_thumbnail_opens_its_head_before_the_server_answers(server: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(f"{server}/?mode=Pretrained&view=Overview&compare=2")
        page.wait_for_selector(".st-key-opened_heads .js-plotly-plot", timeout=180_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        x, y = page.evaluate("""() => {
            const n = 3 * 12 + 5 + 1, gd = document.querySelector('.st-key-overview .js-plotly-plot');
            const box = gd.querySelector(`.nsewdrag[data-subplot="x${n}y${n}"]`).getBoundingClientRect();
            return [box.left + box.width / 2, box.top + box.height / 2];
        }""")  # the centre of the thumbnail of layer 3, head 5
        page.mouse.move(x, y)
        page.get_by_text("layer 3, head 5").first.wait_for(timeout=30_000)  # hovered: the chart takes clicks now
        hrefs = page.evaluate(HREFS_JS, "opened_heads")
        page.evaluate(f"() => {{ window.redrawn = ({REPLOTTED_JS})('opened_heads'); }}")
        page.mouse.click(x, y)
        page.wait_for_function(f"(old) => ({HREFS_JS})('opened_heads')[0] !== old[0]", arg=hrefs)  # painted at once
        client = page.evaluate("() => window.redrawn")  # then Plotly's own redraw (title, colour bar), same numbers
        title = page.evaluate("() => document.querySelector('.st-key-opened_heads .js-plotly-plot').layout.title.text")
        assert title == "layer 3"  # opened in the browser, before any rerun could have drawn it
        wait_for_query(page, r"layer=3.*compare=5|compare=5.*layer=3")
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        page.wait_for_timeout(500)
        assert np.abs(np.array(client) - np.array(page.evaluate(Z_JS, "opened_heads"))).max() <= 1e-4
    finally:
        page.close()
    assert errors == []
