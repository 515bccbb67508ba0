"""Figures laid out for the width they are drawn at: heads a row, stacked panels, wrapped titles under the toolbar,
legends that get their rows, labels turned only when they must (the page's are in tests/app/test_layout_app.py, the browser's in tests/browser/test_layout_browser.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mha_viz
from mha_viz.figures import common, heads_figure, lines_figure, output_path_figure
from mha_viz.figures import heads as heads_module
from mha_viz.figures.generation import next_token_figure
from mha_viz.sources import configurable_trace

SENTENCE = "The animal didn't cross the street because it was too tired"
TOOLBAR_PX = 32  # the chart toolbar's strip: titles and legends go under it


def trace(h: int = 4, text: str = SENTENCE) -> mha_viz.AttentionTrace:
    return configurable_trace(text, mha_viz.MHAConfig(64, h))


def panels_px(fig, width: int) -> list[tuple[float, float, float, float]]:
    """Each subplot's (left, right, top, bottom) in px of a figure drawn width px wide (fixed margins)."""
    m, height = fig.layout.margin, fig.layout.height
    w, h = width - m.l - m.r, height - m.t - m.b
    out = []
    for xaxis in fig.select_xaxes():
        yaxis = fig.layout[xaxis.anchor.replace("y", "yaxis")]
        out.append((m.l + xaxis.domain[0] * w, m.l + xaxis.domain[1] * w,
                    m.t + (1 - yaxis.domain[1]) * h, m.t + (1 - yaxis.domain[0]) * h))
    return out


def disjoint(boxes) -> bool:
    return all(a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2]
               for i, a in enumerate(boxes) for b in boxes[i + 1:])


@pytest.mark.parametrize(("width", "per_row"), [(340, 2), (564, 3), (640, 3), (940, 4), (2400, 4)])
def test_heads_a_row_follow_the_width(width: int, per_row: int) -> None:
    fig = heads_figure(trace(), width=width)
    rows = {round(a.y, 6) for a in fig.layout.annotations}
    assert len(fig.layout.annotations) == 4 and max(sum(round(a.y, 6) == y for a in fig.layout.annotations)
                                                    for y in rows) == per_row
    assert heads_module.grid_columns(4, 13, width) == per_row
    across = [(r - left) for left, r, _, _ in panels_px(fig, width)]
    assert min(across) >= 110 and disjoint(panels_px(fig, width))


def test_a_phone_width_puts_the_colour_bar_on_top_whatever_the_user_agent() -> None:
    narrow, wide = heads_figure(trace(), width=500), heads_figure(trace(), width=1000)
    assert narrow.layout.coloraxis.colorbar.orientation == "h" and wide.layout.coloraxis.colorbar.orientation is None


@pytest.mark.parametrize("width", [340, 564, 1000])
def test_concat_to_w_o_stacks_below_900_px_and_its_panels_never_overlap(width: int) -> None:
    fig = output_path_figure(trace(), width=width)
    x = [tuple(a.domain) for a in fig.select_xaxes()]
    y = [tuple(a.domain) for a in fig.select_yaxes()]
    if width < 900:
        assert x == [(0.0, 1.0)] * 3 and y[0][0] >= y[1][1] and y[1][0] >= y[2][1]  # one under another
    else:
        gap = (x[1][0] - x[0][1]) * (width - 90 - 80)
        assert gap >= 50  # W_O's labels and axis title fit between concat and W_O
        assert x[0][1] < x[1][0] and x[1][1] < x[2][0]
    for note in fig.layout.annotations:  # the panel titles fit their panels
        assert max(common.text_px(line, 16) for line in note.text.split("<br>")) <= width


def test_titles_wrap_to_their_width_and_sit_under_the_toolbar() -> None:
    text = "Where the query that wrote 'a' looked: 8 keys, one more each step (the KV cache)"
    wrapped = common.wrap(text, 300)
    assert "<br>" in wrapped and wrapped.replace("<br>", " ") == text
    assert all(common.text_px(line, 17) <= 300 for line in wrapped.split("<br>"))
    title, top = common.title_block(text, 300)
    assert title["text"] == wrapped
    assert top >= TOOLBAR_PX + 17 * (wrapped.count("<br>") + 1)
    fig = next_token_figure(np.array([0.9, 0.05, 0.05]), lambda ids: [f"t{i}" for i in ids], 0,
                            title="Step 1: next token (greedy: the most likely token)", width=300)
    assert "<br>" in fig.layout.title.text and fig.layout.margin.t >= TOOLBAR_PX + 2 * 17
    assert fig.layout.margin.r >= common.text_px("100.0%")  # the longest bar's value label has room past the axis


def test_one_opened_head_is_named_once() -> None:
    fig = heads_figure(trace(), [2], cols=1, title="layer 0, head 2")
    assert fig.layout.title.text == "layer 0, head 2" and not fig.layout.annotations
    fig = heads_figure(trace(), [1, 2], title="layer 0")
    assert [a.text for a in fig.layout.annotations] == ["head 1", "head 2"]


def test_short_token_labels_are_not_rotated() -> None:
    fig = heads_figure(trace(2, "a b c d a b c d"))
    assert fig.layout.xaxis.tickangle == 0 and fig.layout.margin.b < 40
    assert common.token_tickangle(["a", "b", "c", "d"]) == 0 and common.token_tickangle(["animal", "street"]) == -60
    assert common.token_tickangle(["animal", "street"], room_px=400) == 0


def test_the_first_rotated_key_label_has_room_on_the_left() -> None:
    cross = configurable_trace("a b c", mha_viz.MHAConfig(64, 2), context="extraordinarily long keys")
    fig = heads_figure(cross)  # short query labels on the left, a long key label slanting down-left from the first key
    longest = len(fig.layout.xaxis.ticktext[0])
    assert fig.layout.xaxis.tickangle == -60 and fig.layout.margin.l >= longest * 7 * math.cos(math.radians(60))


@pytest.mark.parametrize("width", [390, 560, 1000])
def test_the_lines_legend_gets_the_rows_it_needs(width: int) -> None:
    fig = lines_figure(trace(8), width=width)
    per_row = (width - 20) // 90
    rows = -(-8 // per_row)
    assert fig.layout.margin.t >= TOOLBAR_PX + rows * 28
    assert fig.layout.legend.title.text is None
    legend_top = (1 - fig.layout.legend.y) * fig.layout.height
    assert legend_top >= TOOLBAR_PX - 1  # under the toolbar
