"""The lines view (BertViz's head view) and the clickable overview, as figures."""

from __future__ import annotations

import numpy as np
import pytest

import mha_viz
from mha_viz.figures import lines_figure, overview_figure
from mha_viz.figures.lines import LEVELS, MAX_LINE_TOKENS, MIN_WEIGHT, head_colour, line_count, picked_token
from mha_viz.figures.overview import picked_head
from mha_viz.sources import configurable_trace


@pytest.fixture(scope="module")
def trace():
    return configurable_trace("the cat sat on the mat and the dog sat on the cat", mha_viz.MHAConfig(32, 4), causal=True)


def lines(fig) -> list:
    return [t for t in fig.data if t.mode == "lines" and t.x is not None and len(t.x) > 1]


def segments(fig) -> set[tuple[str, int, int]]:
    """(colour, query, key) of every line drawn."""
    out = set()
    for t in lines(fig):
        y = np.asarray(t.y, dtype=float).reshape(-1, 3)
        out |= {(t.line.color, int(q), int(k)) for q, k, _ in y}
    return out


def test_one_line_per_pair_above_the_threshold_with_the_weight_as_opacity(trace):
    fig = lines_figure(trace)
    expected = {(head_colour(h), q, k) for h, q, k in zip(*np.nonzero(trace.weights >= MIN_WEIGHT))}
    assert segments(fig) == expected and line_count(fig) == len(expected)
    for t in lines(fig):
        y = np.asarray(t.y, dtype=float).reshape(-1, 3)
        h = next(h for h in range(4) if head_colour(h) == t.line.color)
        w = trace.weights[h, y[:, 0].astype(int), y[:, 1].astype(int)]
        level = np.digitize(w, LEVELS) - 1
        assert len(set(level)) == 1 and t.opacity == pytest.approx(min(1.0, LEVELS[level[0] + 1]))
    assert all((q >= k) for _, q, k in segments(fig))  # causal: no line to a later key


def test_picking_a_token_keeps_only_its_lines(trace):
    query = segments(lines_figure(trace, pick=("query", 5)))
    assert query and {q for _, q, _ in query} == {5}
    key = segments(lines_figure(trace, pick=("key", 2)))
    assert key and {k for _, _, k in key} == {2}
    one = segments(lines_figure(trace, [3]))
    assert {c for c, _, _ in one} == {head_colour(3)}
    with pytest.raises(ValueError, match="no query token 99"):
        lines_figure(trace, pick=("query", 99))


def test_token_markers_carry_what_a_click_picks(trace):
    fig = lines_figure(trace)
    markers = [t for t in fig.data if t.mode == "markers+text"]
    assert [m.name for m in markers] == ["query tokens", "key tokens"]
    assert list(markers[0].text) == list(trace.query_tokens)
    point = {"curve_number": 0, "point_index": 3, "customdata": list(markers[0].customdata[3])}
    assert picked_token([point]) == ("query", 3)
    assert picked_token([{"customdata": ["key", 7]}]) == ("key", 7)
    assert picked_token([{"x": 1}]) is None
    assert "click" in markers[0].hovertext[0] and "head 0" in markers[0].hovertext[0]  # hover: top keys per head


def test_long_inputs_show_a_window_of_tokens():
    words = " ".join(f"w{i}" for i in range(100))
    t = configurable_trace(words, mha_viz.MHAConfig(16, 2))
    fig = lines_figure(t, start=24)
    markers = [m for m in fig.data if m.mode == "markers+text"]
    assert list(markers[0].y) == list(range(24, 24 + MAX_LINE_TOKENS))
    assert {q for _, q, _ in segments(fig)} <= set(range(24, 24 + MAX_LINE_TOKENS))


def test_overview_thumbnails_are_clickable():
    attentions = np.random.default_rng(0).dirichlet(np.ones(6), size=(3, 4, 6))  # (L, H, T, T)
    fig = overview_figure(attentions)
    targets = [t for t in fig.data if t.type == "scatter"]
    assert len(targets) == 3 * 4 and all(len(t.x) == 9 for t in targets)  # a 3 x 3 grid in every thumbnail
    assert {tuple(t.customdata[0]) for t in targets} == {(layer, h) for layer in range(3) for h in range(4)}
    assert all(t.hoverinfo == "skip" for t in fig.data if t.type == "heatmap")  # hover lands on the targets
    assert picked_head([{"customdata": [2, 1]}]) == (2, 1) and picked_head([]) is None
