"""Long inputs (mha_viz.long): exact blocks of attention without [H, T, S] in memory, the overview, the zoom
(the app's Heads view of a 4096-token text: tests/app/test_long_app.py and tests/browser/test_long_browser.py)."""

from __future__ import annotations

import html

import numpy as np
import pytest
import torch

from mha_viz import MHAConfig, MultiHeadAttention, long_trace
from mha_viz.figures import long_heads_figure
from mha_viz.figures.common import max_pool
from mha_viz.figures.heads import MAX_CELLS_PER_SIDE, zoom_window
from mha_viz.limits import MAX_LONG_TOKENS, MAX_MODEL_LONG_TOKENS
from mha_viz.params import EXAMPLES, parse_query
from mha_viz.sources import ConfigurableSource, long_configurable_trace
from mha_viz.text import repeat_to_tokens, tokenize

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


@pytest.mark.slow
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


@pytest.mark.slow
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
    assert parse_query({"zoom_k": "5000"})[0].zoom_k == 5000  # a pretrained model's long text: up to 32,768 tokens
    _, notices = parse_query({"zoom_k": str(MAX_MODEL_LONG_TOKENS)})
    assert notices
