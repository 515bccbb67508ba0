"""Why this key: one score's (query source x key source) terms as a heatmap, and what removing each source does to
the key's weight (mha_viz.analysis.score_attribution)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..limits import client_int
from .common import PANEL_TITLE_PX, WIDE_PX, f32, lines_px, symmetric_range, title_block, wrap

VALUES_UP_TO = 14  # sources per side with every value printed in its cell


def score_attribution_figure(table: np.ndarray, sources: Sequence[str], removed: np.ndarray, weight: float, *,
                             title: str | None = None, width: int | None = None,
                             removed_from: str = "the stream", key_sources: Sequence[str] | None = None) -> go.Figure:
    """table (S, S): the terms of one score, query source (rows) x key source (columns), on a scale centred at 0;
    below it, the key's softmax weight with each of the first len(removed) sources taken out of the stream (removed,
    the constant "bias" last is not in it) against its weight (a line). width: the px the figure is drawn at;
    removed_from: what the sources are taken out of, in words (a single layer's: "the input"). key_sources:
    cross-attention's columns (the encoder output's sources), table (S, K); removed then holds each query source's
    row, then each key source's (ScoreAttribution.removed)."""
    columns = list(sources if key_sources is None else key_sources)
    S, K = len(sources), len(columns)
    z = np.asarray(table, dtype=np.float64)
    room = (width or WIDE_PX) - 120
    titles = [wrap("the score's terms: query side (rows) x key side (columns)", room, PANEL_TITLE_PX),
              wrap(f"the key's weight with one source taken out of {removed_from} (recomputed exactly)", room,
                   PANEL_TITLE_PX)]
    first, second = (lines_px(t, PANEL_TITLE_PX) + 6 for t in titles)
    cell = max(14, min(34, ((width or WIDE_PX) - 260) // max(S, K, 1)))
    grid_px, bar_px = cell * S + 40, 20 * S + 50
    gap_px = 110 + second  # the key-source labels (tilted) and the second title
    fig = make_subplots(rows=2, cols=1, row_heights=[grid_px, bar_px],
                        vertical_spacing=gap_px / (grid_px + bar_px + gap_px), subplot_titles=titles)
    m = symmetric_range(z)
    printed = max(S, K) <= VALUES_UP_TO and cell >= 24  # values printed where they can be read
    fig.add_trace(go.Heatmap(
        z=f32(z), zmid=0, zmin=-m, zmax=m, colorscale="RdBu", customdata=np.array(
            [[(sources[a], columns[b]) for b in range(K)] for a in range(S)], dtype=object),
        text=np.round(z, 2) if printed else None, texttemplate="%{text}" if printed else None,
        hovertemplate="query side: %{customdata[0]}<br>key side: %{customdata[1]}<br>term %{z:+.4f}<extra></extra>",
        colorbar={"title": {"text": "term"}, "len": 0.5, "y": 1.0, "yanchor": "top"}), row=1, col=1)
    fig.update_xaxes(tickmode="array", tickvals=list(range(K)), ticktext=columns, tickangle=-45,
                     title={"text": "key side"}, row=1, col=1)
    fig.update_yaxes(tickmode="array", tickvals=list(range(S)), ticktext=list(sources), autorange="reversed",
                     title={"text": "query side"}, row=1, col=1)
    without = np.asarray(removed, dtype=np.float64)
    R = len(without)
    names = list(sources[:R]) if key_sources is None else [  # cross-attention: each side's sources but "bias"
        *(f"{s} (query side)" for s in sources[:-1]), *(f"{s} (key side)" for s in columns[:-1])]
    fig.add_trace(go.Bar(x=f32(without), y=list(range(R)), orientation="h", showlegend=False,
                         marker_color=np.where(without >= weight, "#2166ac", "#b2182b").tolist(),
                         customdata=names, hovertemplate="without %{customdata}: weight %{x:.4f}<extra></extra>"),
                  row=2, col=1)
    fig.add_vline(x=weight, line_dash="dash", line_color="#444", row=2, col=1)
    fig.update_yaxes(tickmode="array", tickvals=list(range(R)), ticktext=names, autorange="reversed", row=2, col=1)
    fig.update_xaxes(title={"text": f"weight on the key (dashed: {weight:.4f} with every source)"}, range=[0, 1.02],
                     row=2, col=1)
    title_layout, top = title_block(title, (width or WIDE_PX) - 20, below_px=first)
    fig.update_layout(title=title_layout, height=top + grid_px + gap_px + bar_px + 60,
                      margin={"l": 10, "r": 10, "t": top, "b": 10}, dragmode=False, hovermode="closest")
    return fig


def with_cell_picker(fig: go.Figure, weights: np.ndarray, allowed: np.ndarray,
                     chosen: tuple[int, int] | None = None) -> go.Figure:
    """fig (one head's [query, key] heatmap of weights (T, S) on axes x, y) with a click target on every allowed
    cell: a transparent marker carrying (query, key), read back by picked_cell, and the hover (Plotly reports no
    click on a heatmap's own cells, so the heatmap's hover is left to the markers); chosen (query, key): outlined."""
    T, S = allowed.shape
    queries, keys = (a.astype(np.int32) for a in np.nonzero(allowed))  # Plotly.js reads no 64-bit integers
    fig.update_traces(hoverinfo="skip", hovertemplate=None, selector={"type": "heatmap"})
    fig.add_trace(go.Scatter(
        x=keys, y=queries, mode="markers", customdata=np.stack([queries, keys], 1), showlegend=False,
        text=[f"{w:.3f}" for w in np.asarray(weights)[queries, keys]], name="pick a cell",
        marker={"size": 14, "opacity": 0, "symbol": "square"},
        hovertemplate="query %{customdata[0]}, key %{customdata[1]}: weight %{text}. Click to explain this score"
                      "<extra></extra>",
        selected={"marker": {"opacity": 0}}, unselected={"marker": {"opacity": 0}}, xaxis="x", yaxis="y"))
    if chosen is not None:
        q, k = chosen
        fig.add_shape(type="rect", x0=k - 0.5, x1=k + 0.5, y0=q - 0.5, y1=q + 0.5, xref="x", yref="y",
                      line={"color": "crimson", "width": 3})
    fig.update_xaxes(range=[-0.5, S - 0.5], autorange=False)  # the cells, not the markers' reach
    fig.update_yaxes(range=[T - 0.5, -0.5], autorange=False, scaleanchor="x")  # reversed: query 0 on top; square cells
    fig.update_layout(hovermode="closest", dragmode=False)
    return fig


def picked_cell(points: object, T: int, S: int) -> tuple[int, int] | None:
    """(query, key) of the cell a click on with_cell_picker's figure landed on, from a Plotly selection's points;
    None for anything else a (crafted) browser sends: values are checked like URL values."""
    for point in points if isinstance(points, (list, tuple)) else ():
        custom = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(custom, dict):  # a typed array's row arrives as {"0": query, "1": key}
            custom = [custom.get("0"), custom.get("1")] if len(custom) == 2 else None
        if isinstance(custom, (list, tuple)) and len(custom) == 2:
            query, key = client_int(custom[0], 0, T - 1), client_int(custom[1], 0, S - 1)
            if query is not None and key is not None:
                return query, key
    return None
