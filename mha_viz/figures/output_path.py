"""The path after the heads: concat [T, H*d_v] -> W_O [d_out, H*d_v] -> output [T, d_out].

    output = concat @ W_O^T + b_O = sum_h head_h @ W_O^(h)T + b_O
where W_O^(h) = W_O[:, h*d_v:(h+1)*d_v] is head h's column block.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..trace import AttentionTrace
from .common import f32, index_axis, symmetric_range, token_axis

HEAD_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _head_block_shapes(H: int, d_v: int, n_rows: int, axis: str) -> list[dict]:
    """Dashed separators between head blocks and a coloured band above each block, on subplot axes x<axis>/y<axis>
    (plain dicts, set once: add_shape per block re-validates the layout and took ~0.6 s at 16 heads)."""
    shapes = []
    for h in range(H):
        if h:
            shapes.append({"type": "line", "x0": h * d_v - 0.5, "x1": h * d_v - 0.5, "xref": f"x{axis}",
                           "y0": 0, "y1": 1, "yref": f"y{axis} domain",
                           "line": {"color": "black", "width": 1, "dash": "dot"}})
        shapes.append({"type": "rect", "x0": h * d_v - 0.5, "x1": (h + 1) * d_v - 0.5, "xref": f"x{axis}",
                       "y0": -0.5 - n_rows * 0.06, "y1": -0.5, "yref": f"y{axis}",
                       "fillcolor": HEAD_COLOURS[h % len(HEAD_COLOURS)], "line": {"width": 0}})
    return shapes


def output_path_figure(trace: AttentionTrace) -> go.Figure:
    """Concat (head blocks marked), W_O (same blocks), and the output after W_O."""
    concat, W_O, output = trace.require("concat"), trace.require("W_O"), trace.require("output")
    H, d_v, T = trace.num_heads, trace.d_v, concat.shape[0]
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.4, 0.4, 0.2],
        horizontal_spacing=0.07,
        subplot_titles=(
            f"concat(head_0 … head_{H - 1})  [{T}×{H * d_v}]  (before W_O)",
            f"W_O  [{trace.d_out}×{H * d_v}]",
            f"output = concat · W_Oᵀ + b  [{T}×{trace.d_out}]",
        ),
    )
    head_of = np.repeat(np.arange(H), d_v)  # (H*d_v,) which head each concat column came from
    fig.add_trace(
        go.Heatmap(z=f32(concat), coloraxis="coloraxis", customdata=np.broadcast_to(head_of, concat.shape),
                   hovertemplate="token %{y}, column %{x} (head %{customdata})<br>%{z:.3f}<extra>concat</extra>"),
        row=1, col=1,
    )
    fig.add_trace(
        go.Heatmap(z=f32(W_O), coloraxis="coloraxis2", customdata=np.broadcast_to(head_of, W_O.shape),
                   hovertemplate="out dim %{y}, column %{x} (head %{customdata})<br>%{z:.3f}<extra>W_O</extra>"),
        row=1, col=2,
    )
    fig.add_trace(
        go.Heatmap(z=f32(output), coloraxis="coloraxis",
                   hovertemplate="token %{y}, out dim %{x}<br>%{z:.3f}<extra>output</extra>"),
        row=1, col=3,
    )
    fig.update_layout(shapes=_head_block_shapes(H, d_v, T, "") + _head_block_shapes(H, d_v, trace.d_out, "2"))
    fig.update_yaxes(token_axis(trace.query_tokens), autorange="reversed", row=1, col=1)
    fig.update_yaxes(index_axis(trace.d_out, "output dim"), autorange="reversed", row=1, col=2)
    fig.update_yaxes(token_axis(trace.query_tokens), autorange="reversed", row=1, col=3)
    fig.update_xaxes(index_axis(H * d_v, "concat column (head block)"), row=1, col=1)
    fig.update_xaxes(index_axis(H * d_v, "concat column (head block)"), row=1, col=2)
    fig.update_xaxes(index_axis(trace.d_out, "output dim"), row=1, col=3)
    act = symmetric_range(concat, output)
    w = symmetric_range(W_O)
    fig.update_layout(
        coloraxis={"colorscale": "RdBu", "cmin": -act, "cmax": act, "colorbar": {"title": {"text": "activation"}, "x": 1.0, "len": 0.45, "y": 0.75}},
        coloraxis2={"colorscale": "PiYG", "cmin": -w, "cmax": w, "colorbar": {"title": {"text": "W_O"}, "x": 1.0, "len": 0.45, "y": 0.25}},
        height=max(360, min(700, 14 * max(T, 24) + 140)),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    return fig


def contributions_figure(trace: AttentionTrace) -> go.Figure:
    """||head_h @ W_O^(h)T|| for every head and query token: how much each head adds to the output."""
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
    fig.update_xaxes(token_axis(trace.query_tokens, "query token"), tickangle=-60)
    fig.update_yaxes(
        {"tickmode": "array", "tickvals": list(range(H)), "ticktext": [f"head {h}" for h in range(H)]},
        autorange="reversed",
    )
    fig.update_layout(
        title={"text": "Each head's contribution to the output after W_O (vector norm per token)"},
        height=max(220, 26 * H + 140),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig
