"""Every layer's attention weights in one payload of bytes, which the browser decodes and paints without asking the
server again: the one renderer (mha_viz/renderer.js) reads it, in the app (mha_viz/ui/heads_component.py) and in the
notebook widget (mha_viz/widget.py).

    payload = [uint32 n, little-endian][n bytes of JSON header][uint16 values [L, H, t, s], little-endian]
    header:  {layers, heads, rows, cols, lo, hi, labels, ...}; 65535 is NaN, else lo + v * ((hi - lo) / 65534)

The browser decodes code v as lo + v * step, step = (hi - lo) / 65534, in float64, and keeps it in a Float32Array,
which rounds it by at most max(|lo|, |hi|) * 2^-24. The code is the nearest one (error <= step / 2 +
max(|lo|, |hi|) * 2^-24, e.g. 7.69e-6 for weights in [0, 1]) unless the hover's 3 decimals (toFixed(3)) of its
decoded value would differ from the true value's; then it is the neighbour that shows the same 3 decimals (error <=
step + max(|lo|, |hi|) * 2^-24, 1.53e-5 in [0, 1]), so the hover shows the server's numbers (wherever step < 0.001,
i.e. hi - lo < 65.5).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, unlabel_rgb

from .figures import common, heads
from .long import LongTrace
from .trace import AttentionTrace

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
    """What renderer.js keeps of codes (none NaN): lo + v * step in float64, then float32."""
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


def no_weights(layers: int) -> tuple[bytes, list[str], list[str]]:
    """A payload of layers without weights, as payload_of gives: the renderer draws the layer buttons alone."""
    header = {"layers": layers, "heads": 0, "rows": 0, "cols": 0, "lo": 0.0, "hi": 1.0, "labels": []}
    return _with_json(header, b""), [], []


def fits(stack_shape: tuple[int, ...]) -> bool:
    """Whether a stack of this shape is small enough to send whole."""
    return 2 * int(np.prod(stack_shape)) <= MAX_BYTES


def axis_labels(tokens: Sequence[str], block: int) -> list[str]:
    """A label per row (or column) of a matrix max-pooled in blocks of `block` tokens: the token, or the first and
    last token of its block with their positions."""
    tokens = [common.visible_token(t) for t in tokens]
    if block == 1:
        return [f"{i}: {t}" for i, t in enumerate(tokens)]
    out = []
    for start in range(0, len(tokens), block):
        end = min(len(tokens), start + block) - 1
        out.append(f"{start}-{end}: {tokens[start]} … {tokens[end]} (max)")
    return out


def payload_shape(traces: Sequence[AttentionTrace]) -> tuple[int, int, int, int]:
    """(L, H, t, s) at most of payload_of(traces): max-pooling leaves at most MAX_CELLS_PER_SIDE a side. Known
    before any layer is packed, for fits()."""
    T, S = traces[0].weights.shape[1:]
    H = max(t.num_heads for t in traces)  # a hybrid's layers can differ in heads
    return len(traces), H, min(T, heads.MAX_CELLS_PER_SIDE), min(S, heads.MAX_CELLS_PER_SIDE)


def payload_of(traces: Sequence[AttentionTrace]) -> tuple[bytes, list[str], list[str]]:
    """What the renderer paints (mha_viz/renderer.js): (payload bytes, query labels, key labels) of these layers.
    Matrices longer than MAX_CELLS_PER_SIDE a side are max-pooled as heads_figure draws them."""
    stack = heads.layer_stack(traces)  # (L, H, t, s) float32
    first = traces[0]
    _, bt, bs = common.max_pool(np.zeros((1, *first.weights.shape[1:]), np.float32), heads.MAX_CELLS_PER_SIDE)
    counts = [t.num_heads for t in traces]
    most = traces[counts.index(max(counts))]  # a hybrid's layers can differ in heads: the layer with the most
    same = all(t.kv_heads == first.kv_heads for t in traces)  # grouped-query attention: each head's K/V head, when
    kv_heads = list(first.kv_heads) if first.kv_heads and same else None  # every layer shares it
    data = with_header(pack(stack, [heads.head_label(most, h) if same else f"head {h}" for h in range(stack.shape[1])]),
                       paint=paint_style(), kv_heads=kv_heads, layer_heads=counts if len(set(counts)) > 1 else None)
    return data, axis_labels(first.query_tokens, bt), axis_labels(first.key_tokens, bs)


def overview_payload(trace: LongTrace) -> tuple[bytes, list[str], list[str]]:
    """What the renderer paints of a long input's overview (one layer: every head's max-pooled weights, as
    long_heads_figure draws them): (payload bytes, query labels, key labels), a label per block of positions."""
    labels = [f"head {h}" for h in range(trace.num_heads)]
    data = with_header(pack(trace.overview[None], labels), paint=paint_style(), kv_heads=None)
    return data, axis_labels(trace.query_tokens, trace.block_rows), axis_labels(trace.key_tokens, trace.block_cols)


def fitting_payload(traces: Sequence[AttentionTrace]) -> tuple[bytes, list[str], list[str]] | None:
    """payload_of(traces), or None when it would be more than MAX_BYTES (checked before any layer is packed)."""
    return payload_of(traces) if fits(payload_shape(traces)) else None
