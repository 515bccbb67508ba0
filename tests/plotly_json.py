"""Read a Plotly figure's JSON (what `fig.to_json()` gives and what the app sends to the browser)."""

from __future__ import annotations

import base64

import numpy as np


def heatmaps(fig: dict) -> list[dict]:
    return [trace for trace in fig["data"] if trace["type"] == "heatmap"]


def z_matrix(trace: dict) -> np.ndarray:
    """Decode a heatmap's z, sent either as nested lists or as Plotly's typed-array encoding."""
    z = trace["z"]
    if isinstance(z, dict):
        flat = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
        return flat.reshape([int(n) for n in str(z["shape"]).split(",")])
    return np.array(z, dtype=float)
