"""Layout properties of the heads grid that keep it cheap to draw and still readable."""

from __future__ import annotations

import json

import pytest

import mha_viz
from mha_viz.figures import heads_figure
from mha_viz.figures.common import HOVER_TOKENS_MAX_CELLS


def trace_of(num_heads: int, num_tokens: int, d_model: int = 48) -> mha_viz.AttentionTrace:
    tokens, x = mha_viz.embed_text(" ".join(f"w{i}" for i in range(num_tokens)), d_model)
    return mha_viz.MultiHeadAttention(d_model, num_heads, seed=0)(x, query_tokens=tokens)


def axes(fig: dict, letter: str) -> list[dict]:
    """The figure's x or y axes in subplot order (xaxis, xaxis2, ...)."""
    keys = sorted((k for k in fig["layout"] if k.startswith(f"{letter}axis")), key=lambda k: int(k[5:] or 1))
    return [fig["layout"][k] for k in keys]


@pytest.mark.parametrize(("heads", "cols", "x_labelled", "y_labelled"), [
    (list(range(4)), 4, [0, 1, 2, 3], [0]),
    (list(range(12)), 4, [8, 9, 10, 11], [0, 4, 8]),
    ([0, 2, 3, 5, 7], 3, [2, 3, 4], [0, 3]),  # head 5's column ends in the first row
])
def test_key_labels_go_under_the_bottom_heatmap_of_each_column(heads, cols, x_labelled, y_labelled) -> None:
    fig = json.loads(heads_figure(trace_of(12, 6), heads, cols=cols).to_json())
    x_axes, y_axes = axes(fig, "x")[: len(heads)], axes(fig, "y")[: len(heads)]  # a grid's empty cells draw nothing
    shown = lambda axs: [i for i, a in enumerate(axs) if a.get("showticklabels", True)]
    assert shown(x_axes) == x_labelled
    assert shown(y_axes) == y_labelled
    for a in x_axes:
        assert a["ticktext"] == [f"w{i}" for i in range(6)]  # hidden labels still belong to their axis


def test_margins_are_fixed_and_fit_the_longest_labels() -> None:
    tokens, x = mha_viz.embed_text("a supercalifragilistic word", 48)
    fig = json.loads(heads_figure(mha_viz.MultiHeadAttention(48, 4, seed=0)(x, query_tokens=tokens)).to_json())
    assert all(a["automargin"] is False for a in axes(fig, "x") + axes(fig, "y"))
    longest = max(len(t) for t in fig["layout"]["xaxis"]["ticktext"])
    assert longest == 16  # labels are cut to 16 characters
    assert fig["layout"]["margin"]["b"] >= 6 * longest and fig["layout"]["margin"]["l"] >= 7 * longest


def test_hover_names_tokens_within_the_budget_and_positions_beyond() -> None:
    small = json.loads(heads_figure(trace_of(4, 16)).to_json())
    assert all(t["customdata"] for t in small["data"]) and "customdata[0]" in small["data"][0]["hovertemplate"]
    assert 12 * 40 * 40 > HOVER_TOKENS_MAX_CELLS
    big = heads_figure(trace_of(12, 40))
    assert all(t.customdata is None for t in big.data)
    assert big.data[0].hovertemplate.startswith("query %{y} → key %{x}")


def test_figure_size_has_no_cliff_below_the_pooling_threshold() -> None:
    """12 heads at 64 tokens carried 98k hover strings (1 MB); now it is the weights and the labels."""
    sizes = {T: len(heads_figure(trace_of(12, T)).to_json()) for T in (32, 64, 128)}
    assert sizes[64] < 0.3e6 and sizes[64] < sizes[128]


@pytest.mark.parametrize("heads", [1, 12, 32, 64, 1024])
def test_the_overview_grid_keeps_every_thumbnail_on_the_figure(heads):
    """A row of many heads (Mamba's and LFM2's channels are heads of width 1) sums many gaps: no axis domain may round
    past the figure's edge, which Plotly refuses."""
    import numpy as np

    from mha_viz.figures.overview import overview_figure

    fig = overview_figure(np.random.default_rng(0).random((2, heads, 4, 4), dtype=np.float32))
    domains = [axis.domain for axis in (*fig.select_xaxes(), *fig.select_yaxes())]
    assert len(domains) == 2 * 2 * heads and all(0 <= lo < hi <= 1 for lo, hi in domains)
