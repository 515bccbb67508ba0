"""The layer control of a pretrained model: layer buttons, and the subtitle that names the layer, which switch a heads
chart between layers in the browser, without waiting for the server.

Every layer's weights go to the page once, as uint16 (2 bytes a cell). The browser decodes code v as
lo + v * step, step = (hi - lo) / 65534, in float64, and keeps it in a Float32Array, which rounds it by at
most max(|lo|, |hi|) * 2^-24. The code is the nearest one (error <= step / 2 + max(|lo|, |hi|) * 2^-24, e.g.
7.69e-6 for weights in [0, 1]) unless the hover's 3 decimals (%{z:.3f}: toFixed(3)) of its decoded value would
differ from the true value's; then it is the neighbour that shows the same 3 decimals (error <= step +
max(|lo|, |hi|) * 2^-24, 1.53e-5 in [0, 1]), so the hover shows the server's numbers before its rerun
(wherever step < 0.001, i.e. hi - lo < 65.5). A click repaints the chart from them, rewrites the subtitle and
writes the layer into the URL; then the server is told, and its rerun redraws the page at that layer (the other
views follow). Without the weights (other views, or more than MAX_BYTES), the buttons and subtitle change at once
and the server is told at once.
The same bytes let a click on an overview thumbnail open that head at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import streamlit as st

from ..layer_payload import (  # noqa: F401 - the payload's format, shared with the notebook widget
    FLOAT32_UNIT,
    MAX_BYTES,
    NAN,
    _with_json,
    codes,
    decoded,
    fits,
    hover_digits,
    pack,
    paint_style,
    with_header,
)
from ..limits import MAX_LAYERS, client_int
from .state import widget

_component = st.components.v2.component(
    "mha_viz.layer_switch",
    html='<p class="subtitle"></p><div class="layer-switch" role="group" aria-label="Layer"></div>',
    css="""
.layer-switch { display: flex; flex-wrap: wrap; align-items: center; gap: 0.25rem; font-family: inherit; }
.label { margin-right: 0.4rem; font-size: 0.9rem; }
button { min-width: 2.2rem; padding: 0.2rem 0.5rem; border-radius: 0.5rem; cursor: pointer; font: inherit;
         border: 1px solid var(--st-border-color, #d5dae5); background: var(--st-background-color, #fff);
         color: var(--st-text-color, #31333f); }
button:hover { border-color: var(--st-primary-color, #ff4b4b); color: var(--st-primary-color, #ff4b4b); }
button[aria-pressed="true"] { background: var(--st-primary-color, #ff4b4b); border-color: var(--st-primary-color, #ff4b4b);
                              color: #fff; }
.note { margin-left: 0.5rem; font-size: 0.8rem; opacity: 0.6; }
.subtitle { margin: 0 0 0.4rem; font-size: 0.875rem; color: var(--st-text-color, #31333f); }
.subtitle:empty { display: none; }
""",
    js=(Path(__file__).with_name("layer_switch.js")).read_text(encoding="utf-8"),
)


def picked_layer(value: object) -> int | None:
    """The layer the component's value names, or None for anything else a (crafted) browser sends (negative,
    NaN, huge, a string, another type): checked like the URL's layer."""
    return client_int(value.get("layer") if isinstance(value, Mapping) else None, 0, MAX_LAYERS - 1)


def no_weights(layers: int) -> bytes:
    """A payload of layers without weights: buttons and subtitle only, every click goes to the server."""
    return _with_json({"layers": layers, "heads": 0, "rows": 0, "cols": 0, "lo": 0.0, "hi": 1.0, "labels": []}, b"")


def layer_buttons(payload: bytes, layer: int, chart: str | None, key: str, on_change: Callable[[int], None],
                  subtitle: tuple[str, str] = ("", "")) -> None:
    """The page's one layer control: the subtitle (before + layer + after, rewritten by a click) above layer buttons,
    which repaint the chart with key `chart` (its heatmaps: every head of the layer shown) when the payload holds
    the weights; on_change(layer) runs on the server once the clicks pause."""
    def changed() -> None:
        picked = picked_layer(widget(key))
        if picked is not None:
            on_change(picked)

    _component(data=with_header(payload, active=layer, chart=chart, param="layer", thumbnails=None,
                                subtitle=list(subtitle), paint=paint_style()), key=key, on_layer_change=changed)


def open_on_click(payload: bytes, chart: str, thumbnails: str, key: str) -> None:
    """A click on a thumbnail of the chart with key `thumbnails` (points with customdata [layer, head]) repaints
    the one-head chart with key `chart` at once (its heatmap painted, then Plotly's redraw of its title and colour
    bar once the browser is idle); the thumbnails' own click event tells the server."""
    _component(data=with_header(payload, chart=chart, thumbnails=thumbnails, paint=paint_style()), key=key, height=0)
