"""describe(fig) and figure_title(fig): the text alternative each chart gets, derived from the figure's data."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

import mha_viz
from mha_viz.figures import heads_figure, output_path_figure
from mha_viz.figures.common import describe, figure_title
from mha_viz.figures.generation import logit_attribution_figure, next_token_figure
from mha_viz.figures.training import curves_figure
from mha_viz.sources import configurable_trace
from mha_viz.trace import AttentionTrace


def test_heads_are_described_by_their_strongest_cells_with_their_tokens() -> None:
    weights = np.full((2, 3, 3), 0.1, dtype=np.float32)
    weights[0, 2, 1] = 0.8  # head 0: "sat" -> "cat"
    weights[1, 0, 0] = 0.7  # head 1: "the" -> "the"
    tokens = ("the", "cat", "sat")
    text = describe(heads_figure(AttentionTrace(query_tokens=tokens, key_tokens=tokens, weights=weights)), top=1)
    assert "head 0: 3 × 3 cells, strongest 'sat' (row 2) × 'cat' (column 1): 0.8" in text
    assert "head 1: 3 × 3 cells, strongest 'the' (row 0) × 'the' (column 0): 0.7" in text
    assert figure_title(heads_figure(AttentionTrace(query_tokens=tokens, key_tokens=tokens, weights=weights))) \
        == "head 0; head 1"


def test_signed_values_rank_by_magnitude_and_bars_by_their_labels() -> None:
    heads = np.array([[0.5, -3.0], [1.0, 0.2]])
    fig = logit_attribution_figure(heads, {"embedding": -7.0, "bias": 0.1}, "duck")
    text = describe(fig, top=1)
    assert "'L0' (layer 0) × 'H1' (head 1): -3" in text  # the most negative head, not the largest value
    assert "2 bars, largest 'embedding': -7" in text
    probs = np.zeros(5, dtype=np.float32)
    probs[3] = 0.9
    bars = describe(next_token_figure(probs, lambda ids: [f"tok{i}" for i in ids], 3, title="Step 1"), top=1)
    assert bars.startswith("Step 1. ") and "tok3" in bars and "0.9" in bars


def test_every_panel_is_named_and_long_figures_are_cut_to_max_panels() -> None:
    t = configurable_trace("The animal didn't cross the street because it was too tired", mha_viz.MHAConfig(64, 4))
    text = describe(output_path_figure(t))
    assert "W_O [64×64]: 64 × 64 cells" in text and text.count("cells, strongest") == 3
    t12 = configurable_trace("a b c", mha_viz.MHAConfig(48, 12))
    text = describe(heads_figure(t12), max_panels=8)
    assert text.count("cells, strongest") == 8 and "and 4 more panels" in text


def test_curves_say_where_they_end_and_an_empty_figure_says_so() -> None:
    fig = curves_figure(np.arange(3), loss={"h = 2": np.array([2.0, 1.0, 0.25])},
                        accuracy={"h = 2": np.array([0.1, 0.5, 0.95])})
    text = describe(fig)
    assert "line h = 2: ends at 0.25" in text and "line h = 2: ends at 0.95" in text
    assert describe(go.Figure()) == "Chart (empty)."
