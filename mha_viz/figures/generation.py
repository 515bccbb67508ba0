"""Figures of a model writing: the next-token distribution of one step, the predicting query's attention in every
layer and head, which heads wrote the chosen token's logit (direct logit attribution), and head detector scores.

Layers x heads heatmaps carry an invisible marker on every cell with customdata [layer, head], so that a
click on a cell picks that head (Plotly cannot select points of a heatmap); overview.picked_head reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (
    PANEL_TITLE_PX,
    WIDE_PX,
    f32,
    lines_px,
    symmetric_range,
    text_px,
    title_block,
    token_axis,
    token_label,
    token_tickangle,
    wrap,
)
from .heads import colour_range

LABEL_SLOT_PX = 22  # step_attention_figure: the width a slanted key label takes

CHOSEN, OTHER = "#d62728", "#9ecae1"
TITLE_GAP_PX = 8  # between a title and the plot under it


def next_token_figure(probs: np.ndarray, decode: Callable[[list[int]], Sequence[str]], chosen: int, *,
                      top: int = 12, title: str | None = None, width: int | None = None) -> go.Figure:
    """The top next tokens of one step (probs [V], the distribution sampled from), the chosen one in red.

    decode: token ids -> token labels (mha_viz.token_labels.vocab_labels). The chosen token is always shown.
    width: the px the figure is drawn at (the title wraps to it; default a desktop page's).
    """
    ids = [int(i) for i in np.argsort(-probs, kind="stable")[:top]]
    if chosen not in ids:
        ids[-1] = chosen
    names = [f"{token_label(t, 20)} ({i})" for i, t in zip(ids, decode(ids))]  # ids keep equal labels apart
    fig = go.Figure(go.Bar(
        y=names, x=f32(probs[ids]), orientation="h", marker_color=[CHOSEN if i == chosen else OTHER for i in ids],
        text=[f"{p:.1%}" for p in probs[ids]], textposition="outside", cliponaxis=False, constraintext="none",
        hovertemplate="%{y}<br>p = %{x:.4f}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed", type="category")
    # The axis ends where the longest bar does: its value label goes into the right margin, never cut or shrunk.
    fig.update_xaxes(title={"text": "probability"}, range=[0, max(float(probs[ids].max()), 1e-9)])
    title_layout, top_px = title_block(title, (width or WIDE_PX) - 20, below_px=TITLE_GAP_PX if title else 0)
    fig.update_layout(title=title_layout, height=max(260, 26 * len(ids) + 50) + top_px,
                      margin={"l": 10, "r": 16 + int(text_px("100.0%")), "t": top_px, "b": 10},
                      showlegend=False)
    return fig


def _head_labels(L: int, H: int) -> list[str]:
    return [f"L{layer} H{h}" for layer in range(L) for h in range(H)]


def step_attention_figure(attentions: np.ndarray, key_tokens: Sequence[str], *, title: str | None = None,
                          width: int | None = None) -> go.Figure:
    """The predicting query's attention [layers, heads, keys]: one row per (layer, head), one column per key
    (width: the px the figure is drawn at), on the Heads view's colour scale (heads.colour_range: signed weights,
    as differential attention's, centred at 0)."""
    L, H, K = attentions.shape
    if len(key_tokens) != K:
        raise ValueError(f"{len(key_tokens)} key tokens for {K} keys")
    z = f32(attentions.reshape(L * H, K))  # (L*H, K)
    labels = _head_labels(L, H)
    keys = np.array([token_label(t, 20) for t in key_tokens], dtype=object)
    colours = colour_range(z)  # Blues from 0, or centred at 0 for differential attention's signed weights
    fig = go.Figure(go.Heatmap(
        z=z, colorscale=colours["colorscale"], zmin=colours["cmin"], zmax=colours["cmax"],
        colorbar={"title": {"text": "weight"}},
        customdata=np.broadcast_to(keys, z.shape),
        hovertemplate="%{y}<br>key %{x}: <b>%{customdata}</b><br>weight %{z:.3f}<extra></extra>",
    ))
    room = (width or WIDE_PX) - 160  # the head labels and the colour bar
    x_axis = token_axis(key_tokens, "key (prompt, then the tokens written so far)",
                        max_ticks=max(4, room // LABEL_SLOT_PX))  # slanted labels, one slot each
    fig.update_xaxes(x_axis, tickangle=token_tickangle(x_axis["ticktext"]))
    fig.update_yaxes({"tickmode": "array", "tickvals": list(range(L * H)), "ticktext": labels}, autorange="reversed")
    for layer in range(1, L):  # a line between layers
        fig.add_hline(y=layer * H - 0.5, line={"color": "white", "width": 2})
    title_layout, top_px = title_block(title, (width or WIDE_PX) - 20, below_px=TITLE_GAP_PX if title else 0)
    fig.update_layout(title=title_layout, height=min(700, max(240, 18 * L * H + 130)) + top_px - 20,
                      margin={"l": 10, "r": 10, "t": top_px, "b": 10})
    return fig


def _click_targets(L: int, H: int, hover: str, xaxis: str = "x", yaxis: str = "y") -> dict:
    """One invisible marker on each cell of a layers x heads heatmap, carrying [layer, head]."""
    layer, head = np.divmod(np.arange(L * H), H)
    return {"type": "scatter", "x": head.astype(np.float32), "y": layer.astype(np.float32), "mode": "markers",
            "xaxis": xaxis, "yaxis": yaxis, "marker": {"size": 28, "opacity": 0, "symbol": "square"},
            "customdata": np.stack([layer, head], axis=1).tolist(), "hovertemplate": hover, "showlegend": False,
            "selected": {"marker": {"opacity": 0}}, "unselected": {"marker": {"opacity": 0}}}


def _layers_heads_axes(fig: go.Figure, L: int, H: int, row: int | None = None, col: int | None = None) -> None:
    at = {} if row is None else {"row": row, "col": col}
    fig.update_xaxes(tickmode="array", tickvals=list(range(H)), ticktext=[f"H{h}" for h in range(H)], title="head",
                     range=[-0.5, H - 0.5], fixedrange=True, **at)
    fig.update_yaxes(tickmode="array", tickvals=list(range(L)), ticktext=[f"L{layer}" for layer in range(L)],
                     title="layer", range=[L - 0.5, -0.5], fixedrange=True, **at)


def logit_attribution_figure(heads: np.ndarray, terms: Mapping[str, float], token: str, *,
                             title: str | None = None, width: int | None = None) -> go.Figure:
    """Each head's direct contribution to one token's logit [layers, heads] (click a cell to open that head),
    and the other named terms below it; they all add up to the logit. width: the px the figure is drawn at."""
    L, H = heads.shape
    z = np.asarray(heads, dtype=np.float64)
    names = list(terms)
    room = (width or WIDE_PX) - 120  # the layer labels and the colour bar
    titles = [wrap(f"each head's direct contribution to the logit of {token_label(token, 20)}", room, PANEL_TITLE_PX),
              wrap("everything else that adds to it", room, PANEL_TITLE_PX)]
    first, second = (lines_px(t, PANEL_TITLE_PX) + 6 for t in titles)
    top_px, bar_px = 44 * L + 40, 22 * len(names) + 40
    gap_px = 60 + second  # the head labels and axis title, then the second title
    fig = make_subplots(rows=2, cols=1, row_heights=[top_px, bar_px], vertical_spacing=gap_px / (top_px + bar_px + gap_px),
                        subplot_titles=titles)
    m = symmetric_range(z)
    fig.add_trace(go.Heatmap(z=f32(z), zmid=0, zmin=-m, zmax=m, colorscale="RdBu", text=np.round(z, 2),
                             texttemplate="%{text}", hoverinfo="skip",
                             colorbar={"title": {"text": "logit"}, "len": 0.5, "y": 1.0, "yanchor": "top"}),
                  row=1, col=1)
    fig.add_trace(_click_targets(L, H, "layer %{customdata[0]}, head %{customdata[1]}<br>contribution "
                                 "%{text}<br>click to open this head<extra></extra>"), row=1, col=1)
    fig.data[-1].text = [f"{v:+.3f}" for v in z.ravel()]
    _layers_heads_axes(fig, L, H, 1, 1)
    values = np.array([terms[n] for n in names], dtype=np.float64)
    fig.add_trace(go.Bar(x=f32(values), y=names, orientation="h", marker_color=np.where(values >= 0, "#2166ac",
                                                                                           "#b2182b").tolist(),
                         hovertemplate="%{y}: %{x:+.4f}<extra></extra>", showlegend=False), row=2, col=1)
    fig.update_yaxes(autorange="reversed", row=2, col=1)
    fig.update_xaxes(title={"text": "logit"}, zeroline=True, row=2, col=1)
    title_layout, top = title_block(title, (width or WIDE_PX) - 20, below_px=first)
    fig.update_layout(title=title_layout, height=top + top_px + gap_px + bar_px + 60,
                      margin={"l": 10, "r": 10, "t": top, "b": 10}, dragmode=False, hovermode="closest")
    return fig


def head_scores_figure(scores: np.ndarray, kind: str, *, title: str | None = None, width: int | None = None
                       ) -> go.Figure:
    """A detector's scores [layers, heads] in [0, 1], values printed; click a cell to open that head."""
    L, H = scores.shape
    fig = go.Figure(go.Heatmap(z=f32(scores), zmin=0.0, zmax=1.0, colorscale="Blues", text=np.round(scores, 2),
                               texttemplate="%{text}", hoverinfo="skip", colorbar={"title": {"text": kind}}))
    fig.add_trace(_click_targets(L, H, "layer %{customdata[0]}, head %{customdata[1]}<br>" + kind +
                                 " score %{text}<br>click to open this head<extra></extra>"))
    fig.data[-1].text = [f"{v:.3f}" for v in np.asarray(scores).ravel()]
    _layers_heads_axes(fig, L, H)
    title_layout, top_px = title_block(title, (width or WIDE_PX) - 20, below_px=TITLE_GAP_PX if title else 0)
    fig.update_layout(title=title_layout, height=max(240, 40 * L + 120) + top_px,
                      margin={"l": 10, "r": 10, "t": top_px, "b": 10}, dragmode=False, hovermode="closest")
    return fig
