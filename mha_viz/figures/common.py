"""Helpers shared by the figures: safe token labels, integer token axes, compact arrays.

Axes are integer positions with token tick labels: a category axis would silently merge
repeated tokens ("the" ... "the"). Arrays go out as float32 (Plotly sends them as binary).
"""

from __future__ import annotations

import colorsys
import html
import re
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

# Hover labels are one pair of strings per cell and per heatmap, and serialising them costs ~2 µs
# each: 12 heads at 64 tokens took 0.28 s and 1 MB. Above this many cells per figure, the hover
# shows positions (the axes still show the tokens).
HOVER_TOKENS_MAX_CELLS = 12 * 32 * 32
MAX_TICKS = 48
# Figures are laid out for the width they are drawn at (the app measures it; a notebook gets WIDE_PX). The
# estimates below are in CSS px at Plotly's default fonts (12 px labels, 16-17 px titles).
WIDE_PX, COMPACT_PX = 1000, 340  # a desktop page, a phone (390 px screen)
NARROW_PX = 600  # below this width figures take their compact layout (colour bars on top, panels stacked)
TOOLBAR_PX = 32  # the chart toolbar's strip at the top: titles start under it
CHAR_EM = 0.58  # a character's width in em, generous (Source Sans averages ~0.5)
LINE_EM = 1.35  # a line of text's height in em
TITLE_PX, PANEL_TITLE_PX, LABEL_FONT_PX = 17, 16, 12


CONTINUES = "◌"  # the label of a token that spells no character of its own (mha_viz.token_labels)
_BLANKS = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥"})


def visible_token(token: str) -> str:
    """A token as people can see it: "" (the rest of a character begun in the token before, as byte-level labels
    spell it) as CONTINUES, a token of blanks only with a visible sign for each; any other token as it is."""
    if not token:
        return CONTINUES
    return token.translate(_BLANKS) if token.isspace() else token


def token_label(token: str, max_chars: int = 16) -> str:
    """A token as inert label text: visible (visible_token), HTML-escaped (Plotly renders a subset of HTML) and
    shortened."""
    token = visible_token(token)
    short = token if len(token) <= max_chars else token[: max_chars - 1] + "…"
    return html.escape(short, quote=True)


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


def text_px(text: str, font_px: float = LABEL_FONT_PX) -> float:
    """An upper estimate of a one-line text's width in px."""
    return len(html.unescape(text)) * CHAR_EM * font_px


def wrap(text: str, width_px: float, font_px: float = TITLE_PX) -> str:
    """text with <br> between words so that no line is wider than width_px (Plotly does not wrap titles)."""
    per_line = max(6, int(width_px / (CHAR_EM * font_px)))
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(html.unescape(lines[-1])) + 1 + len(html.unescape(word)) <= per_line:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def lines_px(text: str, font_px: float = TITLE_PX) -> float:
    """The height in px of a (wrapped) text."""
    return (text.count("<br>") + 1) * LINE_EM * font_px


def title_block(title: str | None, width_px: float, below_px: float = 0) -> tuple[dict | None, int]:
    """A figure title wrapped to width_px, below_px above the plotting area (room for panel titles, a legend), and
    the top margin that puts it under the toolbar."""
    if not title:
        return None, int(TOOLBAR_PX + below_px)
    text = wrap(title, width_px)
    # Plotly anchors a title by its first line and puts the others under it: lift it by those lines.
    lift = lines_px(text) - lines_px("")
    layout = {"text": text, "x": 0, "xref": "paper", "xanchor": "left", "y": 1, "yref": "paper", "yanchor": "bottom",
              "pad": {"b": int(below_px + lift) + 4}}
    return layout, int(TOOLBAR_PX + lines_px(text) + 8 + below_px)


def token_tickangle(labels: Sequence[str], room_px: float | None = None) -> int:
    """-60 (rotated) for token tick labels, unless they are short (one or two characters read as slashes when
    rotated) or fit side by side, each under its tick, on an axis room_px long."""
    longest = max((len(html.unescape(t)) for t in labels), default=0)
    if longest <= 2:
        return 0
    if room_px is not None and labels:
        widths = [text_px(t) for t in labels]
        needed = max([w + 8 for w in widths[:1]] + [(a + b) / 2 + 8 for a, b in pairwise(widths)])
        if needed <= room_px / len(labels):
            return 0
    return -60


def plural(n: int, word: str) -> str:
    """ "1 head", "4 heads"."""
    return f"{n} {word}" + ("" if n == 1 else "s")


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


OUTLIER_PERCENTILE, OUTLIER_FACTOR = 99.0, 2.0  # clip a colour scale at the 99th percentile of |value| when the
# largest |value| is more than twice it: a few outliers would otherwise wash every other cell out to the middle colour


class ColourRange(NamedTuple):
    """A symmetric colour scale -limit..limit; clipped: the share of the finite values beyond it (0: none)."""

    limit: float
    clipped: float
    largest: float  # the largest finite |value|

    def ticks(self) -> dict:
        """Colour bar ticks at -limit, 0 and limit, the ends marked "≤" / "≥" when values lie beyond them."""
        ends = ("≤ ", "≥ ") if self.clipped else ("", "")
        return {"tickmode": "array", "tickvals": [-self.limit, 0.0, self.limit],
                "ticktext": [f"{ends[0]}{-self.limit:.3g}", "0", f"{ends[1]}{self.limit:.3g}"]}

    def sentence(self, what: str) -> str:
        """The clipping in words ("" when nothing is clipped)."""
        if not self.clipped:
            return ""
        return (f"{what}: colours clipped at ±{self.limit:.3g} (the {OUTLIER_PERCENTILE:g}th percentile of |value|); "
                f"{self.clipped:.1%} of the values lie beyond, up to {self.largest:.3g} in size, and take the end "
                "colours (hover a cell for its value).")


def robust_range(*arrays: np.ndarray) -> ColourRange:
    """A symmetric colour range that shows the structure of the arrays: the largest finite |value|, or, when that is
    more than OUTLIER_FACTOR times the OUTLIER_PERCENTILE-th percentile of |value| (a few outliers), that percentile."""
    values = np.abs(np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays]))
    values = values[np.isfinite(values)]
    if not values.size:
        return ColourRange(1e-9, 0.0, 0.0)
    largest, typical = float(values.max()), float(np.percentile(values, OUTLIER_PERCENTILE))
    if largest <= OUTLIER_FACTOR * typical or typical <= 0:
        return ColourRange(largest or 1e-9, 0.0, largest)
    return ColourRange(typical, float(np.mean(values > typical)), largest)


def head_colours(H: int) -> list[str]:
    """H colours, all different: Plotly's D3 palette up to 10 heads, its Dark24 up to 24; past that, hues spread
    evenly round the wheel at alternating lightness (neighbouring heads differ in hue and in lightness)."""
    for palette in (qualitative.D3, qualitative.Dark24):
        if H <= len(palette):
            return [c.lower() for c in palette[:H]]
    return ["#{:02x}{:02x}{:02x}".format(*tuple(round(255 * c) for c in colorsys.hls_to_rgb(h / H, 0.35 if h % 2 else 0.6, 0.85)))
            for h in range(H)]


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
    h_gap = min(h_gap, 0.5 / max(cols - 1, 1))  # hundreds of columns (Mamba's channels): the gaps take <= half
    widths = np.asarray(col_widths if col_widths is not None else [1.0] * cols, dtype=float)
    widths = widths / widths.sum() * (1 - h_gap * (cols - 1))
    cell_h = (1 - v_gap * (rows - 1)) / rows
    layout: dict = {"annotations": []}
    refs = []
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        suffix = "" if i == 0 else str(i + 1)
        x0 = float(widths[:c].sum() + c * h_gap)
        x1 = min(1.0, x0 + float(widths[c]))  # the last column's edge, summed over many gaps, can round past 1
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


def _plain(text: object) -> str:
    """Label text without Plotly's HTML (tags, entities, line breaks) and repeated spaces."""
    stripped = re.sub(r"<[^>]*>", " ", str(text or ""))
    return " ".join(html.unescape(stripped).split())


def _panel_title(fig: go.Figure, trace: go.BaseTraceType) -> str:
    """The trace's name, else the subplot title (an annotation) standing over its axes."""
    if getattr(trace, "name", None):
        return _plain(trace.name)
    xaxis = fig.layout[axis_key(getattr(trace, "xaxis", None) or "x")]
    yaxis = fig.layout[axis_key(getattr(trace, "yaxis", None) or "y")]
    if xaxis is None or yaxis is None or xaxis.domain is None or yaxis.domain is None:
        return ""
    (x0, x1), top = xaxis.domain, yaxis.domain[1]
    for note in fig.layout.annotations:
        if note.xref == "paper" and note.yref == "paper" and note.x is not None and note.y is not None \
                and x0 <= note.x <= x1 and abs(note.y - top) < 0.05:
            return _plain(note.text)
    return ""


def figure_title(fig: go.Figure) -> str:
    """A figure's name in words: its title, else its panels' titles ("" when it has neither)."""
    if fig.layout.title.text:
        return _plain(fig.layout.title.text)
    titles = [_plain(a.text) for a in fig.layout.annotations if a.xref == "paper" and len(_plain(a.text)) > 2]
    return "; ".join(titles[:4]) + (f"; and {len(titles) - 4} more" if len(titles) > 4 else "")


def _labeller(fig: go.Figure, ref: str | None, default: str, coords: object) -> Callable[[int], str]:
    """index along an axis -> words: its token label (tick text) where there is one, else the axis title and number."""
    axis = fig.layout[axis_key(ref or default)]
    title = _plain(axis.title.text) if axis is not None and axis.title is not None else ""
    ticks = {}
    if axis is not None and axis.tickvals is not None and axis.ticktext is not None:
        ticks = {v: _plain(t) for v, t in zip(axis.tickvals, axis.ticktext)}
    values = list(coords) if coords is not None else None

    def label(i: int) -> str:
        at = values[i] if values is not None and i < len(values) else i
        if isinstance(at, str):  # a category axis names its own positions
            return repr(_plain(at))
        if at in ticks:
            return f"{ticks[at]!r} ({title or ('row' if default == 'y' else 'column')} {at})"
        return f"{title or ('row' if default == 'y' else 'column')} {at}"

    return label


def _strongest(values: np.ndarray, top: int) -> np.ndarray:
    """Flat indices of the top largest values (by magnitude when some are negative), NaNs last."""
    finite = np.isfinite(values)
    score = np.where(finite, values, -np.inf).ravel()
    if (score[finite.ravel()] < 0).any():
        score = np.where(finite.ravel(), np.abs(score), -np.inf)
    k = min(top, int(finite.sum()))
    if k == 0:
        return np.zeros(0, dtype=int)
    best = np.argpartition(score, score.size - k)[score.size - k:]  # linear time: a figure may hold millions of cells
    return best[np.argsort(score[best])[::-1]]


def _heatmap_words(fig: go.Figure, trace: go.Heatmap, top: int) -> str:
    z = np.asarray(trace.z, dtype=np.float32)
    if z.ndim != 2 or z.size == 0 or not np.isfinite(z).any():
        return "no values"
    rows = _labeller(fig, trace.yaxis, "y", trace.y)
    cols = _labeller(fig, trace.xaxis, "x", trace.x)
    cells = [f"{rows(r)} × {cols(c)}: {z[r, c]:.3g}" for r, c in zip(*np.unravel_index(_strongest(z, top), z.shape))]
    return f"{z.shape[0]} × {z.shape[1]} cells, strongest " + "; ".join(cells)


def _bar_words(fig: go.Figure, trace: go.Bar, top: int) -> str:
    horizontal = trace.orientation == "h"
    values = np.asarray(trace.x if horizontal else trace.y, dtype=float)
    if values.size == 0 or not np.isfinite(values).any():
        return "no bars"
    names = _labeller(fig, trace.yaxis if horizontal else trace.xaxis, "y" if horizontal else "x",
                      trace.y if horizontal else trace.x)
    bars = [f"{names(int(i))}: {values[i]:.3g}" for i in _strongest(values, top)]
    return f"{values.size} bars, largest " + "; ".join(bars)


def describe(fig: go.Figure, *, top: int = 3, max_panels: int = 8) -> str:
    """A text alternative of a figure, for screen readers and anyone without the picture: its title, then for each
    heatmap or bar panel its size and its `top` strongest cells or bars (largest magnitude when values go negative,
    with their token labels), then how many line or marker traces it draws. At most max_panels panels are spelled
    out. Derived from the figure's data only, so it fits any figure of mha_viz.figures."""
    parts, others = [], 0
    panels = [t for t in fig.data if t.type in ("heatmap", "bar")]
    for trace in panels[:max_panels]:
        words = _heatmap_words(fig, trace, top) if trace.type == "heatmap" else _bar_words(fig, trace, top)
        title = _panel_title(fig, trace)
        parts.append(f"{title}: {words}" if title else words[0].upper() + words[1:])
    if len(panels) > max_panels:
        parts.append(f"and {len(panels) - max_panels} more panels")
    for trace in fig.data:
        if trace.type in ("heatmap", "bar"):
            continue
        y = np.asarray(trace.y if trace.y is not None else (), dtype=object)
        curve = trace.type == "scatter" and "lines" in (trace.mode or "lines") and y.size > 1
        if curve and trace.name and isinstance(y[-1], (int, float, np.number)) and np.isfinite(float(y[-1])):
            parts.append(f"line {_plain(trace.name)}: ends at {float(y[-1]):.3g}")
        else:
            others += 1
    if others:
        parts.append(f"{others} other line or marker trace{'s' if others > 1 else ''}")
    title = _plain(fig.layout.title.text)  # panel titles come with their panels
    kinds = sorted({t.type for t in fig.data})
    head = f"{title}. " if title else ""
    return f"{head}Chart ({', '.join(kinds) or 'empty'})." + "".join(f" {part}." for part in parts)


def under_toolbar(fig: go.Figure, width: int) -> go.Figure:
    """fig, drawn width px wide, with its top fitted under the toolbar when the figure did not place it itself
    (title_block): the title wrapped, then a legend over the plot, then the panel titles; the plotting area keeps
    its height."""
    layout = fig.layout
    if layout.title.text and layout.title.yref == "paper":
        return fig  # placed by title_block
    panel_titles = [a for a in layout.annotations or () if a.yref == "paper" and a.yanchor == "bottom" and (a.y or 0) >= 0.999]
    for note in panel_titles:  # each as wide as its share of the row at most
        if note.text and "<br>" not in note.text:
            note.text = wrap(note.text, (width - 100) / len(panel_titles), PANEL_TITLE_PX)
    panels_px = max((lines_px(a.text or "", PANEL_TITLE_PX) + 4 for a in panel_titles), default=0)
    legend = layout.legend
    named = [t.name or "" for t in fig.data if t.showlegend is not False and t.name]
    legend_on_top = bool(named) and legend.orientation == "h" and legend.yref != "container" and (legend.y or 0) >= 1
    legend_px = 0
    if legend_on_top:
        entry = max(40 + text_px(name) + 12 for name in named)
        legend_px = 28 * -(-len(named) // max(1, int((width - 20) // entry))) + 6
    title, top = title_block(layout.title.text, width - 20, below_px=panels_px + legend_px)
    current = layout.margin.t if layout.margin.t is not None else 100
    if top <= current and not layout.title.text:
        return fig
    height = (layout.height or 450) + max(0, top - current)
    fig.update_layout(title=title, height=height, margin={"t": max(top, current)})
    if legend_on_top:
        fig.update_layout(legend={"yref": "container", "yanchor": "top", "xanchor": "left", "x": 0,
                                  "y": 1 - (max(top, current) - panels_px - legend_px) / height})
    return fig
