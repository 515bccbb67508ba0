"""Layers x heads overview: one small heatmap per (layer, head)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import f32

MAX_CELLS_PER_SIDE = 32  # larger matrices are average-pooled down to this for the thumbnails


def pool(a: np.ndarray, side: int = MAX_CELLS_PER_SIDE) -> np.ndarray:
    """Average-pool the last two axes so that neither exceeds `side` (blocks of ceil(n/side))."""
    *lead, T, S = a.shape
    bt, bs = -(-T // side), -(-S // side)
    if bt == bs == 1:
        return a
    pad = np.full((*lead, -(-T // bt) * bt, -(-S // bs) * bs), np.nan, dtype=np.float64)
    pad[..., :T, :S] = a
    blocks = pad.reshape(*lead, pad.shape[-2] // bt, bt, pad.shape[-1] // bs, bs)
    return np.nanmean(blocks, axis=(-3, -1))


def overview_figure(attentions: np.ndarray, *, selected: tuple[int, int] | None = None) -> go.Figure:
    """attentions [L, H, T, S] as an L x H grid of thumbnails on one colour scale."""
    L, H = attentions.shape[:2]
    small = f32(pool(attentions))  # (L, H, t, s)
    fig = make_subplots(
        rows=L, cols=H, horizontal_spacing=0.004, vertical_spacing=0.01,
        row_titles=[f"L{layer}" for layer in range(L)], column_titles=[f"H{h}" for h in range(H)],
    )
    for layer in range(L):
        for h in range(H):
            fig.add_trace(
                go.Heatmap(z=small[layer, h], coloraxis="coloraxis", name=f"layer {layer} head {h}",
                           hovertemplate="%{fullData.name}<br>weight %{z:.2f}<extra></extra>"),
                row=layer + 1, col=h + 1,
            )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    if selected is not None:
        layer, h = selected
        fig.update_xaxes(showline=True, linecolor="crimson", linewidth=3, mirror=True, row=layer + 1, col=h + 1)
        fig.update_yaxes(showline=True, linecolor="crimson", linewidth=3, mirror=True, row=layer + 1, col=h + 1)
    fig.update_layout(
        coloraxis={"colorscale": "Blues", "cmin": 0, "cmax": float(np.nanmax(small)) or 1.0, "showscale": False},
        height=max(260, 62 * L + 60),
        margin={"l": 10, "r": 30, "t": 30, "b": 10},
    )
    return fig
