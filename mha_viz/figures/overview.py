"""Layers x heads overview: one small heatmap per (layer, head); a click on a thumbnail picks that head.

Plotly cannot select points of a heatmap, so each thumbnail carries a 3 x 3 grid of invisible
markers with customdata [layer, head]: a click anywhere on a thumbnail lands on one of them.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..limits import MAX_CLICKED_HEADS, MAX_LAYERS, client_int
from .common import axis_key, f32, max_pool, subplot_grid

MAX_CELLS_PER_SIDE = 32  # larger matrices are max-pooled down to this for the thumbnails


def overview_figure(attentions: np.ndarray, *, selected: tuple[int, int] | None = None) -> go.Figure:
    """attentions [L, H, T, S] as an L x H grid of thumbnails on one colour scale."""
    L, H = attentions.shape[:2]
    small, _, _ = max_pool(f32(attentions), MAX_CELLS_PER_SIDE)  # (L, H, t, s)
    layout, refs = subplot_grid(L, H, h_gap=0.004, v_gap=0.01)
    bare = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": "", "fixedrange": True}
    traces = []
    t, s = small.shape[-2:]
    grid_x, grid_y = np.meshgrid(np.linspace(0, s - 1, 3), np.linspace(0, t - 1, 3))  # (3, 3) inside a thumbnail
    for i, (xref, yref) in enumerate(refs):
        layer, h = divmod(i, H)
        traces.append({"type": "heatmap", "z": small[layer, h], "coloraxis": "coloraxis", "xaxis": xref, "yaxis": yref,
                       "name": f"layer {layer} head {h}", "hoverinfo": "skip"})
        traces.append({"type": "scatter", "x": grid_x.ravel(), "y": grid_y.ravel(), "mode": "markers",
                       "xaxis": xref, "yaxis": yref, "marker": {"size": 18, "opacity": 0}, "showlegend": False,
                       "customdata": [[layer, h]] * 9, "name": f"layer {layer} head {h}",
                       "hovertemplate": "<b>layer %{customdata[0]}, head %{customdata[1]}</b><br>click to open"
                                        "<extra></extra>",
                       "selected": {"marker": {"opacity": 0}}, "unselected": {"marker": {"opacity": 0}}})
        frame = {"showline": True, "linecolor": "crimson", "linewidth": 3, "mirror": True} if (layer, h) == selected else {}
        layout[axis_key(xref)].update(bare, range=[-0.5, s - 0.5], **frame)  # the heatmap's cells, not the targets
        layout[axis_key(yref)].update(bare, range=[t - 0.5, -0.5], **frame)  # reversed: query 0 on top
        if h == 0:
            layout["annotations"].append({"text": f"L{layer}", "x": 0, "y": sum(layout[axis_key(yref)]["domain"]) / 2,
                                          "xref": "paper", "yref": "paper", "xanchor": "right", "showarrow": False})
        if layer == 0:
            layout["annotations"].append({"text": f"H{h}", "x": sum(layout[axis_key(xref)]["domain"]) / 2, "y": 1,
                                          "xref": "paper", "yref": "paper", "yanchor": "bottom", "showarrow": False})
    layout.update(
        coloraxis={"colorscale": "Blues", "cmin": 0, "cmax": float(np.nanmax(small)) or 1.0, "showscale": False},
        height=max(260, 62 * L + 60),
        margin={"l": 40, "r": 10, "t": 30, "b": 10},
        hovermode="closest",
        dragmode=False,
    )
    return go.Figure({"data": traces, "layout": layout})


def picked_head(points: object) -> tuple[int, int] | None:
    """(layer, head) of the thumbnail a click on overview_figure landed on, from a Plotly selection's points;
    None for anything else a (crafted) browser sends: values are checked like URL values."""
    for point in points if isinstance(points, (list, tuple)) else ():
        custom = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(custom, (list, tuple)) and len(custom) == 2:
            layer, head = client_int(custom[0], 0, MAX_LAYERS - 1), client_int(custom[1], 0, MAX_CLICKED_HEADS - 1)
            if layer is not None and head is not None:
                return layer, head
    return None
