"""What a layer lets a token see: its measured reach against its declared one, as one [query, key] picture
(mha_viz.analysis.visibility)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import WIDE_PX, title_block, token_axis

# Each [query, key] pair in one of four states; the colours say which, the legend (colour bar ticks) names them.
STATES = ("not reached, as declared", "reached, as declared", "reached, declared hidden", "not reached, declared seen")
COLOURS = ("#f4f4f4", "#6b7a8f", "#e08214", "#b2182b")


def reach_figure(measured: np.ndarray, declared: np.ndarray, tokens: Sequence[str], *, title: str | None = None,
                 width: int | None = None) -> go.Figure:
    """measured, declared (T, T) bool [query, key]: grey where they agree (dark: the key is reached), orange where
    the query reaches a key its config hides, red where it misses one its config lets it see."""
    state = np.where(measured == declared, measured.astype(np.int8), np.where(measured, 2, 3)).astype(np.int8)
    T = len(tokens)
    scale = [[edge, colour] for i, colour in enumerate(COLOURS) for edge in (i / 4, (i + 1) / 4)]
    fig = go.Figure(go.Heatmap(
        z=state, zmin=-0.5, zmax=3.5, colorscale=scale, customdata=np.array(STATES, dtype=object)[state],
        hovertemplate="query %{y}, key %{x}: %{customdata}<extra></extra>", xgap=1, ygap=1,
        colorbar={"tickvals": [0, 1, 2, 3], "ticktext": list(STATES), "len": 0.9}))
    side = min((width or WIDE_PX) - 260, 16 * T + 80)
    fig.update_xaxes(**token_axis(tokens, "key"), tickangle=-90, constrain="domain", automargin=True)
    fig.update_yaxes(**token_axis(tokens, "query"), autorange="reversed", scaleanchor="x", automargin=True)
    title_layout, top = title_block(title, (width or WIDE_PX) - 20)
    fig.update_layout(title=title_layout, height=top + side + 120, margin={"l": 10, "r": 10, "t": top, "b": 10},
                      dragmode=False, hovermode="closest")
    return fig
