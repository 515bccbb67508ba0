"""Layers switched in the browser: the bytes sent to the page decode to what heads_figure draws, and in
Chromium a click repaints the heads (or opens an overview thumbnail's head) before the server hears of it,
with the numbers the server then draws itself."""

from __future__ import annotations

import json
import os
import struct
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pytest

from mha_viz import load_model
from mha_viz.figures.heads import MAX_CELLS_PER_SIDE, heads_figure, layer_stack
from mha_viz.ui import layer_switch
from tests.browser import CHROMIUM, wait_for_heatmaps, wait_for_query

SENTENCE = "The animal didn't cross the street because it was too tired"


def decode(payload: bytes) -> tuple[dict, np.ndarray]:
    """What layer_switch.js decodes: the header and the [L, H, t, s] values (NaN where 65535), as it computes them
    (step = (hi - lo) / 65534, lo + v * step in float64) and keeps them (a Float32Array)."""
    (n,) = struct.unpack_from("<I", payload)
    meta = json.loads(payload[4:4 + n])
    q = np.frombuffer(payload[4 + n:], dtype="<u2").reshape(meta["layers"], meta["heads"], meta["rows"], meta["cols"])
    values = (meta["lo"] + q.astype(np.float64) * ((meta["hi"] - meta["lo"]) / 65534)).astype(np.float32)
    return meta, np.where(q == 65535, np.float32(np.nan), values)


def to_fixed_3(values: np.ndarray) -> np.ndarray:
    """JavaScript's toFixed(3) of float32 values (what the hover's %{z:.3f} shows), exactly, as strings."""
    return np.array([format(Decimal(float(v)).quantize(Decimal("0.001"), ROUND_HALF_UP), "f")
                     for v in values.ravel()]).reshape(values.shape)


@pytest.fixture(scope="module")
def minilm_traces():
    model = load_model()
    return [model.trace(SENTENCE, layer) for layer in range(model.num_layers["encoder"])]


def test_the_stack_is_what_heads_figure_draws_of_every_layer(minilm_traces) -> None:
    stack = layer_stack(minilm_traces)  # (L, H, t, s)
    assert stack.shape == (6, 12, 15, 15) and stack.dtype == np.float32
    for layer, trace in enumerate(minilm_traces):
        fig = heads_figure(trace)
        for head, heatmap in enumerate(fig.data):
            np.testing.assert_array_equal(stack[layer, head], np.asarray(heatmap.z))


def test_a_long_input_is_stacked_max_pooled_like_the_figure() -> None:
    model = load_model()
    text = " ".join(f"word{i}" for i in range(200))
    traces = [model.trace(text, layer) for layer in (0, 5)]
    stack = layer_stack(traces)
    assert max(stack.shape[2:]) <= MAX_CELLS_PER_SIDE < len(traces[0].query_tokens)
    np.testing.assert_array_equal(stack[1, 7], np.asarray(heads_figure(traces[1]).data[7].z))


def test_the_bytes_decode_to_the_stack_within_uint16_rounding(minilm_traces) -> None:
    stack = layer_stack(minilm_traces).copy()
    stack[0, 0, 0, :3] = np.nan  # NaN (a masked or hidden cell) survives
    payload = layer_switch.with_header(layer_switch.pack(stack, [f"head {h}" for h in range(12)]), active=2, chart="heads")
    meta, values = decode(payload)
    assert meta["active"] == 2 and meta["chart"] == "heads" and meta["labels"][11] == "head 11"
    assert np.array_equal(np.isnan(values), np.isnan(stack))
    step = (meta["hi"] - meta["lo"]) / 65534
    assert np.nanmax(np.abs(values - stack)) <= step + 2.0**-24  # the bound of layer_switch's docstring
    assert len(payload) < 2 * stack.size + 1024  # 2 bytes a cell, a small header


def random_stacks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "softmax rows": rng.dirichlet(np.full(40, 0.3), size=(4, 8, 40)).astype(np.float32),  # (4, 8, 40, 40)
        "uniform in [0, 1]": rng.random((2, 6, 64, 64), dtype=np.float32),
        "signed, in [-0.3, 2.7]": (rng.random((2, 4, 50, 50)) * 3 - 0.3).astype(np.float32),
        "near half thousandths": (rng.integers(0, 1000, (2, 4, 32, 32)) / 1000 + 0.0005
                                  + rng.normal(0, 2e-6, (2, 4, 32, 32))).astype(np.float32),
    }


def test_the_browsers_values_keep_the_stated_bound_and_the_hovers_three_decimals(minilm_traces) -> None:
    """Decoded as the browser does (float32), every value is within step / 2 + max(|lo|, |hi|) 2^-24 of the true
    one where its code is the nearest, within step + that elsewhere, and shows the true value's 3 decimals."""
    stacks = {"MiniLM, 6 layers": layer_stack(minilm_traces), **random_stacks()}
    for name, stack in stacks.items():
        meta, values = decode(layer_switch.pack(stack, ["head"] * stack.shape[1]))
        lo, hi = meta["lo"], meta["hi"]
        step, rounding = (hi - lo) / 65534, max(abs(lo), abs(hi)) * 2.0**-24
        error = np.abs(values.astype(np.float64) - stack)
        nearest = np.rint((stack.astype(np.float64) - lo) / step)
        codes = np.frombuffer(layer_switch.pack(stack, [])[-2 * stack.size:], dtype="<u2").reshape(stack.shape)
        moved = codes != nearest
        assert error[~moved].max() <= step / 2 + rounding + 1e-12, name
        assert error.max() <= step + rounding + 1e-12 and np.abs(codes - nearest).max() <= 1, name
        if name != "near half thousandths":  # elsewhere only cells within a step of a half thousandth move
            assert 0 < moved.mean() <= step / 0.001, name
        assert np.array_equal(to_fixed_3(values), to_fixed_3(stack)), name  # the hover shows the server's digits
    digits = layer_switch.hover_digits(np.float32([0.0005, 0.0015, 0.0024999, -0.0004, -0.0126, 1.0]))
    assert digits.tolist() == [1, 2, 2, 0, -13, 1000]  # float32(0.0005) is just above a half thousandth


def test_the_stack_refuses_layers_of_different_shapes(minilm_traces) -> None:
    short = load_model().trace("a short one", 1)
    with pytest.raises(ValueError, match="shapes differ"):
        layer_stack([minilm_traces[0], short])


def test_a_stack_past_the_byte_limit_is_not_sent() -> None:
    assert layer_switch.fits((6, 12, 128, 128))
    assert not layer_switch.fits((32, 32, 128, 128))


needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason=f"{CHROMIUM} not installed")
Z_JS = "(key) => document.querySelector(`.st-key-${key} .js-plotly-plot`).calcdata.map(c => c[0].z.map(r => Array.from(r)))"
SWITCH_JS = """(layer) => {
    const host = [...document.querySelector('.st-key-layer_switch').querySelectorAll('*')].find(e => e.shadowRoot);
    host.shadowRoot.querySelectorAll('button')[layer].click();
}"""


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
        page.evaluate(SWITCH_JS, 3)  # synchronous: the chart is repainted when this returns
        client = page.evaluate(Z_JS, "heads")
        assert len(sent) == before  # nothing went to the server yet
        assert not np.allclose(np.array(client), np.array(old))
        wait_for_query(page, r"layer=3")  # the URL follows at once
        page.wait_for_function(REDRAWN_JS, timeout=60_000)  # then the server reran at layer 3
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        assert len(sent) > before
        server_z = np.array(page.evaluate(Z_JS, "heads"))
        assert np.abs(np.array(client) - server_z).max() <= 1e-4  # the browser drew the server's numbers
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


FIXED_JS = """(key) => document.querySelector(`.st-key-${key} .js-plotly-plot`).calcdata.map(
    c => c[0].z.map(r => Array.from(r, v => Number.isNaN(v) ? 'NaN' : v.toFixed(3))))"""
HOVER_JS = """(head, row, col) => {
    // Plotly's own hover label of one cell of the heads chart ("... weight 0.123 ...")
    const gd = document.querySelector('.st-key-heads .js-plotly-plot'), trace = gd.data[head];
    window.Plotly.Fx.hover(gd, {xval: col, yval: row}, trace.xaxis + trace.yaxis);
    return gd.querySelector('.hoverlayer').textContent;
}"""


@needs_chromium
def test_hover_after_a_layer_click_shows_the_servers_three_decimals(server: str, browser, minilm_traces) -> None:
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
        # one synchronous call: the click repaints, then the hover and the digits are read before any rerun
        page.evaluate(MARK_JS)
        label, client = page.evaluate(f"""() => {{ ({SWITCH_JS})(3);
            return [({HOVER_JS})({head}, {row}, {col}), ({FIXED_JS})('heads')]; }}""")
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


HREFS_JS = "(key) => [...document.querySelectorAll(`.st-key-${key} .heatmaplayer image`)].map(e => e.getAttribute('href'))"
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
            const gd = document.querySelector('.st-key-overview .js-plotly-plot'), L = gd._fullLayout;
            const xa = L['xaxis' + (3 * 12 + 5 + 1)], ya = L['yaxis' + (3 * 12 + 5 + 1)], box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa._length / 2, box.top + ya._offset + ya._length / 2];
        }""")  # the centre of the thumbnail of layer 3, head 5
        page.mouse.move(x, y)
        page.get_by_text("layer 3, head 5").first.wait_for(timeout=30_000)  # hovered: the chart takes clicks now
        page.mouse.click(x, y)
        client = page.evaluate(Z_JS, "opened_heads")
        title = page.evaluate("() => document.querySelector('.st-key-opened_heads .js-plotly-plot').layout.title.text")
        assert title == "layer 3"  # opened in the browser, before any rerun could have drawn it
        wait_for_query(page, r"layer=3.*compare=5|compare=5.*layer=3")
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        page.wait_for_timeout(500)
        assert np.abs(np.array(client) - np.array(page.evaluate(Z_JS, "opened_heads"))).max() <= 1e-4
    finally:
        page.close()
    assert errors == []
