"""Long inputs (mha_viz.long): exact blocks of attention without [H, T, S] in memory, the overview, the zoom,
and the app's Heads view of a 4096-token text (AppTest and Chromium)."""

from __future__ import annotations

import html
import json
import os
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
import torch

from mha_viz import MHAConfig, MultiHeadAttention, long_trace
from mha_viz.figures import long_heads_figure
from mha_viz.figures.common import max_pool
from mha_viz.figures.heads import MAX_CELLS_PER_SIDE, zoom_window
from mha_viz.params import EXAMPLES, MAX_LONG_TOKENS, parse_query
from mha_viz.sources import ConfigurableSource, long_configurable_trace
from mha_viz.text import repeat_to_tokens, tokenize
from mha_viz.ui.views import ZOOM_HEADS
from tests.browser import CHROMIUM, ROOT, wait_for_heatmaps, wait_for_query
from tests.test_app import heatmaps, new_app, z_matrix

LONG_TEXT = repeat_to_tokens(" . ".join(EXAMPLES.values()) + " .", MAX_LONG_TOKENS)


def traces(T: int, S: int | None, causal: bool, seed: int = 0):
    """(LongTrace, the full AttentionTrace) of one random layer on random inputs."""
    torch.manual_seed(seed)
    mha = MultiHeadAttention(32, 4, seed=seed)
    x = torch.randn(T, 32)
    c = None if S is None else torch.randn(S, 32)
    tokens = [f"t{i}" for i in range(T)]
    keys = None if S is None else [f"k{j}" for j in range(S)]
    return (long_trace(mha, x, c, causal=causal, query_tokens=tokens, key_tokens=keys, overview_side=16),
            mha(x, c, causal=causal, query_tokens=tokens, key_tokens=keys))


@pytest.mark.parametrize(("T", "S", "causal"), [(300, None, False), (257, None, True), (200, 333, False),
                                                 (40, None, True)])
def test_blocks_equal_the_full_trace(T: int, S: int | None, causal: bool) -> None:
    long, full = traces(T, S, causal)
    S = S or T
    assert long.shape == full.weights.shape
    whole = long.weights(slice(0, T), slice(0, S))  # (H, T, S)
    np.testing.assert_allclose(whole, full.weights, atol=1e-6)
    np.testing.assert_allclose(long.scores(slice(0, T), slice(0, S)), full.scores, atol=1e-5)
    np.testing.assert_allclose(long.concat, full.concat, atol=1e-6)
    np.testing.assert_allclose(long.output, full.output, atol=1e-6)
    np.testing.assert_allclose(long.concat @ long.W_O.T + full.b_O, long.output, atol=1e-5)  # concat @ W_O = output
    np.testing.assert_allclose(whole.sum(-1), 1.0, atol=1e-5)  # rows of blocks, put together, are softmaxes
    block = long.weights(slice(T // 3, T // 3 + 17), slice(S // 2, S // 2 + 23))
    np.testing.assert_allclose(block, full.weights[:, T // 3:T // 3 + 17, S // 2:S // 2 + 23], atol=1e-6)


def test_causal_blocks_are_zero_above_the_diagonal() -> None:
    long, _ = traces(300, None, True)
    block = long.weights(slice(100, 150), slice(120, 200))  # (H, 50, 80): key 120 + j after query 100 + i?
    after = np.arange(120, 200)[None, :] > np.arange(100, 150)[:, None]
    assert after.any() and (~after).any()
    assert np.all(block[:, after] == 0.0) and np.all(block[:, ~after] > 0.0)


def test_the_overview_is_the_max_pooled_attention() -> None:
    long, full = traces(300, 333, False)
    pooled, bt, bs = max_pool(full.weights, 16)
    assert (long.block_rows, long.block_cols) == (bt, bs) == (19, 21)
    np.testing.assert_array_equal(long.overview, pooled)


def test_4096_tokens_take_a_fraction_of_the_full_attentions_memory() -> None:
    long = long_configurable_trace(LONG_TEXT, MHAConfig(768, 12))
    H, T, S = long.shape
    assert (H, T, S) == (12, 4096, 4096) and long.overview.shape == (12, 128, 128)
    full_bytes = 2 * H * T * S * 4  # scores and weights in float32: what an AttentionTrace holds
    assert long.nbytes < 0.1 * full_bytes, (long.nbytes, full_bytes)
    np.testing.assert_allclose(long.weights(slice(4000, 4096), slice(0, S)).sum(-1), 1.0, atol=1e-4)


def test_the_zoom_window_stays_inside_the_input() -> None:
    long, _ = traces(300, 200, False)
    assert zoom_window(long, 250, -5) == (slice(300 - MAX_CELLS_PER_SIDE, 300), slice(0, MAX_CELLS_PER_SIDE))
    short, _ = traces(40, None, False)
    assert zoom_window(short, 10, 10) == (slice(0, 40), slice(0, 40))


def test_figures_draw_the_overview_and_the_exact_zoom() -> None:
    long = long_configurable_trace(LONG_TEXT, MHAConfig(768, 12))
    overview = long_heads_figure(long, mark=(1000, 200))
    assert len(overview.to_json()) < 5_000_000  # the limit for the overview of 12 heads at 4096 tokens
    maps = [t for t in overview.data if t.type == "heatmap"]
    assert len(maps) == 12
    np.testing.assert_array_equal(np.array(maps[5].z), long.overview[5])
    assert (maps[0].dx, maps[0].dy) == (32, 32)  # a cell is a 32x32 block of positions
    assert len(overview.layout.shapes) == 12 and overview.layout.shapes[0].x0 == 199.5  # the zoom, outlined
    zoom = long_heads_figure(long, [3, 7], zoom=(1000, 200))
    z = np.array(zoom.data[1].z)
    np.testing.assert_allclose(z, long.weights(slice(1000, 1128), slice(200, 328))[7], atol=1e-7)
    assert (zoom.data[1].x0, zoom.data[1].y0, zoom.data[1].dx) == (200, 1000, 1)  # one token pair a cell
    xaxis = zoom.layout[zoom.data[1].xaxis.replace("x", "xaxis")]
    words = tokenize(LONG_TEXT)
    assert all(words[v] == html.unescape(t) for v, t in zip(xaxis.tickvals, xaxis.ticktext, strict=True))


def test_the_source_says_when_an_input_is_long() -> None:
    cfg = MHAConfig(64, 4)
    assert not ConfigurableSource("a b c", cfg).is_long()
    assert ConfigurableSource(LONG_TEXT, cfg).is_long()
    assert not ConfigurableSource(LONG_TEXT, cfg, long_tokens=512).is_long()  # a public demo's budget
    assert ConfigurableSource("a b", cfg, context=LONG_TEXT).is_long()
    assert ConfigurableSource(LONG_TEXT + " more", cfg).long_trace().meta["truncated"] == 1


def test_the_zoom_is_in_the_url() -> None:
    state, notices = parse_query({"zoom": "3000", "zoom_k": "12"})
    assert (state.zoom, state.zoom_k, notices) == (3000, 12, [])
    _, notices = parse_query({"zoom_k": "5000"})
    assert notices


def chart(at, key: str) -> dict:
    (match,) = [c for c in at.get("plotly_chart") if c.key == key]
    return json.loads(match.proto.spec)


def test_the_app_draws_a_long_text_as_overview_and_zoom() -> None:
    at = new_app(h="12", d_model="768").run()
    at.selectbox(key="example").set_value(f"A long text ({MAX_LONG_TOKENS} tokens)").run()
    assert not at.exception
    assert len(tokenize(at.text_area(key="text").value)) == MAX_LONG_TOKENS
    assert any("4096 tokens" in e.value for e in at.info)
    overview, zoom = chart(at, "heads_long"), chart(at, "heads_zoom")
    assert len(heatmaps(overview)) == 12 and len(heatmaps(zoom)) == ZOOM_HEADS == 4  # the zoom: the first 4 heads
    assert z_matrix(heatmaps(overview)[0]).shape == (128, 128) and heatmaps(overview)[0]["dx"] == 32
    at.slider(key="zoom").set_value(2000).run()
    at.slider(key="zoom_k").set_value(1500).run()
    assert at.query_params["zoom"] == "2000" and at.query_params["zoom_k"] == "1500"
    first = heatmaps(chart(at, "heads_zoom"))[0]
    assert (first["y0"], first["x0"]) == (2000, 1500)
    rows = z_matrix(first)
    assert rows.shape == (128, 128) and 0 < rows.sum(-1).max() <= 1.0 + 1e-5  # a part of each softmax row
    at.multiselect(key="compare").set_value([7, 11]).run()
    assert [t["name"] for t in heatmaps(chart(at, "heads_zoom"))] == ["head 7", "head 11"]
    at.segmented_control(key="view").set_value("One head").run()
    assert not at.exception and any("first 512 tokens of 4096" in c.value for c in at.caption)


@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason=f"{CHROMIUM} not installed")
def test_a_box_drawn_on_the_overview_moves_the_zoom_there(server: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1900})  # the overview and the zoom in one screenshot
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(f"{server}/?h=12&d_model=768&text={urllib.parse.quote(LONG_TEXT)}")
        wait_for_heatmaps(page, 12, timeout=180)
        page.wait_for_selector('[data-testid="stPlotlyChart"] >> nth=1')
        image = page.locator('[data-testid="stPlotlyChart"]').first.locator(".heatmaplayer image").nth(1)  # head 1
        box = image.bounding_box()
        assert abs(box["width"] - box["height"]) < 2  # square heatmaps
        old = page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')[1]"
                            ".querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href'))")
        page.mouse.move(box["x"] + 0.10 * box["width"], box["y"] + 0.50 * box["height"])
        page.mouse.down()
        page.mouse.move(box["x"] + 0.30 * box["width"], box["y"] + 0.60 * box["height"], steps=5)
        page.mouse.up()
        # the box's centre is at key 0.2 * 4096 = 819, query 0.55 * 4096 = 2253: the 128-wide zoom starts 64 before
        wait_for_query(page, r"zoom=2[01]\d\d&zoom_k=[67]\d\d")
        page.wait_for_function(
            """(old) => { const c = document.querySelectorAll('[data-testid="stPlotlyChart"]')[1];
                const imgs = c ? [...c.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href')) : [];
                return imgs.length === 4 && imgs.every(h => !old.includes(h)); }""",
            arg=old, polling="raf", timeout=60_000)
        page.screenshot(path=str(ROOT / "assets" / "long-4096.png"))
        search = urllib.parse.parse_qs(page.evaluate("location.search")[1:])
        assert abs(int(search["zoom"][0]) + 64 - 2253) < 40 and abs(int(search["zoom_k"][0]) + 64 - 819) < 40
        assert errors == []
    finally:
        page.close()
