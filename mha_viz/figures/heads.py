"""Every head's attention matrix side by side, on one shared colour scale."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..trace import AttentionTrace
from .common import axis_key, f32, max_pool, pair_labels, subplot_grid, token_axis

MAX_CELLS_PER_SIDE = 128  # a longer matrix is drawn max-pooled; `window` shows a region at full resolution


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
) -> go.Figure:
    """One heatmap per head: query tokens as rows, key tokens as columns.

    matrices [H, T, S] replaces trace.weights (e.g. norm-weighted attention); heads picks a subset;
    window=(start, stop) shows only those query and key positions. All heatmaps share one colour
    axis from 0 to the largest value shown. Beyond MAX_CELLS_PER_SIDE positions a side, each cell
    is the maximum over a block of positions (the hover says so).
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
    T, S = data.shape[1:]
    cols = cols or min(len(heads), 4)
    rows = -(-len(heads) // cols)
    labels = [f"head {h}" + (f" (K/V head {trace.kv_heads[h]})" if trace.kv_heads else "") for h in heads]
    per_cell = cell_px or (22 if max(T, S) <= 16 else 12 if max(T, S) <= 48 else 4 if max(T, S) <= 160 else 1)
    panel = min(420, max(180, per_cell * max(T, S) + 60))  # px per heatmap
    # Fixed margins instead of Plotly's automargin, which measures every tick label and then draws
    # the figure a second time; the key-token labels go under the bottom heatmap of each column only.
    x_axis = {**token_axis(k_tokens, offset=k0, max_ticks=max(8, 64 // cols)), "tickangle": -60, "constrain": "domain", "automargin": False}
    y_axis = {**token_axis(q_tokens, offset=q0, max_ticks=max(8, panel // 16)), "autorange": "reversed",
              "constrain": "domain", "automargin": False}  # at most one label per 16 px
    top_px, gap_px = (60 if title else 40), 28  # the gap between rows holds the heads' titles
    bottom_px = 12 + 6 * max((len(t) for t in x_axis["ticktext"]), default=1)  # the -60° key labels
    height = top_px + rows * panel + (rows - 1) * gap_px + bottom_px
    v_gap = gap_px / (height - top_px - bottom_px)
    layout, refs = subplot_grid(rows, cols, titles=labels, h_gap=0.1 / cols if cols > 1 else 0, v_gap=v_gap)

    shown, bt, bs = max_pool(f32(data[heads]), MAX_CELLS_PER_SIDE)  # (n, T/bt, S/bs)
    customdata = pair_labels(q_tokens, k_tokens, copies=len(heads)) if bt == bs == 1 else None
    if customdata is not None:
        hover = "query %{y}: <b>%{customdata[0]}</b><br>key %{x}: <b>%{customdata[1]}</b><br>" + value_name
    elif bt == bs == 1:
        hover = "query %{y} → key %{x}<br>" + value_name
    else:
        hover = f"queries %{{y:.0f}}±{bt // 2} → keys %{{x:.0f}}±{bs // 2}<br>max {value_name} in this {bt}×{bs} block"
    hover += " %{z:.3f}<extra>%{fullData.name}</extra>"
    traces = []
    for i, (h, z) in enumerate(zip(heads, shown, strict=True)):
        xref, yref = refs[i]
        traces.append(
            {"type": "heatmap", "z": z, "x0": k0 + (bs - 1) / 2, "dx": bs, "y0": q0 + (bt - 1) / 2, "dy": bt,
             "customdata": customdata, "hovertemplate": hover, "name": f"head {h}", "coloraxis": "coloraxis",
             "xaxis": xref, "yaxis": yref}
        )
        bottom_of_column = i + cols >= len(heads)
        layout[axis_key(xref)].update(x_axis if bottom_of_column else {**x_axis, "showticklabels": False})
        layout[axis_key(yref)].update(y_axis if i % cols == 0 else {**y_axis, "showticklabels": False})
    top = float(np.nanmax(shown)) if np.isfinite(shown).any() else 1.0
    longest_y = max((len(t) for t in y_axis["ticktext"]), default=1)
    layout.update(
        title={"text": title} if title else None,
        coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": max(top, 1e-9), "colorbar": {"title": {"text": value_name}}},
        height=height,
        margin={"l": 12 + 7 * longest_y, "r": 10, "t": top_px, "b": bottom_px},
        plot_bgcolor="#eeeeee",
    )
    return go.Figure({"data": traces, "layout": layout})
