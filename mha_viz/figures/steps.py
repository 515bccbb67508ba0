"""One head, step by step: Q and K, scaled scores with the mask, softmax, V, head output; its
projection matrices W_Q, W_K, W_V; why one score has its value (q ⊙ k per dimension); and, where the
model adds to its scores (position bias, ALiBi, DeBERTa's position terms), each part of one query's scores."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.score_terms import score_terms
from ..trace import AttentionTrace
from .common import TOOLBAR_PX, f32, index_axis, symmetric_range, token_axis, token_label, token_tickangle
from .heads import colour_range


def scale_text(trace: AttentionTrace) -> str:
    """How the scores scale Q Kᵀ, as text: "/√16", "" for no scaling, or "·0.125" for another factor."""
    scale = trace.score_scale
    if abs(scale - trace.d_k**-0.5) <= 1e-6 * scale:
        return f"/√{trace.d_k}"
    return "" if scale == 1.0 else f"·{scale:.4g}"


def scores_formula(trace: AttentionTrace) -> str:
    """The scores of this trace as a short formula: "Q Kᵀ/√16", "Q Kᵀ/√8 + ALiBi", "Q Kᵀ·0.2041 + 2 terms",
    "c·tanh(Q Kᵀ·0.3536 / c)" (soft-capping)."""
    names = " + ".join(trace.score_bias)
    added = "" if not names else f" + {names}" if len(names) <= 16 else f" + {len(trace.score_bias)} terms"
    logit = f"Q Kᵀ{scale_text(trace)}{added}"
    return logit if trace.softcap is None else f"c·tanh(({logit}) / c)"


def head_output_formula(trace: AttentionTrace) -> str:
    """How a head's output comes from its weights and V: "weights · V", or with the norm the model puts on each head
    (DiffLlama: "(1 − λ_init)·RMSNorm(weights · V)", from trace.meta["head_norm"])."""
    norm = trace.meta.get("head_norm")
    if not norm:
        return "weights · V"
    return str(norm).replace("(1 - lambda_init) ", "(1 − λ_init)·").replace("weights @ values", "weights · V")


def head_steps_figure(trace: AttentionTrace, head: int, *, compact: bool = False) -> go.Figure:
    """Six panels for head h: Q [T,d_k], K [S,d_k], scores [T,S], weights [T,S], V [S,d_v], output [T,d_v].

    Vectors share one diverging colour axis, scores another (masked cells are blank), weights a
    third from 0 to 1. compact: two panels a row (for a phone) instead of three.
    """
    if not 0 <= head < trace.num_heads:
        raise ValueError(f"no head {head}: this layer has heads 0..{trace.num_heads - 1}")
    missing = [n for n in ("queries", "keys", "values", "scores", "head_outputs") if getattr(trace, n) is None]
    if missing:
        raise ValueError(f"step-by-step view needs {', '.join(missing)}: {trace.meta.get('unavailable', '')}")
    T, S = trace.weights.shape[1:]
    q, k, v = trace.queries[head], trace.keys[head], trace.values[head]  # (T, d_k), (S, d_k), (S, d_v)
    scores, weights, out = trace.scores[head], trace.weights[head], trace.head_outputs[head]  # (T,S) (T,S) (T,d_v)
    c = "C" if trace.cross else "X"
    titles = (
        f"Q = X W_Q  [{T}×{trace.d_k}]",
        f"K = {c} W_K  [{S}×{trace.d_k}]",
        f"scores = {scores_formula(trace)}  [{T}×{S}]" + ("  (masked: blank)" if trace.causal else ""),
        (f"weights = softmax(scores)  [{T}×{S}]" if trace.lambdas is None  # differential: map₁ is softmax(scores)
         else f"weights = map₁ − λ·map₂, λ = {trace.lambdas[head]:.3f}  [{T}×{S}]"),
        f"V = {c} W_V  [{S}×{trace.d_v}]",
        f"head output = {head_output_formula(trace)}" + ("  " if not trace.meta.get("head_norm") else "<br>")
        + f"[{T}×{trace.d_v}]",
    )
    cols = 2 if compact else 3
    if compact:  # short titles: the shapes do not fit beside them on a phone
        short = [t.split("  ")[0] for t in titles]  # "Q = X W_Q", ...
        titles = (short[0], short[1], "scores", "weights", short[4], "head output")
    fig = make_subplots(rows=6 // cols, cols=cols, subplot_titles=titles, horizontal_spacing=0.12 if compact else 0.08,
                        vertical_spacing=0.12 if compact else 0.16)
    grid = [divmod(i, cols) for i in range(6)]
    panels = tuple((r + 1, c + 1, *rest) for (r, c), rest in zip(grid, (
        (q, trace.query_tokens, "vectors", "value"),
        (k, trace.key_tokens, "vectors", "value"),
        (scores, trace.query_tokens, "scores", "score"),
        (weights, trace.query_tokens, "weights", "weight"),
        (v, trace.key_tokens, "vectors", "value"),
        (out, trace.query_tokens, "vectors", "value"),
    ), strict=True))
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
            tickangle=token_tickangle(trace.key_tokens) if is_attention else 0,
            row=r,
            col=c,
        )
    vec = symmetric_range(q, k, v, out)
    sc = symmetric_range(scores)
    # 0..1, or centred at 0 for differential attention's signed map1 - lambda * map2
    weight_range = colour_range(f32(weights)) if np.nanmin(weights) < 0 else {"colorscale": "Blues", "cmin": 0, "cmax": 1}
    fig.update_layout(
        coloraxis={"colorscale": "RdBu", "cmid": 0, "cmin": -vec, "cmax": vec, "colorbar": {"title": {"text": "Q,K,V,out"}, "x": 1.02, "len": 0.3, "y": 0.85}},
        coloraxis2={"colorscale": "PuOr", "cmin": -sc, "cmax": sc, "colorbar": {"title": {"text": "score"}, "x": 1.02, "len": 0.3, "y": 0.5}},
        coloraxis3={**weight_range, "colorbar": {"title": {"text": "weight"}, "x": 1.02, "len": 0.3, "y": 0.15}},
        height=1240 if compact else 776,
        margin={"l": 10, "r": 10, "t": TOOLBAR_PX + 24, "b": 10},  # the panel titles under the toolbar
        plot_bgcolor="#eeeeee",
    )
    if compact:  # colour bars under the panels, not beside them
        for i, name in enumerate(("coloraxis", "coloraxis2", "coloraxis3")):
            fig.layout[name].colorbar.update(orientation="h", x=(i + 0.5) / 3, xanchor="center", y=0, yref="container",
                                             yanchor="bottom", len=0.3, thickness=10, title={"side": "top"})
        fig.update_layout(margin={"b": 150})  # the bottom panels' labels, then the bars under them
    return fig


def projections_figure(trace: AttentionTrace, head: int) -> go.Figure:
    """Head h's projection matrices: `W_Q[h] [d_model, d_k]`, `W_K[h]`, `W_V[h] [d_context, d]`, one colour scale.

    Row i of each matrix is what input dimension i adds to every query / key / value dimension.
    """
    if not 0 <= head < trace.num_heads:
        raise ValueError(f"no head {head}: this layer has heads 0..{trace.num_heads - 1}")
    mats = [("W_Q", "Q"), ("W_K", "K"), ("W_V", "V")]
    missing = [name for name, _ in mats if getattr(trace, name) is None]
    if missing:
        raise ValueError(f"this trace does not hold {', '.join(missing)}: {trace.meta.get('unavailable', '')}")
    inputs = ("X", "C" if trace.cross else "X", "C" if trace.cross else "X")
    titles = [f"{name}[{head}]  [{getattr(trace, name).shape[1]}×{getattr(trace, name).shape[2]}]: {x} → {out}"
              for (name, out), x in zip(mats, inputs)]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.06)
    for col, (name, out) in enumerate(mats, start=1):
        W = getattr(trace, name)[head]  # (d_in, d)
        fig.add_trace(go.Heatmap(z=f32(W), coloraxis="coloraxis",
                                 hovertemplate=f"input dim %{{y}} → {out} dim %{{x}}<br>{name} %{{z:.3f}}<extra></extra>"),
                      row=1, col=col)
        fig.update_xaxes(index_axis(W.shape[1], f"{out} dimension"), row=1, col=col)
        fig.update_yaxes(index_axis(W.shape[0], "input dimension" if col == 1 else None), autorange="reversed",
                         row=1, col=col)
    w = symmetric_range(*(getattr(trace, name)[head] for name, _ in mats))
    d_in = max(getattr(trace, name).shape[1] for name, _ in mats)
    fig.update_layout(
        coloraxis={"colorscale": "PiYG", "cmin": -w, "cmax": w, "colorbar": {"title": {"text": "weight"}}},
        height=min(640, max(320, 3 * d_in + 120)), margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    return fig


def score_terms_figure(trace: AttentionTrace, head: int, query: int, key: int) -> go.Figure:
    """For one query and one key of head h: q and k dimension by dimension, and q_d · k_d, which sum to q·k."""
    t = score_terms(trace, head, query, key)
    d = np.arange(len(t.products))
    q_tok, k_tok = token_label(trace.query_tokens[query], 20), token_label(trace.key_tokens[key], 20)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14, subplot_titles=(
        f"q (query {query}: {q_tok}) and k (key {key}: {k_tok}), dimension by dimension",
        f"q_d · k_d: they sum to q·k = {t.dot:.4g}",
    ))
    fig.add_trace(go.Bar(x=d, y=f32(t.q), name="q", marker_color="#1f77b4",
                         hovertemplate="dim %{x}: q = %{y:.3f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=d, y=f32(t.k), name="k", marker_color="#ff7f0e",
                         hovertemplate="dim %{x}: k = %{y:.3f}<extra></extra>"), row=1, col=1)
    colours = np.where(t.products >= 0, "#2ca02c", "#d62728")
    fig.add_trace(go.Bar(x=d, y=f32(t.products), name="q_d · k_d", marker_color=colours.tolist(),
                         hovertemplate="dim %{x}: q·k term %{y:.3f}<extra></extra>"), row=2, col=1)
    fig.update_xaxes(title={"text": "dimension d"}, row=2, col=1)
    fig.update_layout(barmode="group", height=460, margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.08, "xanchor": "right", "x": 1})
    return fig


def score_parts_figure(trace: AttentionTrace, head: int, query: int) -> go.Figure:
    """One query's scores over every key, split into their parts: the content term scale · q·k and each of the
    trace's score_bias terms (stacked bars), and the score itself (after soft-capping; masked keys left out)."""
    if not trace.score_bias and trace.softcap is None:
        raise ValueError("this trace's scores are scale · q·k alone: there are no other parts to show")
    q = trace.require("queries")[head, query].astype(np.float64)  # (d_k,)
    content = trace.score_scale * (trace.require("keys")[head].astype(np.float64) @ q)  # (S,)
    scores = trace.require("scores")[head, query]  # (S,)
    S = len(scores)
    fig = go.Figure()
    parts = {"content: scale · q·k": content, **{name: b[head, query] for name, b in trace.score_bias.items()}}
    for name, values in parts.items():
        fig.add_trace(go.Bar(x=np.arange(S), y=f32(values), name=name,
                             hovertemplate=f"key %{{x}}: {name} %{{y:.3f}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=np.arange(S), y=f32(scores), mode="markers", name="score",
                             marker={"color": "black", "symbol": "diamond", "size": 9},
                             hovertemplate="key %{x}: score %{y:.3f}<extra></extra>"))
    q_tok = token_label(trace.query_tokens[query], 20)
    capped = "" if trace.softcap is None else f", soft-capped: c·tanh(sum / c), c = {trace.softcap:g}"
    fig.update_layout(
        barmode="relative", height=400, margin={"l": 10, "r": 10, "t": 50, "b": 10},
        title={"text": f"The parts of query {query} ({q_tok})'s scores: score = sum of the bars{capped}"},
        xaxis=token_axis(trace.key_tokens), yaxis={"title": {"text": "score part"}},
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0},
    )
    return fig
