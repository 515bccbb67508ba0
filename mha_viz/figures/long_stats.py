"""Every head of every layer over a long input at a glance: one long-range statistic as a layers x heads heatmap
(numpy in, plotly Figure out). Its input is ModelLongTrace.stats() (mha_viz.pretrained.long.LongStats)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import WIDE_PX, f32, index_axis, title_block

# statistic -> (what the colour shows, its hover format, its colour scale)
STATS = {
    "distance": ("mean attention distance (tokens)", ".1f", "Viridis"),
    "entropy": ("entropy (nats)", ".2f", "Viridis"),
    "first": ("weight on the first token", ".3f", "Blues"),
    "sink": ("weight on the learned sink", ".3f", "Blues"),
}


def long_stats_figure(values: dict[str, np.ndarray] | object, stat: str = "distance", *,
                      layers: Sequence[int] | None = None, tokens: int | None = None, title: str | None = None,
                      width: int | None = None) -> go.Figure:
    """One statistic of every head (columns) of every layer (rows); hovering a cell gives all of them.

    values: {name: [layers, heads]} for the names of STATS (any subset, stat among them), or an object with those
    attributes (LongStats, whose .layers numbers the rows). layers: the row labels (default LongStats.layers or
    0 ... L-1); tokens: the input's length, for the title."""
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    if not isinstance(values, dict):
        layers = layers if layers is not None else getattr(values, "layers", None)
        values = {name: getattr(values, name) for name in STATS if hasattr(values, name)}
    if stat not in values:
        raise ValueError(f"no values for {stat!r}")
    grids = {name: np.asarray(v, dtype=np.float32) for name, v in values.items() if name in STATS}
    shape = grids[stat].shape
    if len(shape) != 2 or 0 in shape or any(g.shape != shape for g in grids.values()):
        raise ValueError(f"every statistic needs the same [layers, heads] shape, got {[g.shape for g in grids.values()]}")
    L, H = shape
    layers = tuple(range(L)) if layers is None else tuple(int(i) for i in layers)
    if len(layers) != L:
        raise ValueError(f"{L} rows but {len(layers)} layer numbers")
    names = list(grids)
    hover = "layer %{customdata[0]:.0f}, head %{x}<br>" + "<br>".join(
        f"{'<b>' if n == stat else ''}{STATS[n][0]}: %{{customdata[{i + 1}]:{STATS[n][1]}}}{'</b>' if n == stat else ''}"
        for i, n in enumerate(names)) + "<extra></extra>"
    custom = np.stack([np.broadcast_to(np.asarray(layers, dtype=np.float32)[:, None], shape),
                       *(grids[n] for n in names)], axis=-1)  # (L, H, 1 + stats)
    width = width or WIDE_PX
    what = STATS[stat][0]
    text = title or (f"{what.capitalize()} of every head" + (f" over {tokens:,} tokens" if tokens else "")
                     + f": {L} layers × {H} heads")
    title_layout, top = title_block(text, width - 20)
    cell = max(12, min(40, (width - 140) // max(H, 1)))
    fig = go.Figure(go.Heatmap(
        z=f32(grids[stat]), x=np.arange(H), y=np.arange(L), customdata=f32(custom), hovertemplate=hover,
        colorscale=STATS[stat][2], colorbar={"title": {"text": stat}, "thickness": 12},
        zmin=0.0 if stat in ("first", "sink") else None, zmax=1.0 if stat in ("first", "sink") else None,
    ))
    fig.update_layout(
        title=title_layout, height=top + max(160, cell * L) + 60, margin={"l": 10, "r": 10, "t": top, "b": 40},
        xaxis={**index_axis(H, "head"), "tickmode": "linear" if H <= 32 else "auto", "constrain": "domain"},
        yaxis={**index_axis(L, "layer"), "range": [L - 0.5, -0.5], "tickmode": "array",
               "tickvals": list(range(L)), "ticktext": [str(i) for i in layers]},
        dragmode=False,
    )
    return fig
