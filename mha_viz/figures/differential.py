"""Differential attention's two maps and what their difference cancels (mha_viz.analysis.differential)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..analysis.differential import CommonMode
from ..trace import AttentionTrace
from .common import WIDE_PX, f32, max_pool, text_px, title_block, token_axis, token_tickangle
from .heads import MAX_CELLS_PER_SIDE, SIGNED_COLORSCALE, heads_grid

CANCELLED, KEPT, NEGATIVE = "#9e9e9e", "#2166ac", "#b2182b"  # grey: removed; RdBu's blue and red ends


def legend_px(names: list[str], width: int) -> int:
    """The px a horizontal legend of these entries takes above a plot width px wide: Plotly puts as many entries a
    row as fit (each its symbol, its text and a gap), and wraps the rest to further rows of 28 px."""
    entry = max(40 + text_px(name) + 12 for name in names)
    return 28 * -(-len(names) // max(1, int((width - 20) // entry))) + 6


def two_maps_figure(trace: AttentionTrace, head: int, *, width: int | None = None,
                    compact: bool = False) -> go.Figure:
    """One differential head: map₁, λ·map₂ and map₁ − λ·map₂ (its weights) side by side on one signed scale
    centred at 0 (RdBu: blue above 0, red below), so the difference reads as panel 1 minus panel 2."""
    if trace.maps is None or trace.lambdas is None:
        raise ValueError("this trace is not differential attention: it has one softmax map a head")
    n = trace.weights.shape[0]
    if not 0 <= head < n:
        raise ValueError(f"no head {head}: this layer has differential heads 0..{n - 1}")
    lam = float(trace.lambdas[head])
    panels = np.stack([trace.maps[0, head], lam * trace.maps[1, head], trace.weights[head]])  # (3, T, S)
    shown, bt, bs = max_pool(f32(panels), MAX_CELLS_PER_SIDE)
    labels = ["map₁ = softmax(Q₁K₁ᵀ/√d)", f"λ·map₂ (λ = {lam:.3f})", "map₁ − λ·map₂ (the weights)"]
    fig = heads_grid(shown, (bt, bs), trace.query_tokens, trace.key_tokens, labels, cols=3, value_name="value",
                     title=f"Differential head {head}: two softmax maps and their difference", compact=compact,
                     width=width)
    finite = shown[np.isfinite(shown)]
    top = max(float(np.abs(finite).max()) if finite.size else 1.0, 1e-9)
    fig.update_layout(coloraxis={"colorscale": SIGNED_COLORSCALE, "cmin": -top, "cmax": top})
    return fig


def common_mode_figure(cm: CommonMode, *, width: int | None = None) -> go.Figure:
    """Per differential head, map₁'s unit of mass split into what the subtraction cancels (both maps on the same
    keys) and what it keeps, with the negative weight (where λ·map₂ is larger) below 0."""
    heads = [f"head {h}" for h in range(len(cm.common))]
    bars = [("cancelled: both maps on the same keys", cm.common, CANCELLED),
            ("kept: positive weight", cm.kept, KEPT),
            ("negative weight: λ·map₂ larger", -cm.negative, NEGATIVE)]
    width = width or WIDE_PX
    title, top = title_block("Common mode per head: what map₁ − λ·map₂ cancels (mean over queries)", width - 20,
                             below_px=legend_px([name for name, _, _ in bars], width))
    fig = go.Figure([go.Bar(name=name, x=heads, y=f32(values), marker_color=colour,
                            hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>")
                     for name, values, colour in bars])
    fig.update_layout(barmode="relative", title=title, height=top + 300,
                      margin={"l": 60, "r": 10, "t": top, "b": 40},
                      yaxis={"title": {"text": "attention mass"}, "zeroline": True},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})
    return fig


def cancelled_keys_figure(cm: CommonMode, head: int, key_tokens: tuple[str, ...], *,
                          width: int | None = None) -> go.Figure:
    """For one head, per key (mean over queries): map₁'s mass, the part cancelled, and the weight left."""
    width = width or WIDE_PX
    x = list(range(len(key_tokens)))
    series = [("map₁", cm.map1_keys[head], "#92c5de"), ("cancelled", cm.common_keys[head], CANCELLED),
              ("map₁ − λ·map₂", cm.weight_keys[head], KEPT)]
    title, top = title_block(f"Head {head}: where the cancelled attention sat, per key", width - 20,
                             below_px=legend_px([name for name, _, _ in series], width))
    fig = go.Figure([go.Bar(name=name, x=x, y=f32(values), marker_color=colour,
                            hovertemplate="key %{x}: %{y:.3f}<extra>" + name + "</extra>")
                     for name, values, colour in series])
    axis = {**token_axis(key_tokens), "title": {"text": "key"}}
    axis["tickangle"] = token_tickangle(axis["ticktext"], width)
    fig.update_layout(barmode="group", title=title, height=top + 320, xaxis=axis,
                      yaxis={"title": {"text": "mean over queries"}, "zeroline": True},
                      margin={"l": 60, "r": 10, "t": top, "b": 80},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})
    return fig
