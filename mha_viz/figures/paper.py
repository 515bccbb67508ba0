"""The "paper" preset: a figure made ready for a printed page (numbers in CSS px, 96 to the inch, as SVG and
Chromium's PDF read them: 1 px = 0.75 pt).

- width: one column of a two-column paper (3.5 in = 336 px) or the full text width (columns=2: 7 in = 672 px); the
  plotting area keeps its aspect ratio, or grows taller to give each token row a line (up to a page, 9 in);
- fonts: 8 pt (title 9 pt) at that final size, Arial or its metric twins;
- no toolbar strip at the top (a static file has no toolbar), white background;
- colour: heatmaps on viridis, light to dark (colour-blind safe, lightness monotone, so it prints in greyscale);
  signed values on ColorBrewer's RdBu (colour-blind safe; its lightness falls monotonically away from 0);
- token labels never clipped: margins from the labels' lengths, labels turned upright when they do not fit side by side
  and thinned to every n-th where even then they would overlap.

A wide grid (12 heads) fits the text width (columns=2) better than one column.
"""

from __future__ import annotations

import copy
import html
import math

import numpy as np
import plotly.colors as pc
import plotly.graph_objects as go

from .common import LINE_EM, WIDE_PX, text_px, wrap

PX_PER_PT = 96 / 72
COLUMN_PX = {1: 336, 2: 672}  # 3.5 in and 7 in at 96 px per inch
FONT_PT, TITLE_PT = 8, 9
FONT_PX, TITLE_PX = FONT_PT * PX_PER_PT, TITLE_PT * PX_PER_PT
MAX_HEIGHT_PX = 864  # 9 in: a page's text height; past it labels are thinned rather than the figure made taller
FONT_FAMILY = "Arial, 'Liberation Sans', Helvetica, 'DejaVu Sans', sans-serif"
TICK_PAD_PX = 6  # between an axis and its labels (tick length and Plotly's gap)
COLOUR_BAR_PX = 10  # a colour bar's thickness
# viridis from light (0) to dark (the largest value): more ink where attention is stronger
SEQUENTIAL = [[i / (len(pc.sequential.Viridis) - 1), c] for i, c in enumerate(reversed(pc.sequential.Viridis))]
DIVERGING = [[i / (len(pc.diverging.RdBu) - 1), c] for i, c in enumerate(pc.diverging.RdBu)]  # red < 0 < blue
COLOURED_TRACES = ("heatmap", "contour", "histogram2d", "surface")


def paper_figure(fig: go.Figure, *, columns: int = 1) -> go.Figure:
    """A copy of fig laid out for print (see the module's docstring); fig itself is left as it was.

    columns: 1 (3.5 in wide) or 2 (7 in, a figure* across both columns of a two-column paper).
    """
    if columns not in COLUMN_PX:
        raise ValueError(f"columns must be 1 or 2 (a column or the text width of a paper), got {columns!r}")
    out = go.Figure(copy.deepcopy(fig.to_dict()))
    layout = out.layout
    old_width = layout.width or WIDE_PX  # the figures' default width
    old_height = layout.height or 450
    old = layout.margin
    old_l, old_r, old_t, old_b = (v if v is not None else d for v, d in ((old.l, 80), (old.r, 80), (old.t, 100), (old.b, 80)))
    width = COLUMN_PX[columns]
    _colours(out)
    _fonts(out)
    margin_l, margin_b, margin_r = (math.ceil(m) for m in _side_margins(out, width))
    margin_t = math.ceil(_top(out, width))
    area_w = width - margin_l - margin_r
    old_area_w, old_area_h = max(1, old_width - old_l - old_r), max(1, old_height - old_t - old_b)
    area_h = min(max(old_area_h * area_w / old_area_w, _rows_px(out)), MAX_HEIGHT_PX - margin_t - margin_b)
    _thin_labels(out, area_w, area_h)
    layout.update(width=width, height=margin_t + math.ceil(area_h) + margin_b, template=None,
                  margin={"l": margin_l, "r": margin_r, "t": margin_t, "b": margin_b, "pad": 0},
                  paper_bgcolor="white", plot_bgcolor="white")
    return out


def _colours(fig: go.Figure) -> None:
    """Every colour axis and coloured trace on SEQUENTIAL, or DIVERGING where its values go below 0."""
    for name in [k for k in fig.layout if k.startswith("coloraxis")]:
        axis = fig.layout[name]
        users = [t for t in fig.data if getattr(t, "coloraxis", None) == name]
        signed = (axis.cmin is not None and axis.cmin < 0) or axis.cmid == 0 or any(_negative(t) for t in users)
        axis.colorscale = DIVERGING if signed else SEQUENTIAL
        axis.reversescale = False
        _bar(axis.colorbar)
    for trace in fig.data:
        if trace.type in COLOURED_TRACES and getattr(trace, "coloraxis", None) is None:
            signed = (trace.zmin is not None and trace.zmin < 0) or trace.zmid == 0 or _negative(trace)
            trace.colorscale = DIVERGING if signed else SEQUENTIAL
            trace.reversescale = False
            _bar(trace.colorbar)


def _negative(trace: go.BaseTraceType) -> bool:
    z = getattr(trace, "z", None)
    if z is None:
        return False
    try:
        values = np.asarray(z, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return bool((values[np.isfinite(values)] < 0).any())


def _bar(colorbar: go.heatmap.ColorBar) -> None:
    colorbar.thickness = COLOUR_BAR_PX
    colorbar.outlinewidth = 0
    if colorbar.orientation != "h":
        colorbar.update(x=1, xanchor="left", xpad=4, xref="paper", y=0.5, yanchor="middle", yref="paper",
                        len=1, lenmode="fraction")


def _fonts(fig: go.Figure) -> None:
    """FONT_PX everywhere (TITLE_PX for the title), in one family."""
    layout = fig.layout
    layout.font = {"family": FONT_FAMILY, "size": FONT_PX, "color": "black"}
    layout.title.font = {"size": TITLE_PX}
    layout.legend.font.size = FONT_PX
    for note in layout.annotations:
        note.font.size = FONT_PX
        if note.text:
            note.text = note.text.replace("<b>", "").replace("</b>", "")
    for axis in (*fig.select_xaxes(), *fig.select_yaxes()):
        axis.tickfont.size = FONT_PX
        axis.title.font.size = FONT_PX
        axis.automargin = True  # our margins fit the labels; Plotly grows them should a guess fall short
        if axis.showticklabels is False:
            axis.ticks = ""  # a tick mark without its label, between two panels, is clutter on paper
    for name in [k for k in layout if k.startswith("coloraxis")]:
        layout[name].colorbar.tickfont.size = FONT_PX
        layout[name].colorbar.title.font.size = FONT_PX
    for trace in fig.data:
        if getattr(trace, "colorbar", None) is not None:
            trace.colorbar.tickfont.size = FONT_PX
            trace.colorbar.title.font.size = FONT_PX


def _labels(axis) -> list[str]:
    if axis.showticklabels is False or axis.ticktext is None:
        return []
    return [html.unescape(str(t)) for t in axis.ticktext]


def _line_px(font_px: float = FONT_PX) -> float:
    return LINE_EM * font_px


def _side_margins(fig: go.Figure, width: int) -> tuple[float, float, float]:
    """(left, bottom, right) in px: the widest query label (and an axis title) on the left, the longest key label
    (upright when they do not fit side by side) below, the colour bar and its numbers on the right."""
    left = bottom = 4.0
    for axis in fig.select_yaxes():
        if axis.side == "right":
            continue
        labels = _labels(axis)
        need = (max((text_px(t, FONT_PX) for t in labels), default=text_px("0.00", FONT_PX)) + TICK_PAD_PX
                + (_line_px() + 2 if axis.title.text else 0))
        left = max(left, need)
    area = max(1.0, width - left - 60)
    for axis in fig.select_xaxes():
        labels = _labels(axis)
        share = area * ((axis.domain[1] - axis.domain[0]) if axis.domain else 1.0)
        if labels:
            upright = _too_wide(labels, share)
            axis.tickangle = -90 if upright else 0
            label_h = max(text_px(t, FONT_PX) for t in labels) if upright else _line_px()
        else:
            label_h = _line_px()
        bottom = max(bottom, label_h + TICK_PAD_PX + (_line_px() + 2 if axis.title.text else 0))
    right = 8.0
    bars = [fig.layout[k].colorbar for k in fig.layout if k.startswith("coloraxis")]
    bars += [t.colorbar for t in fig.data if t.type in COLOURED_TRACES and getattr(t, "coloraxis", None) is None
             and t.showscale is not False]
    for bar in bars:
        if bar.orientation == "h":
            continue
        title = html.unescape(bar.title.text or "")
        right = max(right, 4 + COLOUR_BAR_PX + 4 + text_px("0.00", FONT_PX) + (_line_px() + 4 if title else 0))
        if title:
            bar.title.side = "right"
    return left, bottom, right


def _too_wide(labels: list[str], room_px: float) -> bool:
    """Whether the labels, level, would overlap on an axis room_px long."""
    return max(text_px(t, FONT_PX) for t in labels) + 4 > room_px / len(labels)


def _top(fig: go.Figure, width: int) -> float:
    """The top margin: the title (wrapped to the width) over the panel titles, and no toolbar strip."""
    layout = fig.layout
    panel_titles = [a for a in layout.annotations if a.yref == "paper" and a.yanchor == "bottom" and (a.y or 0) >= 0.999]
    panels_px = max(((str(a.text or "").count("<br>") + 1) * _line_px() + 2 for a in panel_titles), default=0)
    top = panels_px + 4
    if layout.title.text:
        text = wrap(layout.title.text.replace("<br>", " "), width - 8, TITLE_PX)
        lift = text.count("<br>") * _line_px(TITLE_PX)
        layout.title = {"text": text, "x": 0, "xref": "paper", "xanchor": "left", "y": 1, "yref": "paper",
                        "yanchor": "bottom", "pad": {"b": int(panels_px + lift) + 2}, "font": {"size": TITLE_PX}}
        top += (text.count("<br>") + 1) * _line_px(TITLE_PX) + 4
    return top


def _rows_px(fig: go.Figure) -> float:
    """The plotting area's height in px that gives every y label one line."""
    need = 0.0
    for axis in fig.select_yaxes():
        labels = _labels(axis)
        if labels:
            need = max(need, len(labels) * _line_px() / ((axis.domain[1] - axis.domain[0]) if axis.domain else 1.0))
    return need


def _thin_labels(fig: go.Figure, area_w: float, area_h: float) -> None:
    """Keep every n-th token label where, at FONT_PX, neighbours would overlap (upright x labels and level y labels
    need one line height each); fig.layout.meta["paper_label_step"] says the largest n."""
    largest = 1
    axes = [*((a, area_w, False) for a in fig.select_xaxes()), *((a, area_h, True) for a in fig.select_yaxes())]
    for axis, length, vertical in axes:
        if axis.tickvals is None or axis.ticktext is None or len(axis.tickvals) < 2:
            continue
        if not vertical and axis.tickangle not in (-90, 90):
            continue  # level x labels: _side_margins turned them upright if they did not fit side by side
        share = length * ((axis.domain[1] - axis.domain[0]) if axis.domain else 1.0)
        step = max(1, math.ceil(_line_px() / max(share / len(axis.tickvals), 1e-9)))
        values, texts = list(axis.tickvals), list(axis.ticktext)
        if step > 1:
            axis.tickvals, axis.ticktext = values[::step], texts[::step]
            largest = max(largest, step)
        if not vertical and len(axis.tickvals) > 1 and _crowds_next_panel(fig, axis, values, share, area_w):
            axis.tickvals, axis.ticktext = list(axis.tickvals)[:-1], list(axis.ticktext)[:-1]
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.layout.meta = {**meta, "paper_label_step": largest}


def _crowds_next_panel(fig: go.Figure, axis, values: list[float], share: float, area_w: float) -> bool:
    """Whether axis's last upright label stands less than a line from the first label of the panel to its right
    (their positions taken as the cells' centres of a token axis labelled at values, before thinning)."""
    if not axis.domain:
        return False
    gaps = [other.domain[0] - axis.domain[1] for other in fig.select_xaxes()
            if other.domain and other.domain[0] >= axis.domain[1] and other is not axis]
    if not gaps:
        return False
    spacing = values[1] - values[0]
    low, high = values[0] - spacing / 2, values[-1] + spacing / 2
    px = share / max(high - low, 1e-9)
    kept = list(axis.tickvals)
    room = (high - kept[-1]) * px + min(gaps) * area_w + (kept[0] - low) * px
    return room < _line_px()
