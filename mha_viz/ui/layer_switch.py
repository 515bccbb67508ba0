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

import json
import struct
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.colors import hex_to_rgb, unlabel_rgb

from ..figures import heads
from ..limits import MAX_LAYERS, client_int

MAX_BYTES = 8 * 2**20  # larger stacks (e.g. 32 layers x 32 heads at 128 tokens) switch through the server
NAN = 65535
FLOAT32_UNIT = 2.0**-24  # float32's unit roundoff: |float32(y) - y| <= |y| * 2^-24

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


def paint_style() -> dict:
    """What the browser needs to paint heads_figure's heatmap images itself, sent with the buttons instead of read
    from Plotly's computed layout: the colour scale as [[position, [r, g, b]], ...] (the one Plotly draws, the
    figure's own explicit list), the background of a NaN cell as [r, g, b], and whether row 0 is at the top."""
    scale = go.layout.Coloraxis(colorscale=heads.COLORSCALE).colorscale
    return {"colorscale": [[float(p), [int(v) for v in unlabel_rgb(c)]] for p, c in scale],
            "background": list(hex_to_rgb(heads.BACKGROUND)), "downward": True}  # heads_figure: autorange="reversed"


def pack(stack: np.ndarray, labels: list[str]) -> bytes:
    """stack [L, H, t, s] (float, NaN allowed) and the heads' titles as the component's bytes: a JSON header,
    then uint16 cells. with_header() then says which chart they go to."""
    L, H, t, s = stack.shape
    finite = np.isfinite(stack)
    lo = min(float(stack[finite].min()), 0.0) if finite.any() else 0.0
    hi = max(float(stack[finite].max()), lo + 1e-12) if finite.any() else 1.0
    q = np.full(stack.shape, NAN, dtype="<u2")  # (L, H, t, s)
    q[finite] = codes(stack[finite], lo, hi)
    return _with_json({"layers": L, "heads": H, "rows": t, "cols": s, "lo": lo, "hi": hi, "labels": labels},
                      q.tobytes())


def decoded(codes: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """What layer_switch.js keeps of codes (none NaN): lo + v * step in float64, then float32."""
    return (lo + codes.astype(np.float64) * ((hi - lo) / (NAN - 1))).astype(np.float32)


def hover_digits(values: np.ndarray) -> np.ndarray:
    """The hover's %{z:.3f} of float32 values, in thousandths: d3-format's toFixed(3) of |x|, signed (-0 is 0).
    x * 1000 + 0.5 is exact in float64 for a float32 x, and no float32 lies on a half thousandth."""
    x = values.astype(np.float64)
    return np.sign(x) * np.floor(np.abs(x) * 1000 + 0.5)


def codes(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """uint16 codes of float32 values in [lo, hi]: the nearest, or its neighbour where only that one decodes to
    the same 3 decimals of the hover (see the module docstring)."""
    x = values.astype(np.float64)
    q = np.clip(np.rint((x - lo) / ((hi - lo) / (NAN - 1))), 0, NAN - 1)  # the nearest codes
    want = hover_digits(values)
    for shift in (-1, 1):
        wrong = np.flatnonzero(hover_digits(decoded(q, lo, hi)) != want)
        if not wrong.size:
            break
        other = np.clip(q[wrong] + shift, 0, NAN - 1)
        fixed = hover_digits(decoded(other, lo, hi)) == want[wrong]
        q[wrong[fixed]] = other[fixed]
    return q.astype("<u2")


def _with_json(header: dict, values: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<I", len(raw)) + raw + values


def with_header(payload: bytes, **fields: object) -> bytes:
    """The same payload with these header fields set (active layer, chart, param, thumbnails)."""
    (n,) = struct.unpack_from("<I", payload)
    return _with_json({**json.loads(payload[4:4 + n]), **fields}, payload[4 + n:])


def fits(stack_shape: tuple[int, ...]) -> bool:
    """Whether a stack of this shape is small enough to send whole."""
    return 2 * int(np.prod(stack_shape)) <= MAX_BYTES


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
        picked = picked_layer(st.session_state.get(key))
        if picked is not None:
            on_change(picked)

    _component(data=with_header(payload, active=layer, chart=chart, param="layer", thumbnails=None,
                                subtitle=list(subtitle), paint=paint_style()), key=key, on_layer_change=changed)


def open_on_click(payload: bytes, chart: str, thumbnails: str, key: str) -> None:
    """A click on a thumbnail of the chart with key `thumbnails` (points with customdata [layer, head]) repaints
    the one-head chart with key `chart` at once (its heatmap painted, then Plotly's redraw of its title and colour
    bar once the browser is idle); the thumbnails' own click event tells the server."""
    _component(data=with_header(payload, chart=chart, thumbnails=thumbnails, paint=paint_style()), key=key, height=0)
