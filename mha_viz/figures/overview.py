"""Layers x heads overview: one small heatmap per (layer, head); a click on a thumbnail picks that head.

Plotly cannot select points of a heatmap, so each thumbnail carries a 3 x 3 grid of invisible
markers with customdata [layer, head]: a click anywhere on a thumbnail lands on one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..limits import MAX_CLICKED_HEADS, MAX_LAYERS, client_int
from .common import axis_key, f32, max_pool, subplot_grid
from .heads import colour_range

MAX_CELLS_PER_SIDE = 32  # larger matrices are max-pooled down to this for the thumbnails


def overview_figure(
    attentions: np.ndarray,
    *,
    selected: tuple[int, int] | None = None,
    kv_heads: Sequence[int] | None = None,
    windows: Sequence[int | None] | None = None,
    marks: Sequence[str] | None = None,
) -> go.Figure:
    """attentions [L, H, T, S] as an L x H grid of thumbnails on one colour scale.

    kv_heads[h]: the key/value head query head h reads (grouped-query attention): each column is labelled with it and
    a line separates the groups. windows[layer]: that layer's sliding window (None: full attention), in its row label;
    marks[layer]: its kind in a hybrid model (mha_viz.mixers.layer_marks: "lin", "ssm", "attn"), likewise.
    """
    L, H = attentions.shape[:2]
    if kv_heads is not None and len(kv_heads) != H:
        raise ValueError(f"{len(kv_heads)} K/V head numbers for {H} query heads")
    if windows is not None and len(windows) != L:
        raise ValueError(f"{len(windows)} windows for {L} layers")
    if marks is not None and len(marks) != L:
        raise ValueError(f"{len(marks)} marks for {L} layers")
    row_labels = [f"L{layer}" + (f" {marks[layer]}" if marks else "")
                  + (f" (window {windows[layer]})" if windows and windows[layer] else "") for layer in range(L)]
    small, _, _ = max_pool(f32(attentions), MAX_CELLS_PER_SIDE)  # (L, H, t, s)
    layout, refs = subplot_grid(L, H, h_gap=0.004, v_gap=0.01)
    bare = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": "", "fixedrange": True}
    traces = []
    label_every = -(-H // 16)  # at most 16 column labels: Mamba's and LFM2's channels are heads, 32 or more a row
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
            layout["annotations"].append({"text": row_labels[layer], "x": 0, "y": sum(layout[axis_key(yref)]["domain"]) / 2,
                                          "xref": "paper", "yref": "paper", "xanchor": "right", "showarrow": False})
        if layer == 0 and h % label_every == 0:
            column = f"H{h}" + (f"<br>KV{kv_heads[h]}" if kv_heads else "")
            layout["annotations"].append({"text": column, "x": sum(layout[axis_key(xref)]["domain"]) / 2, "y": 1,
                                          "xref": "paper", "yref": "paper", "yanchor": "bottom", "showarrow": False})
    if kv_heads:  # a line between query heads that read different K/V heads
        gaps = [(layout[axis_key(refs[h - 1][0])]["domain"][1] + layout[axis_key(refs[h][0])]["domain"][0]) / 2
                for h in range(1, H) if kv_heads[h] != kv_heads[h - 1]]
        layout["shapes"] = [{"type": "line", "xref": "paper", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                             "line": {"color": "#555", "width": 2}} for x in gaps]
    layout.update(
        coloraxis={**colour_range(small), "showscale": False},
        height=max(260, 62 * L + 60),
        margin={"l": 12 + 7 * max(len(label) for label in row_labels), "r": 10, "t": 44 if kv_heads else 30, "b": 10},
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
