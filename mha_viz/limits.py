"""The sizes mha-viz accepts, in one place, and the checks of numbers a browser or a link sends against them.

The library enforces them (sources.py cuts inputs to MAX_TOKENS / MAX_LONG_TOKENS, the CLI refuses larger layers,
the figures check what a click sends back); the app's URL parsing and widgets use the same numbers. A public
demo's tighter, per-request budget is the app's business (mha_viz.serve.hosting), not the library's.
"""

from __future__ import annotations

import math

MAX_TOKENS = 512  # the longest input every view draws in full (the configurable model's, and the CLI's)
MAX_LONG_TOKENS = 4096  # configurable mode's longest input: the Heads view as an overview and a zoom
MAX_TEXT_CHARS = 32_000  # room for MAX_LONG_TOKENS tokens of English (about 6 characters a token); a link's text
MAX_MODEL_LONG_TOKENS = 32_768  # pretrained mode's longest long trace (at most the model's positions)
MAX_LONG_TEXT_CHARS = 8 * MAX_MODEL_LONG_TOKENS  # the longest text a session holds (pretrained mode's long texts)
MAX_HEADS = 16
MAX_HEAD_WIDTH = 256  # d_k, d_v and d_out of the configurable layer
MAX_VARIANT_WIDTH = 256  # an attention variant's kv_latent and q_latent (mha_viz.variants)
MAX_ROPE_DIM = 32  # the configurable layer's MLA rotary dims per head (its slider and a link)
MAX_WINDOW = 32  # the configurable layer's sliding window in tokens (its slider and a link)
MAX_REACH_LAYERS = 12  # the stacked windowed layers the Window & sinks view follows
D_MODEL_CHOICES = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768)
MAX_SEED = 2**31 - 1
MAX_LAYERS = 128
MAX_NEW_TOKENS = 64
MAX_STEPS = 5000
MAX_DIVERSITY = 2.0  # the largest head-diversity penalty weight a trained layer takes from a link
MAX_MODEL_CHARS = 200  # a hub id or a folder
MAX_SEQUENCE_CHARS = 200  # a trained layer's input: at most seq_len task tokens
MAX_PATCH_PASSES = 4096  # patched sequences of one activation patching (e.g. 12 layers x 12 heads x 28 positions)
MAX_MIXER_BYTES = 2**30  # the whole mixing matrices [H, T, T] (float32) of one request's mixer layers, together
MAX_CLICKED_HEADS = 1024  # a click may open any head of a pretrained model (a link: MAX_HEADS); the views clamp


def client_int(value: object, lo: int, hi: int) -> int | None:
    """value as a whole number from lo to hi, or None: booleans, strings, NaN, infinities, fractions and anything
    out of range are refused (a float with no fraction, as JSON may carry, is accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if lo <= value <= hi else None


def client_number(value: object, lo: float, hi: float) -> float | None:
    """value as a finite number from lo to hi, or None (booleans, strings, NaN and infinities are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if lo <= value <= hi else None
