"""Every layer's attention weights in one payload of bytes, which a browser decodes and paints without asking the
server again: the layer switch of the app (mha_viz/ui/layer_switch.py, whose docstring states the error bound of
the uint16 codes) and the notebook widget (mha_viz/widget.py) send the same format.

    payload = [uint32 n, little-endian][n bytes of JSON header][uint16 values [L, H, t, s], little-endian]
    header:  {layers, heads, rows, cols, lo, hi, labels, ...}; 65535 is NaN, else lo + v * ((hi - lo) / 65534)
"""

from __future__ import annotations

import json
import struct

import numpy as np
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, unlabel_rgb

from .figures import heads

MAX_BYTES = 8 * 2**20  # larger stacks (e.g. 32 layers x 32 heads at 128 tokens) switch through the server
NAN = 65535
FLOAT32_UNIT = 2.0**-24  # float32's unit roundoff: |float32(y) - y| <= |y| * 2^-24


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
