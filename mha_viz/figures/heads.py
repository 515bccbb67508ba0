"""Every head's attention matrix side by side, on one shared colour scale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from ..trace import AttentionTrace

if TYPE_CHECKING:
    from ..long import LongTrace
from .common import (
    COMPACT_PX,
    LINE_EM,
    NARROW_PX,
    PANEL_TITLE_PX,
    WIDE_PX,
    axis_key,
    f32,
    max_pool,
    pair_labels,
    subplot_grid,
    text_px,
    title_block,
    token_axis,
    token_tickangle,
    wrap,
)

MAX_CELLS_PER_SIDE = 128  # a longer matrix is drawn max-pooled; `window` shows a region at full resolution
LABEL_PX = 14  # a token label needs this many px along its axis, or labels are thinned to every n-th
COLOUR_BAR_PX = 90  # a vertical colour bar beside the heads
COMPACT_BAR_PX = 48  # a horizontal colour bar above them (narrow figures)
COLORSCALE = "Blues"  # of the weights, from 0 to the largest shown
SIGNED_COLORSCALE = "RdBu"  # of signed values (differential attention): red below 0, white at 0, blue above
BACKGROUND = "#eeeeee"  # behind the heatmaps: where a cell is NaN (masked)
# The frame of a grouped-query head: one colour per key/value head (Okabe-Ito's colour-blind-safe colours, without
# the blues and yellow that would blend with the heatmaps' own scales or the page), then a dash pattern once the colours
# run out. The title names the K/V head too, so colour is never the only cue.
GROUP_COLOURS = ("#D55E00", "#009E73", "#CC79A7", "#E69F00", "#000000", "#8C6D31")
GROUP_DASHES = ("solid", "dash", "dot")


def grid_columns(n: int, tokens: int, width: float, wanted: int | None = None) -> int:
    """How many of n heatmaps of `tokens` positions a side go in a row of a figure width px wide: at most wanted
    (default 4), and only as many as leave each heatmap its minimum width (120 px, 200 px above 20 tokens)."""
    wanted = min(n, wanted or 4)
    smallest = 120 if tokens <= 20 else 200
    room = width - (0 if width < NARROW_PX else COLOUR_BAR_PX) - 60  # the query labels on the left
    fits = max(1, int(room * 0.9 // smallest))
    return max(1, min(wanted, fits))


def label_step(n: int, side_px: float) -> int:
    """Label every step-th of n tokens along an axis side_px long, so that labels never overlap."""
    return max(1, -(-n * LABEL_PX // max(1, int(side_px))))


def colour_range(shown: np.ndarray) -> dict:
    """The colour axis of attention heatmaps: Blues from 0 to the largest value shown, or, when some value is
    negative (differential attention's map1 - lambda * map2), a diverging scale centred at 0 (cmin = -cmax)."""
    finite = shown[np.isfinite(shown)]
    if finite.size and float(finite.min()) < 0:
        top = float(np.abs(finite).max())
        return {"colorscale": SIGNED_COLORSCALE, "cmin": -top, "cmax": top}
    top = float(finite.max()) if finite.size else 1.0
    return {"colorscale": COLORSCALE, "cmin": 0.0, "cmax": max(top, 1e-9)}


def head_label(trace: AttentionTrace, head: int) -> str:
    """A heatmap's title: "head 3", with its shared key/value head under grouped-query attention."""
    return f"head {head}" + (f" (K/V head {trace.kv_heads[head]})" if trace.kv_heads else "")


def group_style(kv_head: int) -> dict:
    """The frame line of the query heads that read key/value head kv_head: its colour and dash pattern."""
    n = len(GROUP_COLOURS)
    return {"color": GROUP_COLOURS[kv_head % n], "dash": GROUP_DASHES[kv_head // n % len(GROUP_DASHES)], "width": 3}


def group_frames(fig: go.Figure, kv_heads: Sequence[int]) -> None:
    """Frame heatmap i of fig (one per query head, in order) in the style of its key/value head kv_heads[i]: a line
    on the panel's edge, above the cells; the frames go after fig's other shapes."""
    frames = [{"type": "rect", "xref": f"{t.xaxis} domain", "yref": f"{t.yaxis} domain", "x0": 0, "x1": 1,
               "y0": 0, "y1": 1, "line": group_style(g), "layer": "above", "name": f"K/V head {g}"}
              for t, g in zip((t for t in fig.data if t.type == "heatmap"), kv_heads, strict=True)]
    fig.layout.shapes = tuple(fig.layout.shapes) + tuple(frames)


def layer_stack(traces: Sequence[AttentionTrace]) -> np.ndarray:
    """[L, H, t, s] float32: what heads_figure(trace) draws of each layer's trace (every head, max-pooled
    to at most MAX_CELLS_PER_SIDE a side, non-finite values as NaN), so a browser can switch between layers. H is the
    most heads of any layer: a layer with fewer (a hybrid's) is NaN in the others."""
    shapes = {t.weights.shape[1:] for t in traces}
    if len(shapes) != 1:
        raise ValueError(f"the layers' attention shapes differ: {sorted(shapes)}")
    H = max(t.num_heads for t in traces)  # a hybrid's layers can differ in heads: NaN in the heads a layer lacks
    pooled = [max_pool(f32(t.weights), MAX_CELLS_PER_SIDE)[0] for t in traces]  # (H_l, t, s) each
    return np.stack([np.concatenate([p, np.full((H - len(p), *p.shape[1:]), np.nan, np.float32)]) for p in pooled])


def heads_figure(
    trace: AttentionTrace,
    heads: Sequence[int] | None = None,
    *,
    matrices: np.ndarray | None = None,
    cols: int | None = None,
    value_name: str = "weight",
    title: str | None = None,
    cell_px: int | None = None,
    window: tuple[int, int] | None = None,
    compact: bool = False,
    width: int | None = None,
) -> go.Figure:
    """One heatmap per head: query tokens as rows, key tokens as columns.

    matrices [H, T, S] replaces trace.weights (e.g. norm-weighted attention); heads picks a subset;
    window=(start, stop) shows only those query and key positions. All heatmaps share one colour
    axis from 0 to the largest value shown. Under grouped-query attention (trace.kv_heads) each heatmap's title names
    the K/V head it reads and a frame in that K/V head's colour and dash pattern (group_style) surrounds it. Beyond MAX_CELLS_PER_SIDE positions a side, each cell
    is the maximum over a block of positions (the hover says so). width: the px the figure is drawn at
    (default: a desktop page's, or a phone's if compact): as many heads a row as fit (grid_columns), below
    NARROW_PX the colour bar on top. Token labels are thinned to every n-th token
    only where they would overlap (label_step; the figure's meta["label_step"] says n).
    """
    data = trace.weights if matrices is None else matrices  # (H, T, S)
    q_tokens, k_tokens = trace.query_tokens, trace.key_tokens
    q0 = k0 = 0
    if window is not None:
        q0, k0 = max(0, window[0]), max(0, min(window[0], data.shape[2] - 1))
        q1, k1 = min(window[1], data.shape[1]), min(window[1], data.shape[2])
        if q1 <= q0:
            raise ValueError(f"window {window} holds no query positions (0..{data.shape[1] - 1})")
        data = data[:, q0:q1, k0:k1]  # (H, t, s)
        q_tokens, k_tokens = q_tokens[q0:q1], k_tokens[k0:k1]
    heads = list(range(data.shape[0])) if heads is None else list(heads)
    if not heads:
        raise ValueError("pick at least one head")
    bad = [h for h in heads if not 0 <= h < data.shape[0]]
    if bad:
        raise ValueError(f"no head {bad[0]}: this layer has heads 0..{data.shape[0] - 1}")
    shown, bt, bs = max_pool(f32(data[heads]), MAX_CELLS_PER_SIDE)  # (n, T/bt, S/bs)
    fig = heads_grid(shown, (bt, bs), q_tokens, k_tokens, [head_label(trace, h) for h in heads], offset=(q0, k0),
                     cols=cols, value_name=value_name, title=title, cell_px=cell_px, compact=compact, width=width)
    if trace.kv_heads:
        group_frames(fig, [trace.kv_heads[h] for h in heads])
    return fig


def fitted_titles(labels: Sequence[str], width_px: float) -> list[str]:
    """The panel titles, every one wrapped alike when one is wider than width_px (the width the chart's toolbar check,
    mha_viz.figures.common.under_toolbar, allows a top-row title): "head 3<br>(K/V head 1)", each row the same."""
    if all(text_px(label, PANEL_TITLE_PX) <= width_px for label in labels):
        return list(labels)
    return [label.replace(" (", "<br>(", 1) if " (" in label else wrap(label, width_px, PANEL_TITLE_PX)
            for label in labels]


def extra_lines_px(titles: Sequence[str]) -> int:
    """The px the panel titles' lines past the first take."""
    return int(max((t.count("<br>") for t in titles), default=0) * LINE_EM * PANEL_TITLE_PX)


def heads_grid(
    shown: np.ndarray,
    blocks: tuple[int, int],
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    labels: Sequence[str],
    *,
    offset: tuple[int, int] = (0, 0),
    cols: int | None = None,
    value_name: str = "weight",
    title: str | None = None,
    cell_px: int | None = None,
    compact: bool = False,
    square: bool = False,
    width: int | None = None,
) -> go.Figure:
    """The heatmap grid of heads_figure: shown [n, t, s] float32 cells, each the maximum over a block of
    blocks = (rows, cols) positions ((1, 1): one token pair a cell); q_tokens, k_tokens: the positions shown,
    the first at offset = (query, key) position; labels: one title a heatmap (left out when one heatmap's is in
    the title already); square: no panel taller than wide."""
    bt, bs = blocks
    q0, k0 = offset
    T, S = len(q_tokens), len(k_tokens)
    if shown.shape[1:] != (-(-T // bt), -(-S // bs)) or len(labels) != shown.shape[0]:
        raise ValueError(f"{shown.shape} cells do not match {T}x{S} positions in {bt}x{bs} blocks and {len(labels)} labels")
    width = width or (COMPACT_PX if compact else WIDE_PX)
    compact = width < NARROW_PX
    cols = grid_columns(len(labels), max(T, S), width, cols)
    rows = -(-len(labels) // cols)
    per_cell = cell_px or (22 if max(T, S) <= 16 else 12 if max(T, S) <= 48 else 4 if max(T, S) <= 160 else 1)
    longest_y = max((len(t) for t in q_tokens), default=1)
    longest_x = max((len(t) for t in k_tokens), default=1)
    left_px = 12 + 7 * min(16, max(longest_y, -(-longest_x // 2)))  # the query labels, and the first key label's
    # rotated tail
    inner = width - left_px - (0 if compact else COLOUR_BAR_PX)
    across = inner / cols * (0.9 if cols > 1 else 1.0)  # px across one heatmap
    panel = min(420, max(140 if compact else 180, per_cell * max(T, S) + 60), int(across) if compact or square else 420)
    side = min(panel, across)  # heatmaps are square (constrain="domain"): the shorter side wins
    step = max(label_step(T, side), label_step(S, side))
    # Fixed margins instead of Plotly's automargin, which measures every tick label and then draws
    # the figure a second time; the key-token labels go under the bottom heatmap of each column only.
    x_axis = {**token_axis(k_tokens, offset=k0, step=step), "constrain": "domain", "automargin": False}
    x_axis["tickangle"] = token_tickangle(x_axis["ticktext"], side)
    y_axis = {**token_axis(q_tokens, offset=q0, step=step), "autorange": "reversed", "constrain": "domain",
              "automargin": False}
    one_title = len(labels) == 1 and title is not None and labels[0] in title  # no panel title saying it again
    panel_titles = fitted_titles(labels, (width - 100) / cols)
    titles_px = 0 if one_title else 22 + extra_lines_px(panel_titles)
    title_layout, top_px = title_block(title, width - 20, below_px=titles_px + (COMPACT_BAR_PX if compact else 0))
    gap_px = 28 + extra_lines_px(panel_titles)  # compact: the colour bar goes between the title and the heads
    bottom_px = 24 + (6 * max((len(t) for t in x_axis["ticktext"]), default=1) if x_axis["tickangle"] else 0)
    height = top_px + rows * panel + (rows - 1) * gap_px + bottom_px
    v_gap = gap_px / (height - top_px - bottom_px)
    layout, refs = subplot_grid(rows, cols, titles=None if one_title else panel_titles, h_gap=0.1 / cols if cols > 1 else 0,
                                v_gap=v_gap)

    customdata = pair_labels(q_tokens, k_tokens, copies=len(labels)) if bt == bs == 1 else None
    if customdata is not None:
        hover = "query %{y}: <b>%{customdata[0]}</b><br>key %{x}: <b>%{customdata[1]}</b><br>" + value_name
    elif bt == bs == 1:
        hover = "query %{y} → key %{x}<br>" + value_name
    else:
        hover = f"queries %{{y:.0f}}±{bt // 2} → keys %{{x:.0f}}±{bs // 2}<br>max {value_name} in this {bt}×{bs} block"
    hover += " %{z:.3f}<extra>%{fullData.name}</extra>"
    traces = []
    for i, (label, z) in enumerate(zip(labels, shown, strict=True)):
        xref, yref = refs[i]
        traces.append(
            {"type": "heatmap", "z": z, "x0": k0 + (bs - 1) / 2, "dx": bs, "y0": q0 + (bt - 1) / 2, "dy": bt,
             "customdata": customdata, "hovertemplate": hover, "name": label.split(" (")[0], "coloraxis": "coloraxis",
             "xaxis": xref, "yaxis": yref}
        )
        bottom_of_column = i + cols >= len(labels)
        layout[axis_key(xref)].update(x_axis if bottom_of_column else {**x_axis, "showticklabels": False})
        layout[axis_key(yref)].update(y_axis if i % cols == 0 else {**y_axis, "showticklabels": False})
        if square:
            layout[axis_key(yref)]["scaleanchor"] = xref  # one position as tall as wide, whatever the page width
    colorbar = {"title": {"text": value_name}}
    if compact:  # a horizontal bar above the heads, not a column beside them
        bar_top = top_px - COMPACT_BAR_PX - titles_px + 4
        colorbar.update(orientation="h", x=0.0, xanchor="left", y=1 - bar_top / height, yanchor="top", yref="container",
                        thickness=10, lenmode="pixels", len=int(min(320, 0.6 * width)),
                        title={"text": value_name, "side": "right"})
    layout.update(
        title=title_layout,
        coloraxis={**colour_range(shown), "colorbar": colorbar},
        height=height,
        margin={"l": left_px, "r": 10, "t": top_px, "b": bottom_px},
        plot_bgcolor=BACKGROUND,
        meta={"label_step": step},
    )
    return go.Figure({"data": traces, "layout": layout})


def zoom_window(trace: LongTrace, query_start: int, key_start: int) -> tuple[slice, slice]:
    """The (queries, keys) slices of the full-resolution block: MAX_CELLS_PER_SIDE positions a side (fewer if the
    input is shorter), moved inside the input when a start is too close to its end."""
    _, T, S = trace.shape
    q0 = min(max(0, query_start), max(0, T - MAX_CELLS_PER_SIDE))
    k0 = min(max(0, key_start), max(0, S - MAX_CELLS_PER_SIDE))
    return slice(q0, min(T, q0 + MAX_CELLS_PER_SIDE)), slice(k0, min(S, k0 + MAX_CELLS_PER_SIDE))


def long_heads_figure(
    trace: LongTrace,
    heads: Sequence[int] | None = None,
    *,
    zoom: tuple[int, int] | None = None,
    mark: tuple[int, int] | None = None,
    cols: int | None = None,
    cell_px: int | None = None,
    compact: bool = False,
    width: int | None = None,
) -> go.Figure:
    """The heads of a LongTrace (mha_viz.long), on one shared colour axis.

    zoom None: the overview, each cell the largest weight in a block of positions (trace.overview);
    mark=(query start, key start) outlines the zoom window on it. zoom=(query start, key start): the
    block of zoom_window() at full resolution, each cell one token pair, exact weights computed now.
    """
    H = trace.num_heads
    heads = list(range(H)) if heads is None else list(heads)
    if not heads or any(not 0 <= h < H for h in heads):
        raise ValueError(f"pick heads from 0 to {H - 1}")
    labels = [f"head {h}" for h in heads]
    if zoom is None:
        fig = heads_grid(trace.overview[heads], (trace.block_rows, trace.block_cols), trace.query_tokens,
                         trace.key_tokens, labels, cols=cols, cell_px=cell_px, compact=compact, square=True,
                         width=width)
        if mark is not None:
            rows, keys = zoom_window(trace, *mark)
            box = {"type": "rect", "x0": keys.start - 0.5, "x1": keys.stop - 0.5, "y0": rows.start - 0.5,
                   "y1": rows.stop - 0.5, "line": {"color": "#d62728", "width": 1.5}}
            fig.layout.shapes = [{**box, "xref": t.xaxis, "yref": t.yaxis} for t in fig.data]
        return fig
    rows, keys = zoom_window(trace, *zoom)
    block = trace.weights(rows, keys)[heads]  # (n, r, c)
    return heads_grid(block, (1, 1), trace.query_tokens[rows], trace.key_tokens[keys], labels,
                      offset=(rows.start, keys.start), cols=cols, cell_px=cell_px, compact=compact, square=True,
                      width=width)
