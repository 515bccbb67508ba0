"""One head, step by step: Q and K, scaled scores with the mask, softmax, V, head output."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..trace import AttentionTrace
from .common import f32, index_axis, symmetric_range, token_axis


def head_steps_figure(trace: AttentionTrace, head: int) -> go.Figure:
    """Six panels for head h: Q [T,d_k], K [S,d_k], scores [T,S], weights [T,S], V [S,d_v], output [T,d_v].

    Vectors share one diverging colour axis, scores another (masked cells are blank), weights a
    third from 0 to 1.
    """
    if not 0 <= head < trace.num_heads:
        raise ValueError(f"no head {head}: this layer has heads 0..{trace.num_heads - 1}")
    missing = [n for n in ("queries", "keys", "values", "scores", "head_outputs") if getattr(trace, n) is None]
    if missing:
        raise ValueError(f"step-by-step view needs {', '.join(missing)}: {trace.meta.get('unavailable', '')}")
    T, S = trace.weights.shape[1:]
    q, k, v = trace.queries[head], trace.keys[head], trace.values[head]  # (T, d_k), (S, d_k), (S, d_v)
    scores, weights, out = trace.scores[head], trace.weights[head], trace.head_outputs[head]  # (T,S) (T,S) (T,d_v)
    scale = f"/√{trace.d_k}" if trace.meta.get("scaled", True) else ""
    titles = (
        f"Q = x W_Q  [{T}×{trace.d_k}]",
        f"K = c W_K  [{S}×{trace.d_k}]",
        f"scores = Q Kᵀ{scale}  [{T}×{S}]" + ("  (masked: blank)" if trace.causal else ""),
        f"weights = softmax(scores)  [{T}×{S}]",
        f"V = c W_V  [{S}×{trace.d_v}]",
        f"head output = weights · V  [{T}×{trace.d_v}]",
    )
    fig = make_subplots(rows=2, cols=3, subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.16)
    panels = (
        (1, 1, q, trace.query_tokens, "vectors", "value"),
        (1, 2, k, trace.key_tokens, "vectors", "value"),
        (1, 3, scores, trace.query_tokens, "scores", "score"),
        (2, 1, weights, trace.query_tokens, "weights", "weight"),
        (2, 2, v, trace.key_tokens, "vectors", "value"),
        (2, 3, out, trace.query_tokens, "vectors", "value"),
    )
    axis_of = {"vectors": "coloraxis", "scores": "coloraxis2", "weights": "coloraxis3"}
    for r, c, z, row_tokens, kind, name in panels:
        fig.add_trace(
            go.Heatmap(
                z=f32(z),
                coloraxis=axis_of[kind],
                hovertemplate=f"row %{{y}}, col %{{x}}<br>{name} %{{z:.3f}}<extra></extra>",
            ),
            row=r,
            col=c,
        )
        fig.update_yaxes(token_axis(row_tokens), autorange="reversed", row=r, col=c)
        is_attention = kind in ("scores", "weights")
        fig.update_xaxes(
            token_axis(trace.key_tokens) if is_attention else index_axis(z.shape[1], "dimension"),
            tickangle=-60 if is_attention else 0,
            row=r,
            col=c,
        )
    vec = symmetric_range(q, k, v, out)
    sc = symmetric_range(scores)
    fig.update_layout(
        coloraxis={"colorscale": "RdBu", "cmid": 0, "cmin": -vec, "cmax": vec, "colorbar": {"title": {"text": "Q,K,V,out"}, "x": 1.02, "len": 0.3, "y": 0.85}},
        coloraxis2={"colorscale": "PuOr", "cmin": -sc, "cmax": sc, "colorbar": {"title": {"text": "score"}, "x": 1.02, "len": 0.3, "y": 0.5}},
        coloraxis3={"colorscale": "Blues", "cmin": 0, "cmax": 1, "colorbar": {"title": {"text": "weight"}, "x": 1.02, "len": 0.3, "y": 0.15}},
        height=760,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        plot_bgcolor="#eeeeee",
    )
    return fig
