"""Mixture-of-heads (MoH) figures: the router's gates per head and token, how often each head is used, and the gated
concat before W_O (numpy in, plotly Figure out)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (
    WIDE_PX,
    f32,
    index_axis,
    symmetric_range,
    text_px,
    title_block,
    token_axis,
    token_label,
    token_tickangle,
)

SHARED_COLOUR, ROUTED_COLOUR, UNUSED_COLOUR = "#ff7f0e", "#1f77b4", "#d9d9d9"


def moh_head_labels(H: int, shared: int) -> list[str]:
    """'head 0 · shared' for the shared heads, 'head 3' for the routed ones."""
    return [f"head {h}" + (" · shared" if h < shared else "") for h in range(H)]


def _check(gates: np.ndarray, picked: np.ndarray, tokens: Sequence[str]) -> tuple[int, int]:
    if gates.ndim != 2 or picked.shape != gates.shape or gates.shape[1] != len(tokens):
        raise ValueError(f"gates and picked must be [heads, tokens] for {len(tokens)} tokens: {gates.shape}, "
                         f"{picked.shape}")
    return gates.shape


def router_figure(gates: np.ndarray, picked: np.ndarray, shared: int, tokens: Sequence[str], *, k: int,
                  width: int | None = None) -> go.Figure:
    """A [head x token] heatmap of the gates g[h, t]; a ring marks each token's top-k routed heads, the shared heads'
    rows are labelled. A blank (0) cell: the token does not use the head."""
    H, T = _check(gates, picked, tokens)
    width = width or WIDE_PX
    labels = moh_head_labels(H, shared)
    fig = go.Figure(go.Heatmap(z=f32(gates), zmin=0.0, zmax=max(float(gates.max()), 1e-9), colorscale="Blues",
                               colorbar={"title": {"text": "gate"}},
                               hovertemplate="%{y}, token %{x}: gate %{z:.3f}<extra></extra>"))
    ys, xs = np.nonzero(picked[shared:])
    fig.add_trace(go.Scatter(x=xs, y=ys + shared, mode="markers", name=f"picked (top {k})", hoverinfo="skip",
                             marker={"symbol": "circle-open", "size": 10, "color": "#d62728", "line": {"width": 2}}))
    title, top = title_block(f"Router: each token's gate for each head (ringed: its top {k} routed heads"
                             + (f"; heads 0–{shared - 1} shared, used by every token)" if shared > 1 else
                                "; head 0 shared, used by every token)" if shared else ")"), width - 20, below_px=24)
    fig.update_layout(title=title, height=top + max(180, 26 * H) + 90, margin={"l": 10, "r": 10, "t": top, "b": 10},
                      dragmode=False, showlegend=True,
                      legend={"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"})
    ticks = [token_label(t) for t in tokens]
    fig.update_xaxes(**token_axis(tokens, "query token"), range=[-0.5, T - 0.5],
                     tickangle=token_tickangle(ticks, width - 200))
    fig.update_yaxes(**index_axis(H), tickmode="array", tickvals=list(range(H)), ticktext=labels, autorange="reversed")
    return fig


def load_figure(load: np.ndarray, shared: int, *, k: int, width: int | None = None) -> go.Figure:
    """One bar a head: the share of tokens that use it (shared heads: all of them). The routed heads share k per
    token, so their bars sum to k; an even load would give each routed head k / (h - shared)."""
    H = load.shape[0]
    width = width or WIDE_PX
    labels = moh_head_labels(H, shared)
    fig = go.Figure(go.Bar(x=labels, y=f32(load), marker_color=[SHARED_COLOUR if h < shared else ROUTED_COLOUR
                                                                 for h in range(H)],
                           text=[f"{v:.0%}" for v in load], textposition="auto",
                           hovertemplate="%{x}: used by %{y:.0%} of the tokens<extra></extra>"))
    even = k / (H - shared)
    fig.add_hline(y=even, line={"dash": "dot", "color": "black"})
    title, top = title_block(f"Load: the share of tokens that use each head (dotted: an even load, top {k} of "
                             f"{H - shared} routed heads = {even:.0%})", width - 20)
    longest = text_px(max(labels, key=len))
    upright = len(labels) * (longest + 8) > width - 40  # labels that do not fit side by side stand upright (Plotly's
    # slant ran the first into the y axis' "0%")
    below = int(longest) if upright else 0
    fig.update_layout(title=title, height=top + 260 + below, margin={"l": 10, "r": 10, "t": top, "b": 10},
                      dragmode=False, showlegend=False)
    fig.update_xaxes(tickangle=-90 if upright else 0)
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", title={"text": "tokens"})
    return fig


def gated_concat_figure(concat: np.ndarray, gates: np.ndarray, tokens: Sequence[str], *, shared: int,
                        width: int | None = None) -> go.Figure:
    """The gated concat [token x H*d_v] that W_O receives, on a signed scale; the block of a head a token does not use
    (gate 0) is grey: it is all zeros and adds nothing to that token's output."""
    H, T = gates.shape
    if concat.shape[0] != T or concat.shape[1] % H:
        raise ValueError(f"concat {concat.shape} does not hold {H} head blocks for {T} tokens")
    d_v = concat.shape[1] // H
    width = width or WIDE_PX
    z = f32(concat)
    z[np.repeat(gates.T == 0, d_v, axis=1)] = np.nan  # (T, H*d_v): unused blocks as gaps on the grey background
    m = symmetric_range(concat)
    fig = go.Figure(go.Heatmap(z=z, zmid=0, zmin=-m, zmax=m, colorscale="RdBu", colorbar={"title": {"text": "value"}},
                               hovertemplate="token %{y}, column %{x}: %{z:.3f}<extra></extra>"))
    labels = moh_head_labels(H, shared)
    shapes = [{"type": "line", "x0": h * d_v - 0.5, "x1": h * d_v - 0.5, "xref": "x", "y0": 0, "y1": 1,
               "yref": "y domain", "line": {"color": "black", "width": 1, "dash": "dot"}} for h in range(1, H)]
    title, top = title_block("Gated concat g·head_0 | … | g·head_{H−1} before W_O; grey: a head the token does not "
                             "use (its block is 0)".replace("{H−1}", str(H - 1)), width - 20)
    fig.update_layout(title=title, shapes=shapes, plot_bgcolor=UNUSED_COLOUR, dragmode=False,
                      height=top + max(200, min(18 * T, 520)) + 90, margin={"l": 10, "r": 10, "t": top, "b": 10})
    fig.update_xaxes(tickmode="array", tickvals=[h * d_v + (d_v - 1) / 2 for h in range(H)], ticktext=labels,
                     range=[-0.5, H * d_v - 0.5], showgrid=False, zeroline=False, title={"text": "concat column"})
    fig.update_yaxes(**token_axis(tokens, "query token"), range=[T - 0.5, -0.5])
    return fig
