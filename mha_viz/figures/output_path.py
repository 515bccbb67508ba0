"""The path after the heads: concat [T, H*d_v] -> W_O [d_out, H*d_v] -> output [T, d_out].

    output = concat @ W_O^T + b_O = sum_h head_h @ W_O^(h)T + b_O
where W_O^(h) = W_O[:, h*d_v:(h+1)*d_v] is head h's column block.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..trace import AttentionTrace
from .common import (
    PANEL_TITLE_PX,
    TOOLBAR_PX,
    WIDE_PX,
    ColourRange,
    axis_key,
    f32,
    head_colours,
    index_axis,
    lines_px,
    robust_range,
    text_px,
    title_block,
    token_axis,
    token_label,
    token_tickangle,
    wrap,
)


def _head_block_shapes(H: int, d_v: int, n_rows: int, axis: str) -> list[dict]:
    """Dashed separators between head blocks and a coloured band above each block (a different colour for every
    head), on subplot axes x<axis>/y<axis> (plain dicts, set once: add_shape per block re-validates the layout and
    took ~0.6 s at 16 heads)."""
    colours = head_colours(H)
    shapes = []
    for h in range(H):
        if h:
            shapes.append({"type": "line", "x0": h * d_v - 0.5, "x1": h * d_v - 0.5, "xref": f"x{axis}",
                           "y0": 0, "y1": 1, "yref": f"y{axis} domain",
                           "line": {"color": "black", "width": 1, "dash": "dot"}})
        shapes.append({"type": "rect", "x0": h * d_v - 0.5, "x1": (h + 1) * d_v - 0.5, "xref": f"x{axis}",
                       "y0": -0.5 - n_rows * 0.06, "y1": -0.5, "yref": f"y{axis}",
                       "fillcolor": colours[h], "line": {"width": 0}})
    return shapes


def _output_path_frames(trace: AttentionTrace, width: int) -> tuple[list[tuple[list[float], list[float]]], list[dict],
                                                                      dict]:
    """Where the three panels go: each one's (x domain, y domain), its title annotation, and the layout's height
    and margins. Side by side from 900 px (titles wrapped to their panel), else stacked, each as wide as the figure."""
    H, d_v, T, d_out = trace.num_heads, trace.d_v, trace.concat.shape[0], trace.d_out
    titles = (f"concat(head_0 … head_{H - 1})  [{T}×{H * d_v}]  (before W_O)", f"W_O  [{d_out}×{H * d_v}]",
              f"output = concat · W_Oᵀ + b  [{T}×{d_out}]")
    tokens_px = 14 + text_px(max((token_label(t) for t in trace.query_tokens), key=len, default=""))
    left_px, right_px = tokens_px, 90  # the query labels; the colour bars
    inner = max(100.0, width - left_px - right_px)
    if width >= 900:
        gaps = [60.0, tokens_px + 10]  # W_O's dimension labels and title; the output's token labels
        shares = np.array([0.4, 0.4, 0.2]) * (inner - sum(gaps))
        x0 = np.concatenate([[0.0], np.cumsum(shares[:-1] + gaps)])
        texts = [wrap(t, w, PANEL_TITLE_PX) for t, w in zip(titles, shares)]
        top = TOOLBAR_PX + max(lines_px(t, PANEL_TITLE_PX) for t in texts) + 6
        height = max(360, min(700, 14 * max(T, 24) + 140)) + top - 40
        plot_h = height - top - 60
        frames = [([x / inner, min(1.0, (x + w) / inner)], [0.0, 1.0]) for x, w in zip(x0, shares)]
        anchors = [((a + b) / 2, 1.0) for (a, b), _ in frames]
    else:
        texts = [wrap(t, inner, PANEL_TITLE_PX) for t in titles]
        sizes = [max(120, min(16 * T, 400)), max(140, min(5 * d_out, 320)), max(120, min(16 * T, 400))]
        below = 66  # the x labels and axis title under each panel
        top = TOOLBAR_PX
        plot_h = sum(lines_px(t, PANEL_TITLE_PX) + 6 + h + below for t, h in zip(texts, sizes))
        height = int(top + plot_h + 10)
        frames, anchors, y = [], [], plot_h  # y: px from the bottom of the plotting area
        for text, size in zip(texts, sizes):
            y -= lines_px(text, PANEL_TITLE_PX) + 6
            anchors.append((0.5, y / plot_h))
            frames.append(([0.0, 1.0], [max(0.0, (y - size) / plot_h), min(1.0, y / plot_h)]))
            y -= size + below
    annotations = [{"text": t, "x": x, "y": y, "xref": "paper", "yref": "paper", "xanchor": "center",
                    "yanchor": "bottom", "showarrow": False, "font": {"size": PANEL_TITLE_PX}}
                   for t, (x, y) in zip(texts, anchors)]
    # The activation bar beside concat, W_O's beside W_O; side by side: one above the other.
    bars = [frames[0][1], frames[1][1]] if width < 900 else [[0.55, 1.0], [0.0, 0.45]]
    layout = {"height": int(height), "margin": {"l": 10, "r": 10, "t": int(top), "b": 10},
              "coloraxis_y": sum(bars[0]) / 2, "coloraxis_len": bars[0][1] - bars[0][0],
              "coloraxis2_y": sum(bars[1]) / 2, "coloraxis2_len": bars[1][1] - bars[1][0]}
    return frames, annotations, layout


def output_path_ranges(trace: AttentionTrace) -> tuple[ColourRange, ColourRange]:
    """The colour ranges of output_path_figure: the activations' (concat and output share one) and W_O's, each
    clipped at a percentile when a few outliers would wash out the rest (figures.common.robust_range)."""
    return robust_range(trace.require("concat"), trace.require("output")), robust_range(trace.require("W_O"))


def output_path_figure(trace: AttentionTrace, *, width: int | None = None) -> go.Figure:
    """Concat (head blocks marked), W_O (same blocks), and the output after W_O: side by side on a wide page,
    stacked below 900 px (width: the px the figure is drawn at, default a desktop page's)."""
    concat, W_O, output = trace.require("concat"), trace.require("W_O"), trace.require("output")
    H, d_v, T = trace.num_heads, trace.d_v, concat.shape[0]
    frames, annotations, frame_layout = _output_path_frames(trace, width or WIDE_PX)
    head_of = np.repeat(np.arange(H), d_v)  # (H*d_v,) which head each concat column came from
    refs = [("x", "y"), ("x2", "y2"), ("x3", "y3")]
    data = [
        {"type": "heatmap", "z": f32(concat), "coloraxis": "coloraxis", "customdata": np.broadcast_to(head_of, concat.shape),
         "hovertemplate": "token %{y}, column %{x} (head %{customdata})<br>%{z:.3f}<extra>concat</extra>"},
        {"type": "heatmap", "z": f32(W_O), "coloraxis": "coloraxis2", "customdata": np.broadcast_to(head_of, W_O.shape),
         "hovertemplate": "out dim %{y}, column %{x} (head %{customdata})<br>%{z:.3f}<extra>W_O</extra>"},
        {"type": "heatmap", "z": f32(output), "coloraxis": "coloraxis",
         "hovertemplate": "token %{y}, out dim %{x}<br>%{z:.3f}<extra>output</extra>"},
    ]
    y_axes = [token_axis(trace.query_tokens), index_axis(trace.d_out, "output dim"), token_axis(trace.query_tokens)]
    x_axes = [index_axis(H * d_v, "concat column (head block)"), index_axis(H * d_v, "concat column (head block)"),
              index_axis(trace.d_out, "output dim")]
    act, w = output_path_ranges(trace)
    bar = {"x": 1.0, "thickness": 14}
    layout = {
        "annotations": annotations,
        "shapes": _head_block_shapes(H, d_v, T, "") + _head_block_shapes(H, d_v, trace.d_out, "2"),
        "coloraxis": {"colorscale": "RdBu", "cmin": -act.limit, "cmax": act.limit, "colorbar": {
            **bar, **act.ticks(), "title": {"text": "activation" + ("<br>(clipped)" if act.clipped else "")},
            "y": frame_layout.pop("coloraxis_y"), "len": frame_layout.pop("coloraxis_len")}},
        "coloraxis2": {"colorscale": "PiYG", "cmin": -w.limit, "cmax": w.limit, "colorbar": {
            **bar, **w.ticks(), "title": {"text": "W_O" + ("<br>(clipped)" if w.clipped else "")},
            "y": frame_layout.pop("coloraxis2_y"), "len": frame_layout.pop("coloraxis2_len")}},
        **frame_layout,
    }
    for trace_dict, (xref, yref), (x_domain, y_domain), x_axis, y_axis in zip(data, refs, frames, x_axes, y_axes):
        trace_dict.update(xaxis=xref, yaxis=yref)
        layout[axis_key(xref)] = {**x_axis, "domain": x_domain, "anchor": yref}
        layout[axis_key(yref)] = {**y_axis, "domain": y_domain, "anchor": xref, "autorange": "reversed"}
    return go.Figure({"data": data, "layout": layout})


def contributions_figure(trace: AttentionTrace, *, width: int | None = None) -> go.Figure:
    """||head_h @ W_O^(h)T|| for every head and query token: how much each head adds to the output (width: the px
    the figure is drawn at)."""
    norms = np.linalg.norm(trace.head_contributions(), axis=-1)  # (H, T)
    H = trace.num_heads
    fig = go.Figure(
        go.Heatmap(
            z=f32(norms),
            colorscale="Oranges",
            colorbar={"title": {"text": "‖contribution‖"}},
            hovertemplate="head %{y}, token %{x}<br>‖head_h · W_O^(h)ᵀ‖ = %{z:.3f}<extra></extra>",
        )
    )
    x_axis = token_axis(trace.query_tokens, "query token")
    fig.update_xaxes(x_axis, tickangle=token_tickangle(x_axis["ticktext"]))
    title, top = title_block("Each head's contribution to the output after W_O (vector norm per token)",
                             (width or WIDE_PX) - 20)
    fig.update_yaxes(
        {"tickmode": "array", "tickvals": list(range(H)), "ticktext": [f"head {h}" for h in range(H)]},
        autorange="reversed",
    )
    fig.update_layout(
        title=title,
        height=max(220, 26 * H + 110) + top,
        margin={"l": 10, "r": 10, "t": top, "b": 10},
    )
    return fig
