"""Composition between heads as a heatmap: rows the heads that write, columns the later heads that read
(mha_viz.analysis.composition)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..analysis.composition import KIND_NAMES
from .common import NARROW_PX, WIDE_PX, f32, title_block, token_axis

READS = {"q": "queries", "k": "keys", "v": "values"}
MAX_TEXT_CELLS = 256  # values printed in the cells up to this many cells
COLOUR_BAR_PX = 90
TICK_PX = 17  # the least room per labelled head on an axis (12 px labels, slanted on the x axis past 12 heads)


def composition_figure(scores: np.ndarray, baseline: float, kind: str, *, title: str | None = None,
                       width: int | None = None, marked: tuple[tuple[int, int], tuple[int, int]] | None = None
                       ) -> go.Figure:
    """scores [L, H, L, H] (mha_viz.analysis.composition_scores) as one heatmap: a row per head of layers 0..L-2
    (the writer), a column per head of layers 1..L-1 (the reader), labelled "layer.head"; pairs whose reader is not
    in a later layer are left blank. baseline: the score of random matrices of the same shapes, marked on the
    colour bar. width: the px the figure is drawn at (below NARROW_PX the colour bar goes under the heatmap).
    marked: ((writer layer, head), (reader layer, head)), a pair outlined (the open head and what it reads most)."""
    L, H = scores.shape[:2]
    if scores.shape != (L, H, L, H) or L < 2:
        raise ValueError(f"scores must be [layers, heads, layers, heads] with 2 or more layers, not {scores.shape}")
    kind_name = KIND_NAMES[kind]
    grid = np.asarray(scores, dtype=np.float64)[:-1, :, 1:, :].reshape((L - 1) * H, (L - 1) * H)
    writer_layer = np.repeat(np.arange(L - 1), H)
    reader_layer = np.repeat(np.arange(1, L), H)
    grid = np.where(reader_layer[None, :] > writer_layer[:, None], grid, np.nan)
    rows = [f"{layer}.{h}" for layer in range(L - 1) for h in range(H)]
    cols = [f"{layer}.{h}" for layer in range(1, L) for h in range(H)]
    width = width or WIDE_PX
    compact = width < NARROW_PX
    n = len(rows)
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
    cmax = max(top, 1.5 * baseline, 1e-9)
    bar_title = f"score<br>(random: {baseline:.3f})"
    colorbar = {"title": {"text": bar_title}, "tickmode": "array",
                "tickvals": [0.0, baseline, cmax], "ticktext": ["0", f"random {baseline:.2f}", f"{cmax:.2f}"]}
    bar_px = 0
    if compact:
        bar_px = 70
        colorbar.update(orientation="h", x=0.0, xanchor="left", y=0, yanchor="bottom", yref="container",
                        thickness=10, lenmode="pixels", len=int(min(320, 0.8 * width) - 50),
                        title={"text": ""})  # a phone's bar has no room for a title: the caption names the score
    text = np.where(np.isfinite(grid), np.round(grid, 2), np.nan) if n * n <= MAX_TEXT_CELLS else None
    heatmap = go.Heatmap(
        z=f32(grid), zmin=0.0, zmax=cmax, colorscale="Blues", colorbar=colorbar, name=kind_name,
        text=text, texttemplate="%{text}" if text is not None else None,
        hovertemplate="head %{customdata[0]} writes, head %{customdata[1]} reads it in its " + READS[kind]
                      + "<br>" + kind_name + " %{z:.3f}<extra></extra>",
        customdata=np.dstack(np.meshgrid(cols, rows)[::-1]).tolist(),
    )
    fig = go.Figure(heatmap)
    for layer in range(1, L - 1):  # lines between layers
        at = layer * H - 0.5
        fig.add_shape(type="line", x0=at, x1=at, y0=-0.5, y1=n - 0.5, line={"color": "#555", "width": 1})
        fig.add_shape(type="line", y0=at, y1=at, x0=-0.5, x1=n - 0.5, line={"color": "#555", "width": 1})
    if marked is not None and marked[1][0] > marked[0][0]:
        x, y = (marked[1][0] - 1) * H + marked[1][1], marked[0][0] * H + marked[0][1]
        fig.add_shape(type="rect", x0=x - 0.5, x1=x + 0.5, y0=y - 0.5, y1=y + 0.5,
                      line={"color": "#d62728", "width": 3}, name="open pair")
    left_px, bottom_px = 70, 60 + bar_px
    title_layout, top_px = title_block(title, width - 20, below_px=8)  # the first row's label reaches above the plot
    side = max(120, min(width - left_px - 10 - (0 if compact else COLOUR_BAR_PX), 640))
    ticks = max(2, int(side // TICK_PX))
    fig.update_layout(
        title=title_layout, height=int(side + top_px + bottom_px), dragmode=False, hovermode="closest",
        margin={"l": left_px, "r": 10, "t": top_px, "b": bottom_px}, plot_bgcolor="#eeeeee",
        xaxis={**token_axis(cols, "reading head (layer.head)", max_ticks=ticks), "range": [-0.5, n - 0.5],
               "constrain": "domain",
               "fixedrange": True, "tickangle": -60 if n > 12 else 0},
        yaxis={**token_axis(rows, "writing head (layer.head)", max_ticks=ticks), "range": [n - 0.5, -0.5],
               "constrain": "domain",
               "scaleanchor": "x", "fixedrange": True},
    )
    return fig
