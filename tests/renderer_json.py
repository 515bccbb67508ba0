"""Read what the app sends the one renderer (mha_viz/renderer.js) in an AppTest: the layer control's payload, decoded
as the renderer decodes it (mha_viz/layer_payload.py)."""

from __future__ import annotations

import json
import struct

import numpy as np
from streamlit.testing.v1 import AppTest

from mha_viz.figures.heads import head_label, layer_stack
from mha_viz.trace import AttentionTrace


def renderer_data(at: AppTest, key: str = "layer_switch") -> tuple[dict, np.ndarray]:
    """The header and the [L, H, t, s] weights (NaN where masked) of the renderer component with this key."""
    (element,) = [e for e in at.get("bidi_component") if e.key == key]
    data = element.proto.bytes
    (n,) = struct.unpack_from("<I", data)
    meta = json.loads(data[4:4 + n])
    codes = np.frombuffer(data[4 + n:], dtype="<u2").reshape(meta["layers"], meta["heads"], meta["rows"], meta["cols"])
    values = (meta["lo"] + codes.astype(np.float64) * ((meta["hi"] - meta["lo"]) / 65534)).astype(np.float32)
    return meta, np.where(codes == 65535, np.float32(np.nan), values)


def shown_layer(at: AppTest) -> tuple[dict, np.ndarray]:
    """The header and the [H, t, s] weights of the layer the renderer paints now (its active layer)."""
    meta, values = renderer_data(at)
    return meta, values[meta["active"]]


def tokens(labels: list[str]) -> list[str]:
    """The tokens of the renderer's axis labels ("3: cat" -> "cat")."""
    return [label.split(": ", 1)[1] for label in labels]


def paints_heads(at: AppTest) -> bool:
    """Whether the page draws attention heads: a Plotly chart, or the renderer painting a layer's weights (a
    pretrained model's layer control, a configurable layer's Heads view, a long input's overview)."""
    if at.get("plotly_chart"):
        return True
    return any((e.key == "layer_switch" and renderer_data(at)[0]["heads"] > 0) or e.key in ("heads", "heads_long")
               for e in at.get("bidi_component"))


def drawn_charts(at: AppTest) -> list[str]:
    """The keys of the charts the page draws: its Plotly charts' and the renderer's components that paint weights
    ("heads": a configurable layer's Heads view; "layer_switch": a pretrained model's layers; "heads_long": a long
    input's overview), not layer buttons alone."""
    painted = [e.key for e in at.get("bidi_component")
               if e.proto.bytes and renderer_data(at, e.key)[0]["heads"] > 0]  # other components send no payload
    return [c.key for c in at.get("plotly_chart")] + painted


def drawn_heads(at: AppTest) -> tuple[list[str], np.ndarray]:
    """The heads' titles and [H, t, s] weights (NaN where masked) of a configurable or trained layer's Heads view, as
    the renderer paints them (component "heads"; its uint16 codes are within 1.53e-5 of the trace's weights,
    mha_viz/layer_payload.py)."""
    meta, values = renderer_data(at, "heads")
    return meta["labels"], values[0]


def assert_draws_trace(at: AppTest, trace: AttentionTrace) -> None:
    """The Heads view paints every head of the library's own trace: one per head, titled as heads_figure titles it
    (with its K/V head under grouped-query attention), each cell within 2e-5 of the trace's weight (the payload's
    codes are within 1.53e-5 of it) and NaN exactly where the trace has none."""
    labels, weights = drawn_heads(at)
    assert labels == [head_label(trace, h) for h in range(trace.num_heads)]
    expected = layer_stack([trace])[0]  # the trace's weights (max-pooled past MAX_CELLS_PER_SIDE tokens a side)
    assert weights.shape == expected.shape
    np.testing.assert_allclose(weights, expected, rtol=0, atol=2e-5)  # NaN only where NaN is expected
