"""Multi-head latent attention (MLA) drawn: what the cache holds per token (the latent and the shared rotary key),
one head's up-projections W_UK and W_UV, and its keys and values rebuilt from the latent (numpy in, plotly out)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import LINE_EM, PANEL_TITLE_PX, f32, index_axis, symmetric_range, token_axis, wrap

PANEL_MIN = 6  # a panel's share of the width counts at least this many columns (a 1-wide latent stays visible)
COMPACT_TITLE_PX = 300  # stacked panels (a phone, a projector's narrow column): titles wrapped to this width
AXIS_BELOW_PX = 62  # under a stacked panel: its tick labels and axis title, before the next panel's title
COMPACT_BAR_PX = 40  # the horizontal colour bar under stacked panels, with its tick labels


def _panels(mats: Sequence[np.ndarray], titles: Sequence[str], *, compact: bool, colour: str, bar: str,
            hover: Sequence[str], rows_axis: Sequence[dict], cols_axis: Sequence[dict], row_px: int) -> go.Figure:
    """Heatmaps side by side (compact: stacked, the colour bar under them, so the panels and their wrapped titles get
    the whole width), widths in proportion to their columns, one colour axis."""
    n = len(mats)
    shape = (n, 1) if compact else (1, n)
    widths = None if compact else [max(PANEL_MIN, m.shape[1]) for m in mats]
    titles = [wrap(t, COMPACT_TITLE_PX, PANEL_TITLE_PX) for t in titles] if compact else list(titles)
    title_px = int(max(t.count("<br>") + 1 for t in titles) * LINE_EM * PANEL_TITLE_PX)
    gap_px = AXIS_BELOW_PX + title_px  # between two stacked panels: the upper one's axis, the lower one's title
    plots_px = row_px * shape[0] + gap_px * (shape[0] - 1)
    margin = ({"l": 10, "r": 10, "t": 20 + title_px, "b": AXIS_BELOW_PX + COMPACT_BAR_PX} if compact
              else {"l": 10, "r": 10, "t": 40, "b": 10})
    fig = make_subplots(rows=shape[0], cols=shape[1], subplot_titles=titles, column_widths=widths,
                        horizontal_spacing=0.08 if n > 1 else 0.02,
                        vertical_spacing=gap_px / plots_px if shape[0] > 1 else 0.0)
    for i, (m, text) in enumerate(zip(mats, hover, strict=True)):
        row, col = (i + 1, 1) if compact else (1, i + 1)
        fig.add_trace(go.Heatmap(z=f32(m), coloraxis="coloraxis", hovertemplate=text + "<extra></extra>"),
                      row=row, col=col)
        fig.update_xaxes(cols_axis[i], row=row, col=col)
        fig.update_yaxes({**rows_axis[i], "autorange": "reversed"}, row=row, col=col)
    w = symmetric_range(*mats) if any(m.size for m in mats) else 1.0
    colorbar = {"title": {"text": bar}}
    if compact:
        colorbar = {"title": {"text": bar, "side": "right"}, "orientation": "h", "x": 0.0, "xanchor": "left",
                    "y": 0.0, "yanchor": "bottom", "yref": "container", "thickness": 10, "lenmode": "pixels", "len": 240}
    fig.update_layout(coloraxis={"colorscale": colour, "cmin": -w, "cmax": w, "colorbar": colorbar},
                      height=plots_px + margin["t"] + margin["b"] + (0 if compact else 50), margin=margin)
    return fig


def latent_cache_figure(latent: np.ndarray, k_rope: np.ndarray, key_tokens: Sequence[str], *,
                        compact: bool = False) -> go.Figure:
    """What the cache holds for each key token: the latent c_KV [S × kv_latent] and the rotated key part shared by
    every head k_rope [S × r] (r = 0: the latent alone), on one diverging colour axis."""
    S = latent.shape[0]
    if latent.ndim != 2 or k_rope.ndim != 2 or k_rope.shape[0] != S or len(key_tokens) != S:
        raise ValueError(f"latent (S, kv_latent) and k_rope (S, r) for S = {len(key_tokens)} key tokens, got "
                         f"{latent.shape} and {k_rope.shape}")
    mats = [latent] + ([k_rope] if k_rope.shape[1] else [])
    titles = [f"latent c_KV [{S}×{latent.shape[1]}]"] + (
        [f"k_rope, rotated, every head's [{S}×{k_rope.shape[1]}]"] if k_rope.shape[1] else [])
    hover = ["token %{y}, latent dim %{x}: %{z:.3f}", "token %{y}, rotary dim %{x}: %{z:.3f}"][: len(mats)]
    rows = [token_axis(key_tokens, "key token")] + [token_axis(key_tokens)] * (len(mats) - 1)
    cols = [index_axis(m.shape[1], t) for m, t in zip(mats, ("latent dimension", "rotary dimension"))]
    return _panels(mats, titles, compact=compact, colour="RdBu", bar="value", hover=hover, rows_axis=rows,
                   cols_axis=cols, row_px=min(480, max(160, 18 * S)))


def up_projections_figure(W_UK: np.ndarray, W_UV: np.ndarray, head: int, *, compact: bool = False) -> go.Figure:
    """Head h's up-projections from the latent: W_UK[h] [kv_latent × d_k] and W_UV[h] [kv_latent × d_v]."""
    if W_UK.ndim != 2 or W_UV.ndim != 2 or W_UK.shape[0] != W_UV.shape[0]:
        raise ValueError(f"W_UK (kv_latent, d_k) and W_UV (kv_latent, d_v) read the same latent, got {W_UK.shape} "
                         f"and {W_UV.shape}")
    L = W_UK.shape[0]
    titles = [f"W_UK[{head}] [{L}×{W_UK.shape[1]}]: latent → key", f"W_UV[{head}] [{L}×{W_UV.shape[1]}]: latent → value"]
    hover = ["latent dim %{y} → key dim %{x}: %{z:.3f}", "latent dim %{y} → value dim %{x}: %{z:.3f}"]
    rows = [index_axis(L, "latent dimension"), index_axis(L)]
    cols = [index_axis(W_UK.shape[1], "key dimension"), index_axis(W_UV.shape[1], "value dimension")]
    return _panels([W_UK, W_UV], titles, compact=compact, colour="PiYG", bar="weight", hover=hover, rows_axis=rows,
                   cols_axis=cols, row_px=min(480, max(160, 10 * L)))


def rebuilt_kv_figure(keys: np.ndarray, values: np.ndarray, rope_dim: int, key_tokens: Sequence[str], head: int, *,
                      compact: bool = False) -> go.Figure:
    """Head h's keys [S × (r + d_k)], the shared rotary part first (a line after it), and values [S × d_v], as
    rebuilt from the cache."""
    S = len(key_tokens)
    if keys.shape[0] != S or values.shape[0] != S or not 0 <= rope_dim <= keys.shape[1]:
        raise ValueError(f"keys (S, r + d_k) and values (S, d_v) for S = {S}, r = {rope_dim}: got {keys.shape}, "
                         f"{values.shape}")
    n = keys.shape[1] - rope_dim
    k_title = (f"K[{head}] = [k_rope | c_KV W_UK[{head}]] [{S}×({rope_dim}+{n})]" if rope_dim
               else f"K[{head}] = c_KV W_UK[{head}] [{S}×{n}]")
    titles = [k_title, f"V[{head}] = c_KV W_UV[{head}] [{S}×{values.shape[1]}]"]
    hover = ["token %{y}, key dim %{x}: %{z:.3f}", "token %{y}, value dim %{x}: %{z:.3f}"]
    rows = [token_axis(key_tokens, "key token"), token_axis(key_tokens)]
    cols = [index_axis(keys.shape[1], "key dimension"), index_axis(values.shape[1], "value dimension")]
    fig = _panels([keys, values], titles, compact=compact, colour="RdBu", bar="value", hover=hover, rows_axis=rows,
                  cols_axis=cols, row_px=min(480, max(160, 18 * S)))
    if rope_dim:
        fig.add_vline(x=rope_dim - 0.5, line={"color": "black", "width": 2}, row=1, col=1)
    return fig
