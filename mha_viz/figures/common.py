"""Helpers shared by the figures: safe token labels, integer token axes, compact arrays.

Axes are integer positions with token tick labels: a category axis would silently merge
repeated tokens ("the" ... "the"). Arrays go out as float32 (Plotly sends them as binary).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

# Hover labels are one pair of strings per cell and per heatmap, and serialising them costs ~2 µs
# each: 12 heads at 64 tokens took 0.28 s and 1 MB. Above this many cells per figure, the hover
# shows positions (the axes still show the tokens).
HOVER_TOKENS_MAX_CELLS = 12 * 32 * 32
MAX_TICKS = 48


def token_label(token: str, max_chars: int = 16) -> str:
    """A token as inert label text: HTML-escaped (Plotly renders a subset of HTML) and shortened."""
    short = token if len(token) <= max_chars else token[: max_chars - 1] + "…"
    return html.escape(short, quote=True) or "␣"


def token_axis(
    tokens: Sequence[str], title: str | None = None, offset: int = 0, max_ticks: int = MAX_TICKS, step: int | None = None
) -> dict:
    """Axis settings that label integer positions offset, offset+1, ... with their tokens: every step-th one
    (default: thinned so that at most max_ticks are labelled)."""
    step = step or max(1, -(-len(tokens) // max_ticks))
    positions = list(range(0, len(tokens), step))
    return {
        "tickmode": "array",
        "tickvals": [offset + i for i in positions],
        "ticktext": [token_label(tokens[i]) for i in positions],
        "title": {"text": title} if title else None,
        "showgrid": False,
        "zeroline": False,
    }


def index_axis(n: int, title: str | None = None) -> dict:
    return {"title": {"text": title} if title else None, "showgrid": False, "zeroline": False, "range": [-0.5, n - 0.5]}


def f32(a: np.ndarray) -> np.ndarray:
    """float32 copy with -inf/inf replaced by NaN (JSON has no infinity; NaN draws as a gap)."""
    out = np.asarray(a, dtype=np.float32).copy()
    out[~np.isfinite(out)] = np.nan
    return out


def max_pool(a: np.ndarray, side: int) -> tuple[np.ndarray, int, int]:
    """Max-pool the last two axes in blocks so that neither exceeds side: (pooled, block rows, block cols).

    Max, not mean, so that a sharp peak stays visible in a thumbnail of a long input.
    """
    *lead, T, S = a.shape
    bt, bs = -(-T // side), -(-S // side)
    if bt == bs == 1:
        return a, 1, 1
    pad = np.full((*lead, -(-T // bt) * bt, -(-S // bs) * bs), -np.inf, dtype=np.float32)
    pad[..., :T, :S] = a
    blocks = pad.reshape(*lead, pad.shape[-2] // bt, bt, pad.shape[-1] // bs, bs)
    return blocks.max(axis=(-3, -1)), bt, bs


def pair_labels(rows: Sequence[str], cols: Sequence[str], copies: int = 1) -> np.ndarray | None:
    """customdata [T, S, 2] of (row token, column token) for hover, or None when `copies` of it are too large."""
    if copies * len(rows) * len(cols) > HOVER_TOKENS_MAX_CELLS:
        return None
    r = np.array([token_label(t, 24) for t in rows], dtype=object)
    c = np.array([token_label(t, 24) for t in cols], dtype=object)
    return np.stack(np.broadcast_arrays(r[:, None], c[None, :]), axis=-1)


def symmetric_range(*arrays: np.ndarray) -> float:
    """Largest finite |value| over the arrays (at least a tiny positive number)."""
    m = max(float(np.nanmax(np.abs(np.where(np.isfinite(a), a, np.nan)))) if np.isfinite(a).any() else 0.0 for a in arrays)
    return m or 1e-9


def subplot_grid(
    rows: int,
    cols: int,
    *,
    titles: Sequence[str] | None = None,
    h_gap: float = 0.02,
    v_gap: float = 0.06,
    col_widths: Sequence[float] | None = None,
) -> tuple[dict, list[tuple[str, str]]]:
    """A layout dict with one x/y axis pair per cell (row-major), and each cell's (xref, yref).

    Plain dicts instead of make_subplots + update_xaxes: building a 12-head figure that way
    takes ~0.5 s of Plotly validation, this way milliseconds (figure build time is slider lag).
    """
    widths = np.asarray(col_widths if col_widths is not None else [1.0] * cols, dtype=float)
    widths = widths / widths.sum() * (1 - h_gap * (cols - 1))
    cell_h = (1 - v_gap * (rows - 1)) / rows
    layout: dict = {"annotations": []}
    refs = []
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        suffix = "" if i == 0 else str(i + 1)
        x0 = float(widths[:c].sum() + c * h_gap)
        x1 = x0 + float(widths[c])
        y1 = 1 - r * (cell_h + v_gap)
        layout[f"xaxis{suffix}"] = {"domain": [x0, x1], "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"domain": [max(0.0, y1 - cell_h), y1], "anchor": f"x{suffix}"}
        refs.append((f"x{suffix}", f"y{suffix}"))
        if titles is not None and i < len(titles):
            layout["annotations"].append(
                {"text": titles[i], "x": (x0 + x1) / 2, "y": y1, "xref": "paper", "yref": "paper",
                 "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 13}}
            )
    return layout, refs


def axis_key(ref: str) -> str:
    """'x3' -> 'xaxis3', 'y' -> 'yaxis': the layout key of a trace's axis reference."""
    return f"{ref[0]}axis{ref[1:]}"


def with_automargin(fig: go.Figure) -> go.Figure:
    """fig with Plotly's automargin on every axis that did not turn it off, so that no label is cut off.

    The heads grid turns it off and sets margins that fit its labels (automargin is a second layout pass).
    """
    for axis in (*fig.select_xaxes(), *fig.select_yaxes()):
        if axis.automargin is None:
            axis.automargin = True
    return fig
