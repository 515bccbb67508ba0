"""Figures of one head's circuits (mha_viz.analysis.circuits): every head's copying score, a head's singular values of
W_QK and W_OV, and its token-level QK or OV circuit (the whole table for a small vocabulary, each sampled row's top-k
for a large one). numpy in, plotly Figure out; integer axes with token labels, float32, one colour axis per figure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (
    CHAR_EM,
    PANEL_TITLE_PX,
    WIDE_PX,
    f32,
    index_axis,
    lines_px,
    symmetric_range,
    title_block,
    token_axis,
    token_label,
    wrap,
)
from .generation import head_scores_figure

TABLE_TICKS = 40  # the most labelled ticks on a token axis of a whole table
TOP_AXIS_PX = 75  # a top axis's tick labels and title, under the figure's title
ROW_TICK_PX, COLUMN_TICK_PX = 14, 17  # the least room per labelled row / slanted column (12 px labels): none overlap


def copying_figure(scores: np.ndarray, *, title: str | None = None, width: int | None = None) -> go.Figure:
    """Every head's copying score [layers, heads] (0 to 1, values printed); a click on a cell picks that head."""
    return head_scores_figure(scores, "copying", title=title, width=width)


def singular_values_figure(qk: np.ndarray, ov: np.ndarray, *, title: str | None = None, width: int | None = None
                           ) -> go.Figure:
    """The singular values of one head's W_QK and W_OV (descending), one panel each, stacked."""
    room = (width or WIDE_PX) - 40
    titles = [wrap(f"W_QK = W_Q W_Kᵀ: {len(qk)} singular values (its rank is at most d_k)", room, PANEL_TITLE_PX),
              wrap(f"W_OV = W_V W_O: {len(ov)} singular values (its rank is at most d_v)", room, PANEL_TITLE_PX)]
    first, second = (lines_px(t, PANEL_TITLE_PX) + 6 for t in titles)
    panel_px, gap_px = 180, 50 + second
    fig = make_subplots(rows=2, cols=1, subplot_titles=titles, vertical_spacing=gap_px / (2 * panel_px + gap_px))
    for row, (values, colour) in enumerate(((qk, "#1f77b4"), (ov, "#d62728")), start=1):
        fig.add_trace(go.Bar(x=np.arange(len(values), dtype=np.float32), y=f32(values), marker_color=colour,
                             hovertemplate="σ%{x} = %{y:.4g}<extra></extra>", showlegend=False), row=row, col=1)
        fig.update_xaxes(index_axis(len(values), "index (largest first)"), tickmode="auto", row=row, col=1)
        fig.update_yaxes(title={"text": "singular value"}, rangemode="tozero", row=row, col=1)
    title_layout, top = title_block(title, (width or WIDE_PX) - 20, below_px=first)
    fig.update_layout(title=title_layout, height=top + 2 * panel_px + gap_px + 50,
                      margin={"l": 10, "r": 10, "t": top, "b": 10}, dragmode=False)
    return fig


def token_table_figure(values: np.ndarray, row_labels: Sequence[str], column_labels: Sequence[str], *,
                       row_axis: str, column_axis: str, colour: str, title: str | None = None,
                       width: int | None = None) -> go.Figure:
    """A whole token table [R, C] (a small vocabulary's QK or OV circuit) as a heatmap on integer axes labelled with
    tokens, diverging around 0; NaN (a masked cell) is a gap."""
    R, C = values.shape
    w = width or WIDE_PX
    cell = float(np.clip((w - 160) / C, 3, 14))
    plot_px = int(cell * R)
    m = symmetric_range(values)
    hover = f"{row_axis} %{{y}}<br>{column_axis} %{{x}}<br>{colour} %{{z:.3g}}<extra></extra>"
    fig = go.Figure(go.Heatmap(z=f32(values), zmid=0, zmin=-m, zmax=m, colorscale="RdBu", hovertemplate=hover,
                               colorbar={"title": {"text": colour}, "thickness": 12}))
    x_ticks, y_ticks = (int(min(TABLE_TICKS, max(2, px // gap))) for px, gap in ((w - 160, COLUMN_TICK_PX),
                                                                                  (plot_px, ROW_TICK_PX)))
    fig.update_xaxes(token_axis(list(column_labels), column_axis, max_ticks=x_ticks), range=[-0.5, C - 0.5],
                     tickangle=-60, side="top")
    fig.update_yaxes(token_axis(list(row_labels), row_axis, max_ticks=y_ticks), range=[R - 0.5, -0.5])
    title_layout, top = title_block(title, w - 20, below_px=110)  # the column labels sit on top
    fig.update_layout(title=title_layout, height=top + plot_px + 30, margin={"l": 10, "r": 10, "t": top, "b": 10},
                      dragmode=False)
    return fig


def top_k_figure(values: np.ndarray, columns: np.ndarray, row_labels: Sequence[str], column_vocab: Sequence[str], *,
                 row_axis: str, column_axis: str, colour: str, title: str | None = None, width: int | None = None
                 ) -> go.Figure:
    """Each row's top-k columns [R, k] (largest first) as a heatmap of their values with the column's token printed
    in each cell: row r, rank i shows column_vocab[columns[r, i]]."""
    R, k = values.shape
    w = width or WIDE_PX
    font_px = 11 if w >= 600 else 9
    fits = int((w - 220) / k / (CHAR_EM * font_px))  # characters a cell holds (the row labels and colour bar aside)
    tokens = [[column_vocab[c] if np.isfinite(v) else "" for c, v in zip(row_ids, row_values, strict=True)]
              for row_ids, row_values in zip(columns, values, strict=True)]
    names = np.array([[token_label(t, min(12, fits)) if t and fits >= 3 else "" for t in row] for row in tokens],
                     dtype=object)  # too narrow for 3 characters: the hover names the token
    hover_data = [[[token_label(t, 24) if t else "", i + 1, token_label(row_labels[r], 24)] for i, t in enumerate(row)]
                  for r, row in enumerate(tokens)]
    m = symmetric_range(values)
    fig = go.Figure(go.Heatmap(z=f32(values), zmid=0, zmin=-m, zmax=m, colorscale="RdBu", text=names,
                               texttemplate="%{text}", textfont={"size": font_px}, customdata=hover_data,
                               hovertemplate=f"{row_axis} %{{customdata[2]}}<br>rank %{{customdata[1]}}: %{{customdata[0]}}<br>"
                                             f"{colour} %{{z:.3g}}<extra></extra>",
                               colorbar={"title": {"text": colour}, "thickness": 12}))
    fig.update_xaxes(index_axis(k, f"rank of the {column_axis} (1 = largest)"), tickmode="array",
                     tickvals=list(range(k)), ticktext=[str(i + 1) for i in range(k)], side="top")
    fig.update_yaxes(token_axis(list(row_labels), row_axis, step=1), range=[R - 0.5, -0.5])
    title_layout, top = title_block(title, w - 20, below_px=TOP_AXIS_PX)
    fig.update_layout(title=title_layout, height=top + 22 * R + 30, margin={"l": 10, "r": 10, "t": top, "b": 10},
                      dragmode=False)
    return fig
