"""The KV cache of attention variants beside classic MHA, as horizontal bars (numpy in, plotly Figure out)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..variants_cost import human_bytes
from .common import WIDE_PX, f32, text_px, title_block, token_label

VARIANT_COLOUR, MHA_COLOUR = "#1f77b4", "#bbbbbb"
LEGEND_PX = 24  # the legend's row between the title and the bars


def kv_cache_figure(labels: Sequence[str], variant_bytes: np.ndarray, mha_bytes: np.ndarray, *, context: int,
                    log: bool | None = None, title: str | None = None, width: int | None = None) -> go.Figure:
    """Two bars a row: the variant's KV cache and MHA's (the same d_model, h and head widths) for a context of
    `context` tokens, each bar labelled with its size. log: a logarithmic axis (None: when the bars span more than
    100x). width: the px the figure is drawn at (labels are shortened to leave the bars half of it)."""
    ours, mha = np.asarray(variant_bytes, dtype=np.float64), np.asarray(mha_bytes, dtype=np.float64)
    if ours.shape != mha.shape or ours.shape != (len(labels),):
        raise ValueError(f"one variant and one MHA size per label: {len(labels)} labels, {ours.shape}, {mha.shape}")
    if len(labels) == 0 or not (np.all(ours > 0) and np.all(mha > 0)):
        raise ValueError("the cache sizes must be positive numbers of bytes")
    width = width or WIDE_PX
    room = max(6, int(width * 0.3 / text_px("x")))
    names = [token_label(label, room) for label in labels]
    if log is None:
        log = max(ours.max(), mha.max()) / min(ours.min(), mha.min()) > 100
    fig = go.Figure()
    for name, values, colour in (("MHA", mha, MHA_COLOUR), ("variant", ours, VARIANT_COLOUR)):
        fig.add_trace(go.Bar(y=names, x=f32(values), orientation="h", name=name, marker_color=colour,
                             text=[human_bytes(v) for v in values], textposition="auto",
                             hovertemplate="%{y}: %{text}<extra>" + name + "</extra>"))
    title_layout, top = title_block(title or f"KV cache for {context:,} tokens: variant vs MHA", width - 20,
                                    below_px=LEGEND_PX)
    fig.update_layout(title=title_layout, barmode="group", height=top + 46 * len(labels) + 60,
                      margin={"l": 10, "r": 10, "t": top, "b": 10}, dragmode=False,
                      legend={"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom", "traceorder": "reversed"})
    fig.update_xaxes(title={"text": "bytes" + (" (log scale)" if log else "")}, type="log" if log else "linear")
    fig.update_yaxes(autorange="reversed")
    return fig
