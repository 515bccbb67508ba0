"""What a token can still reach after L stacked sliding-window layers.

One layer lets query i read key j where V[i, j] (mha_viz.variants.window.visible_keys: the window, causal, sink
tokens). Through L layers the residual stream carries what each position read, so position i holds information
from token j when some path i = p_L <- p_(L-1) <- ... <- p_0 = j steps along V each layer:

    reach_L = V^L  (boolean matrix product; V sees its own position, so reach only grows with L)

With a causal window w, each layer looks w - 1 tokens further back: L layers reach L * (w - 1) tokens back
(Mistral's argument for a 4096 window: 32 layers reach ~131k tokens).
"""

from __future__ import annotations

import numpy as np

from ..variants.window import visible_keys


def window_visibility(T: int, window: int, *, causal: bool = False, sink_tokens: int = 0) -> np.ndarray:
    """[T, T] bool: query i sees key j in one self-attention layer."""
    if T < 1:
        raise ValueError(f"need at least one token, got T = {T}")
    return visible_keys(T, T, window, causal=causal, sink_tokens=sink_tokens).numpy()


def reach(T: int, window: int, layers: int, *, causal: bool = False, sink_tokens: int = 0) -> np.ndarray:
    """[T, T] bool: position i holds information from token j after `layers` stacked layers (V^layers)."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    V = window_visibility(T, window, causal=causal, sink_tokens=sink_tokens).astype(np.int64)  # (T, T)
    R = V.copy()
    for _ in range(layers - 1):
        R = np.minimum(R @ V, 1)  # (T, T)  a path of one more step exists
    return R.astype(bool)


def reach_counts(T: int, window: int, layer_counts: range | list[int], *, causal: bool = False,
                 sink_tokens: int = 0) -> np.ndarray:
    """[len(layer_counts), T] int: how many tokens each position reaches after each number of layers."""
    return np.stack([reach(T, window, L, causal=causal, sink_tokens=sink_tokens).sum(-1) for L in layer_counts])


def reach_back(window: int, layers: int) -> int:
    """How many tokens back a causal window of `window` keys reaches through `layers` layers: layers * (window - 1)."""
    if window < 1 or layers < 1:
        raise ValueError(f"window and layers must be at least 1, got {window} and {layers}")
    return layers * (window - 1)
