"""Sliding-window attention with sinks (numpy in, plotly Figure out): the band of keys each query sees, the mass
each head puts on its sink, and what a token reaches after L stacked layers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import WIDE_PX, f32, index_axis, title_block, token_axis, token_label, token_tickangle

HIDDEN, IN_WINDOW, SINK_KEY = 0, 1, 2  # the band's cell kinds
BAND_COLOURS = ((HIDDEN, "#f2f2f2"), (IN_WINDOW, "#2b6cb0"), (SINK_KEY, "#dd6b20"))
BAND_NAMES = {HIDDEN: "hidden", IN_WINDOW: "in the window", SINK_KEY: "sink token (kept)"}
LABELS_PX = 110  # room for token labels left of and under a matrix


MAX_CELL_PX = 26  # a matrix's cells at most this many px a side: a short sentence stays a compact picture


def _cell_px(cols: int, width: int) -> float:
    """The side of a square cell of a matrix with `cols` columns drawn `width` px wide."""
    return min(MAX_CELL_PX, max(6.0, (width - LABELS_PX - 20) / max(cols, 1)))


def _square_height(rows: int, cols: int, width: int, top: int) -> int:
    """A height that gives a rows x cols matrix square cells (the x axis is scaled to match: _square_axes)."""
    return int(top + LABELS_PX + _cell_px(cols, width) * rows)


def _square_axes(fig: go.Figure) -> None:
    """Square cells: the x axis keeps y's scale and gives up the width it does not need."""
    fig.update_xaxes(constrain="domain")
    fig.update_yaxes(scaleanchor="x", scaleratio=1, constrain="domain")


def _discrete(values: Sequence[tuple[int, str]]) -> list[list]:
    """A colourscale painting each integer value of `values` in its own flat colour (zmin, zmax at the ends)."""
    n = len(values)
    scale: list[list] = []
    for i, (_, colour) in enumerate(values):
        scale += [[i / n, colour], [(i + 1) / n, colour]]
    return scale


def band_figure(in_window: np.ndarray, sink_keys: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str],
                *, title: str | None = None, width: int | None = None) -> go.Figure:
    """[T, S] bool masks in, a heatmap out: the keys each query sees inside its window (blue) and the sink tokens it
    also sees (orange); the rest is hidden."""
    in_window, sink_keys = np.asarray(in_window, dtype=bool), np.asarray(sink_keys, dtype=bool)
    T, S = in_window.shape
    if sink_keys.shape != (T, S) or len(query_tokens) != T or len(key_tokens) != S:
        raise ValueError(f"masks {in_window.shape} and {sink_keys.shape} for {len(query_tokens)} x {len(key_tokens)} "
                         "tokens")
    kind = np.where(in_window, IN_WINDOW, np.where(sink_keys, SINK_KEY, HIDDEN)).astype(np.float32)  # (T, S)
    width = width or WIDE_PX
    words = np.vectorize(BAND_NAMES.get)(kind.astype(int))
    fig = go.Figure(go.Heatmap(z=kind, zmin=-0.5, zmax=2.5, colorscale=_discrete(BAND_COLOURS), showscale=False,
                               customdata=words, xgap=1, ygap=1,
                               hovertemplate="query %{y} → key %{x}: %{customdata}<extra></extra>"))
    for value, colour in BAND_COLOURS[1:]:  # a legend for the visible kinds the band shows (no kept sink: no entry)
        if not (kind == value).any():
            continue
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=BAND_NAMES[value],
                                 marker={"color": colour, "symbol": "square", "size": 12}))
    title_layout, top = title_block(title or "Which keys each query sees", width - 20, below_px=26)
    x_labels = [token_label(t) for t in key_tokens]
    fig.update_layout(title=title_layout, height=_square_height(T, S, width, top), dragmode=False,
                      margin={"l": 10, "r": 10, "t": top, "b": 10},
                      legend={"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"})
    fig.update_xaxes(**token_axis(key_tokens, "key"), tickangle=token_tickangle(x_labels, _cell_px(S, width) * S),
                     range=[-0.5, S - 0.5])
    fig.update_yaxes(**token_axis(query_tokens, "query"), autorange="reversed")
    _square_axes(fig)
    return fig


def sink_mass_figure(mass: np.ndarray, query_tokens: Sequence[str], *, title: str, colorbar: str = "mass",
                     width: int | None = None) -> go.Figure:
    """[H, T] in (0 ... 1: the share of each query row a head gives its sink), a heatmap out: heads down, queries
    across, with each head's mean at the end of its row in the hover."""
    mass = np.asarray(mass, dtype=np.float64)
    H, T = mass.shape
    if len(query_tokens) != T:
        raise ValueError(f"{T} queries of sink mass for {len(query_tokens)} tokens")
    width = width or WIDE_PX
    means = np.repeat(mass.mean(1, keepdims=True), T, axis=1)  # (H, T)
    fig = go.Figure(go.Heatmap(z=f32(mass), zmin=0, zmax=1, colorscale="Oranges", customdata=f32(means),
                               colorbar={"title": {"text": colorbar}, "thickness": 12},
                               hovertemplate="head %{y}, query %{x}: %{z:.3f} (head mean %{customdata:.3f})"
                                             "<extra></extra>"))
    title_layout, top = title_block(title, width - 20)
    x_labels = [token_label(t) for t in query_tokens]
    fig.update_layout(title=title_layout, height=top + 90 + 28 * H, dragmode=False,
                      margin={"l": 10, "r": 10, "t": top, "b": 10})
    fig.update_xaxes(**token_axis(query_tokens, "query"), tickangle=token_tickangle(x_labels, width - LABELS_PX - 60))
    fig.update_yaxes(**index_axis(H, "head"), tickmode="array", tickvals=list(range(H)),
                     ticktext=[str(h) for h in range(H)], autorange="reversed")
    return fig


def reach_figure(reach: np.ndarray, tokens: Sequence[str], layers: int, *, title: str | None = None,
                 width: int | None = None) -> go.Figure:
    """[T, T] bool in (position i holds information from token j after `layers` layers), a heatmap out."""
    reach = np.asarray(reach, dtype=bool)
    T = reach.shape[0]
    if reach.shape != (T, T) or len(tokens) != T:
        raise ValueError(f"reach {reach.shape} for {len(tokens)} tokens: it must be [T, T]")
    width = width or WIDE_PX
    counts = np.repeat(reach.sum(1, keepdims=True), T, axis=1)  # (T, T)
    fig = go.Figure(go.Heatmap(z=reach.astype(np.float32), zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                               colorscale=[[0, "#f2f2f2"], [1, "#2f855a"]], customdata=counts.astype(np.int32),
                               hovertemplate="position %{y} ← token %{x}: %{z} (position %{y} reaches %{customdata} "
                                             "tokens)<extra></extra>"))
    title_layout, top = title_block(title or f"What each position reaches after {layers} layers", width - 20)
    labels = [token_label(t) for t in tokens]
    fig.update_layout(title=title_layout, height=_square_height(T, T, width, top), dragmode=False,
                      margin={"l": 10, "r": 10, "t": top, "b": 10})
    fig.update_xaxes(**token_axis(tokens, "token read"), tickangle=token_tickangle(labels, _cell_px(T, width) * T),
                     range=[-0.5, T - 0.5])
    fig.update_yaxes(**token_axis(tokens, "position"), autorange="reversed")
    _square_axes(fig)
    return fig


def reach_back_figure(layer_counts: Sequence[int], reached: np.ndarray, *, window: int, chosen: int | None = None,
                      title: str | None = None, width: int | None = None) -> go.Figure:
    """Tokens a causal window reaches back (reached [len(layer_counts)], e.g. L * (window - 1)) against the number of
    layers, as a line with markers; chosen: a number of layers to mark."""
    reached = np.asarray(reached, dtype=np.float64)
    if reached.shape != (len(layer_counts),):
        raise ValueError(f"{len(layer_counts)} layer counts and {reached.shape} reaches")
    width = width or WIDE_PX
    fig = go.Figure(go.Scatter(x=list(layer_counts), y=f32(reached), mode="lines+markers", name=f"window {window}",
                               hovertemplate="%{x} layers: %{y} tokens back<extra></extra>"))
    if chosen is not None and chosen in layer_counts:
        y = float(reached[list(layer_counts).index(chosen)])
        fig.add_trace(go.Scatter(x=[chosen], y=[y], mode="markers+text", name=f"L = {chosen}", text=[f"{y:g}"],
                                 textposition="top left", marker={"size": 13, "color": "#dd6b20"},
                                 hovertemplate="%{x} layers: %{y} tokens back<extra></extra>"))
    title_layout, top = title_block(title or f"Tokens back a window of {window} reaches through L layers",
                                    width - 20)
    fig.update_layout(title=title_layout, height=top + 260, dragmode=False, showlegend=False,
                      margin={"l": 10, "r": 10, "t": top, "b": 10})
    fig.update_xaxes(title={"text": "layers L"}, tickmode="array", tickvals=list(layer_counts), showgrid=False)
    fig.update_yaxes(title={"text": "tokens back"}, rangemode="tozero")
    return fig
