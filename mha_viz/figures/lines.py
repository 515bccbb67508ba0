"""Lines view (BertViz's head view): query tokens in one column, key tokens in another, a line per pair.

A line's opacity is the attention weight, its colour the head's. Heads are overlaid (or one at a
time); picking a token keeps only its lines: a query's lines to every key, or a key's lines from
every query. Weights below MIN_WEIGHT draw no line (they would be invisible anyway), and lines
are grouped into a few opacity levels, one Plotly trace per head and level.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..limits import MAX_LONG_TOKENS, client_int
from ..trace import AttentionTrace
from .common import WIDE_PX, text_px, title_block, token_label

MAX_LINE_TOKENS = 64  # beyond this many tokens a side, lines merge into a blur: show a window
MIN_WEIGHT = 0.02
LEVELS = np.array([0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0 + 1e-6])  # opacity levels: [LEVELS[i], LEVELS[i+1])
ROW_PX = 22
LEGEND_ROW_PX = 30  # a row of the heads' legend
HEAD_COLOURS = ("#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#B68100", "#750D86", "#EB663B",
                "#511CFB", "#00A08B", "#FB00D1", "#6C7C32", "#778AAE", "#862A16", "#A777F1", "#222A2A")
QUERY_X, KEY_X = 0.0, 1.0


def head_colour(head: int) -> str:
    return HEAD_COLOURS[head % len(HEAD_COLOURS)]


def _segments(rows: np.ndarray, cols: np.ndarray, q0: int, k0: int) -> tuple[np.ndarray, np.ndarray]:
    """x, y of line segments (query row -> key col) separated by NaN gaps: 3 points a line."""
    n = len(rows)
    x = np.tile(np.array([QUERY_X, KEY_X, np.nan], dtype=np.float32), n)  # (3n,)
    y = np.empty(3 * n, dtype=np.float32)
    y[0::3], y[1::3], y[2::3] = rows + q0, cols + k0, np.nan
    return x, y


def _top_keys(weights: np.ndarray, heads: Sequence[int], i: int, keys: Sequence[str], n: int = 3) -> str:
    """Hover text of query row i: the n keys each head attends to most."""
    parts = []
    for h in heads:
        row = weights[h, i]
        top = np.argsort(-row, kind="stable")[:n]
        parts.append(f"head {h}: " + ", ".join(f"{token_label(keys[j], 12)} {row[j]:.2f}" for j in top if row[j] > 0))
    return "<br>".join(parts[:8]) + ("<br>…" if len(parts) > 8 else "")


def lines_figure(
    trace: AttentionTrace,
    heads: Sequence[int] | None = None,
    *,
    pick: tuple[str, int] | None = None,
    start: int = 0,
    title: str | None = None,
    width: int | None = None,
) -> go.Figure:
    """Lines between query tokens (left) and key tokens (right) for the chosen heads (default: all, overlaid).

    pick ("query", i) keeps query i's lines, ("key", j) key j's lines. start: the first position shown;
    at most MAX_LINE_TOKENS tokens a side from there. Token markers carry customdata [side, position]
    so that a click on them can pick the token. width: the px the figure is drawn at (the legend of the heads
    wraps to it; default a desktop page's).
    """
    H, T, S = trace.weights.shape
    heads = list(range(H)) if heads is None else list(heads)
    if not heads or any(not 0 <= h < H for h in heads):
        raise ValueError(f"pick heads from 0 to {H - 1}, got {heads}")
    if pick is not None and (pick[0] not in ("query", "key") or not 0 <= pick[1] < (T if pick[0] == "query" else S)):
        raise ValueError(f"no {pick[0]} token {pick[1]}")
    q0, k0 = min(start, max(0, T - 1)), min(start, max(0, S - 1))
    q1, k1 = min(T, q0 + MAX_LINE_TOKENS), min(S, k0 + MAX_LINE_TOKENS)
    w = trace.weights[:, q0:q1, k0:k1]  # (H, t, s)
    keep = np.ones(w.shape[1:], dtype=bool)  # (t, s)
    if pick is not None:
        side, pos = pick
        keep[:] = False
        if side == "query" and q0 <= pos < q1:
            keep[pos - q0, :] = True
        elif side == "key" and k0 <= pos < k1:
            keep[:, pos - k0] = True
    data: list[dict] = []
    for h in heads:
        colour, group = head_colour(h), f"head {h}"
        data.append({"type": "scatter", "x": [None], "y": [None], "mode": "lines", "name": group,
                     "legendgroup": group, "line": {"color": colour, "width": 3}, "hoverinfo": "skip"})
        level = np.digitize(w[h], LEVELS) - 1  # (t, s) -1 below MIN_WEIGHT
        for lv in range(len(LEVELS) - 1):
            rows, cols = np.nonzero((level == lv) & keep)
            if not len(rows):
                continue
            x, y = _segments(rows, cols, q0, k0)
            data.append({"type": "scatter", "x": x, "y": y, "mode": "lines", "legendgroup": group,
                         "showlegend": False, "hoverinfo": "skip", "opacity": float(min(1.0, LEVELS[lv + 1])),
                         "line": {"color": colour, "width": 2}})
    q_tokens, k_tokens = trace.query_tokens[q0:q1], trace.key_tokens[k0:k1]
    picked = {"query": -1, "key": -1} if pick is None else {pick[0]: pick[1], "query" if pick[0] == "key" else "key": -1}
    hover_q = [_top_keys(trace.weights, heads, q0 + i, trace.key_tokens) for i in range(len(q_tokens))]
    for side, x, tokens, offset, position in (("query", QUERY_X, q_tokens, q0, "middle left"),
                                              ("key", KEY_X, k_tokens, k0, "middle right")):
        idx = np.arange(offset, offset + len(tokens))
        bold = [f"<b>{token_label(t)}</b>" if i == picked[side] else token_label(t) for i, t in zip(idx, tokens)]
        hover = hover_q if side == "query" else [
            f"key {j}: {token_label(t, 24)}<br>click: only the lines into this key" for j, t in zip(idx, tokens)]
        if side == "query":
            hover = [f"query {i}: {token_label(t, 24)}<br>{h}<br>click: only this query's lines"
                     for i, t, h in zip(idx, tokens, hover)]
        data.append({
            "type": "scatter", "x": np.full(len(tokens), x, dtype=np.float32), "y": idx.astype(np.float32),
            "mode": "markers+text", "text": bold, "textposition": position, "name": f"{side} tokens",
            "showlegend": False, "marker": {"size": 9, "color": "#31333F", "symbol": "circle"},
            "customdata": [[side, int(i)] for i in idx], "hovertext": hover, "hoverinfo": "text",
            "selected": {"marker": {"color": "crimson", "size": 12}}, "unselected": {"marker": {"opacity": 1.0}},
        })
    rows = max(q1 - q0, k1 - k0)
    longest = max((len(token_label(t)) for t in (*q_tokens, *k_tokens)), default=1)
    legend_h = _legend_rows(heads, (width or WIDE_PX) - 20) * LEGEND_ROW_PX + 10  # and its padding
    title_layout, top = title_block(title, (width or WIDE_PX) - 20, below_px=legend_h + 16)
    height = max(300, ROW_PX * rows + 50) + top
    layout = {
        "title": title_layout,
        "height": height,
        "margin": {"l": 10, "r": 10, "t": top, "b": 10},
        "xaxis": {"range": [-0.1 - 0.045 * longest, 1.1 + 0.045 * longest], "visible": False, "fixedrange": True},
        "yaxis": {"range": [q0 + rows - 0.5, q0 - 0.8], "visible": False, "fixedrange": True},
        "legend": {"orientation": "h", "yanchor": "top", "y": 1 - (top - legend_h - 16) / height, "xanchor": "left",
                   "x": 0, "yref": "container"},  # no title: Plotly wraps a titled horizontal legend past the edge
        "hovermode": "closest", "dragmode": False, "plot_bgcolor": "white",
        "annotations": [
            {"text": "<b>queries</b>", "x": QUERY_X, "y": q0 - 0.8, "xref": "x", "yref": "y", "showarrow": False,
             "xanchor": "right", "yanchor": "bottom"},
            {"text": "<b>keys</b>", "x": KEY_X, "y": q0 - 0.8, "xref": "x", "yref": "y", "showarrow": False,
             "xanchor": "left", "yanchor": "bottom"},
        ],
    }
    return go.Figure({"data": data, "layout": layout})


def _legend_rows(heads: Sequence[int], width: float) -> int:
    """Rows of the heads' legend across width px: as many entries a row as fit."""
    entry = max(40 + text_px(f"head {h}") + 12 for h in heads)  # the line sample, the name, the gap
    per_row = max(1, int(width // entry))
    return -(-len(heads) // per_row)


def picked_token(points: Sequence[dict]) -> tuple[str, int] | None:
    """The token a click on lines_figure picked, from a Plotly selection's points: ("query" | "key", position);
    None for anything else a (crafted) browser sends: values are checked like URL values."""
    for point in points if isinstance(points, (list, tuple)) else ():
        custom = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(custom, (list, tuple)) and len(custom) == 2 and custom[0] in ("query", "key"):
            position = client_int(custom[1], 0, MAX_LONG_TOKENS - 1)
            if position is not None:
                return str(custom[0]), position
    return None


def line_count(fig: go.Figure) -> int:
    """How many attention lines a lines_figure draws (3 points a line, NaN-separated)."""
    return sum(len(t.x) // 3 for t in fig.data if t.mode == "lines" and t.x is not None and len(t.x) > 1)

