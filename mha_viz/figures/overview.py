"""Layers x heads overview: one small heatmap per (layer, head)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import f32, max_pool

MAX_CELLS_PER_SIDE = 32  # larger matrices are max-pooled down to this for the thumbnails


def overview_figure(attentions: np.ndarray, *, selected: tuple[int, int] | None = None) -> go.Figure:
    """attentions [L, H, T, S] as an L x H grid of thumbnails on one colour scale."""
    L, H = attentions.shape[:2]
    small, _, _ = max_pool(f32(attentions), MAX_CELLS_PER_SIDE)  # (L, H, t, s)
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
