"""Read what the app sends the one renderer (mha_viz/renderer.js) in an AppTest: the layer control's payload, decoded
as the renderer decodes it (mha_viz/layer_payload.py)."""

from __future__ import annotations

import json
import struct

import numpy as np
from streamlit.testing.v1 import AppTest


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
    """Whether the page draws attention heads: a Plotly chart, or the renderer painting a layer's weights."""
    if at.get("plotly_chart"):
        return True
    return any(e.key == "layer_switch" for e in at.get("bidi_component")) and renderer_data(at)[0]["heads"] > 0
