"""What W_O does, drawn (mha_viz.analysis.readout): each head's direct contribution to the right answer, and one head's
token map, each a single heatmap with integer axes and token labels, fitted to the width it is drawn at."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import NARROW_PX, WIDE_PX, f32, pair_labels, symmetric_range, title_block, token_axis, token_label

MAX_TOKEN_MAP_PX = 720  # a token map is square; wider than this it only grows in empty margins
LABEL_GAP_PX = 20  # the least room between two labelled tokens


def _colorbar(width: int, title: str) -> dict:
    """A vertical colour bar beside a wide figure, a horizontal one above a narrow figure's plot."""
    if width < NARROW_PX:
        return {"title": {"text": title, "side": "top"}, "orientation": "h", "y": 1.0, "yanchor": "bottom",
                "len": 0.9, "thickness": 12}
    return {"title": {"text": title}, "thickness": 14}


def contributions_heatmap(contributions: np.ndarray, heads: Sequence[str], answers: Sequence[str], *,
                          title: str | None = None, width: int | None = None) -> go.Figure:
    """[heads, answers] direct contributions to the right answer's logit, values printed, one colour axis centred on 0.
    width: the px the figure is drawn at."""
    z = np.asarray(contributions, dtype=np.float64)
    H, R = z.shape
    if (H, R) != (len(heads), len(answers)):
        raise ValueError(f"contributions has shape {z.shape} for {len(heads)} heads and {len(answers)} answers")
    width = width or WIDE_PX
    narrow = width < NARROW_PX
    m = symmetric_range(z)
    fig = go.Figure(go.Heatmap(
        z=f32(z), x=list(range(R)), y=list(range(H)), zmid=0, zmin=-m, zmax=m, colorscale="RdBu",
        text=[[f"{v:+.2f}" for v in row] for row in z], texttemplate="%{text}",
        customdata=pair_labels(list(heads), list(answers)),
        hovertemplate="%{customdata[0]} → %{customdata[1]}: %{z:+.3f}<extra></extra>",
        colorbar=_colorbar(width, "logit")))
    bar_px = 60 if narrow else 0
    title_layout, top = title_block(title, width - 20, below_px=bar_px + 8)  # the first row's label reaches above
    fig.update_xaxes(token_axis(list(answers), "the readout's answer"), range=[-0.5, R - 0.5], fixedrange=True,
                     side="bottom")
    fig.update_yaxes(token_axis(list(heads)), range=[H - 0.5, -0.5], fixedrange=True)
    fig.update_layout(title=title_layout, height=top + max(160, 36 * H + 80),
                      margin={"l": 10, "r": 10, "t": top + bar_px, "b": 10}, dragmode=False)
    return fig


def token_map_figure(token_map: np.ndarray, vocab: Sequence[str], *, title: str | None = None,
                     width: int | None = None) -> go.Figure:
    """One head's token map [V source tokens, V answer tokens] (rows centred: what a source token raises), one colour
    axis centred on 0; square, as wide as it may be. width: the px the figure is drawn at."""
    z = np.asarray(token_map, dtype=np.float32)
    V = len(vocab)
    if z.shape != (V, V):
        raise ValueError(f"the token map has shape {z.shape}, expected ({V}, {V}) for {V} tokens")
    width = width or WIDE_PX
    narrow = width < NARROW_PX
    side = min(width, MAX_TOKEN_MAP_PX) - (40 if narrow else 110)  # the plot's side: labels and the colour bar
    step = max(1, -(-V * LABEL_GAP_PX // max(side, 1)))  # a label every step tokens
    m = symmetric_range(z)
    labels = pair_labels(list(vocab), list(vocab))
    fig = go.Figure(go.Heatmap(
        z=f32(z), x=list(range(V)), y=list(range(V)), zmid=0, zmin=-m, zmax=m, colorscale="RdBu",
        customdata=labels, colorbar=_colorbar(width, "logit"),
        hovertemplate=("source %{customdata[0]} → answer %{customdata[1]}: %{z:+.2f}<extra></extra>"
                       if labels is not None else "source %{y} → answer %{x}: %{z:+.2f}<extra></extra>")))
    bar_px = 60 if narrow else 0
    title_layout, top = title_block(title, width - 20, below_px=bar_px + 8)  # the first row's label reaches above
    fig.update_xaxes(token_axis(list(vocab), "answer token", step=step), range=[-0.5, V - 0.5], tickangle=-90,
                     constrain="domain")
    fig.update_yaxes(token_axis(list(vocab), "source token (attended)", step=step), range=[V - 0.5, -0.5],
                     scaleanchor="x", constrain="domain")
    longest = max((len(token_label(t)) for t in vocab[::step]), default=1)
    fig.update_layout(title=title_layout, height=top + bar_px + side + 7 * longest + 50,
                      margin={"l": 10, "r": 10, "t": top + bar_px, "b": 10}, dragmode=False)
    return fig
