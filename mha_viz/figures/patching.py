"""Figures of causal patching: normalised scores (0 = the corrupted run, 1 = the clean run) as heatmaps.

    head, pattern, path_*   layers x heads (path_*: sender heads, NaN rows say "no path"; receivers named in the title)
    head_position           (layer, head) rows x positions
    residual                layers x positions
One colour axis: white at 0 (the corrupted run), blue towards 1 (the clean run), red below 0; cells print their
value. The text alternative comes from mha_viz.figures.common.describe.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..analysis.patching import PatchingResult
from .common import WIDE_PX, f32, title_block, token_axis, token_tickangle

DIRECTION_WORDS = {"denoise": "clean activation patched into the corrupted run",
                   "noise": "corrupted activation patched into the clean run"}
SITE_WORDS = {"head": "each head's output (all positions)", "head_position": "each head's output at each position",
              "residual": "the residual stream entering each layer, at each position",
              "pattern": "each head's attention pattern", "path_q": "each sender head's path to the receivers' queries",
              "path_k": "each sender head's path to the receivers' keys",
              "path_v": "each sender head's path to the receivers' values"}
COLOUR_BAR = {"title": {"text": "restored"}, "tickvals": [-1, 0, 1], "ticktext": ["-1", "0 corrupted", "1 clean"]}


def patching_title(result: PatchingResult) -> str:
    """What was patched and measured, in words."""
    metric = (f"logit({result.answer}) − logit({result.wrong})" if result.metric == "logit_diff"
              else f"{'log ' if result.metric == 'logprob' else ''}p({result.answer})")
    receivers = result.detail.get("receivers")
    site = SITE_WORDS.get(result.site, result.site)
    if receivers:
        site += " (" + ", ".join(f"{layer}.{h}" for layer, h in receivers) + ")"
    return (f"Patching {site}, {DIRECTION_WORDS[result.direction]}: {metric}, "
            f"clean {result.clean:.3g}, corrupted {result.corrupted:.3g}")


def patching_figure(result: PatchingResult, *, title: str | None = None, width: int | None = None) -> go.Figure:
    """The scores of a PatchingResult as one heatmap; title defaults to patching_title(result)."""
    scores = np.asarray(result.scores, dtype=np.float64)
    width = width or WIDE_PX
    if scores.ndim == 3:  # head_position: one row per (layer, head)
        L, H, T = scores.shape
        z = scores.reshape(L * H, T)
        rows = [f"L{layer} H{h}" for layer in range(L) for h in range(H)]
    else:
        z, rows = scores, [f"L{layer}" for layer in range(scores.shape[0])]
    by_position = result.site in ("head_position", "residual")
    fig = go.Figure(go.Heatmap(
        z=f32(z), zmin=-1.0, zmax=1.0, zmid=0.0, colorscale="RdBu", colorbar=COLOUR_BAR,
        texttemplate="%{z:.2f}" if z.size <= 400 else None,
        hovertemplate=("%{y}, %{x}: %{z:.3f}<extra></extra>"),
    ))  # fmt: skip
    if by_position:
        labels = [f"{i}: {a}" if a == b else f"{i}: {a} / {b}"
                  for i, (a, b) in enumerate(zip(result.tokens, result.corrupted_tokens, strict=True))]
        fig.update_xaxes(**token_axis(labels, "position (clean / corrupted token)"), range=[-0.5, len(labels) - 0.5],
                         tickangle=token_tickangle(labels, width / max(1, len(labels))), fixedrange=True)
    else:
        H = z.shape[1]
        fig.update_xaxes(tickmode="array", tickvals=list(range(H)), ticktext=[f"H{h}" for h in range(H)],
                         title={"text": "sender head" if result.site.startswith("path") else "head"},
                         range=[-0.5, H - 0.5], fixedrange=True, showgrid=False, zeroline=False)
        for row in np.flatnonzero(np.isnan(z).all(axis=1)):  # path patching: no sender here reaches a receiver
            fig.add_annotation(x=(H - 1) / 2, y=int(row), text="no path to the receivers", showarrow=False,
                               font={"color": "#666666"})
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(rows))), ticktext=rows,
                     title={"text": "layer, head" if scores.ndim == 3 else "layer"},
                     range=[len(rows) - 0.5, -0.5], fixedrange=True)
    title_layout, top = title_block(patching_title(result) if title is None else title, width - 20)
    row_px = 22 if scores.ndim == 3 else 40
    fig.update_layout(title=title_layout, height=top + row_px * len(rows) + (140 if by_position else 80),
                      margin={"l": 10, "r": 10, "t": top, "b": 10}, dragmode=False)
    return fig
