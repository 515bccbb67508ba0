"""Shapes & cost: every matrix's shape, the layer's cost, and attention variants priced beside MHA."""

from __future__ import annotations

from ....fields import choice, ranged, whole
from ....limits import MAX_HEADS
from ....names import SINK_KINDS
from ....parts import Part, StateField
from ....variants_cost import VARIANTS

CONTEXTS = tuple(2**i for i in range(8, 21))  # 256 ... 1,048,576 tokens


def _context(raw: str) -> int:
    value = int(raw.strip())
    if value not in CONTEXTS:
        raise ValueError
    return value


# The variants compared here are prefixed cost_: they price a layer beside MHA and do not change the layer the page
# computes (a configurable-mode `variant` control would).
PART = Part(
    "Shapes & cost", ("Configurable",), "mha_viz.ui.view_parts:shapes", order=130,
    help="Every matrix's shape and the layer's cost in parameters and operations, and attention variants beside MHA.",
    fields=(choice("cost_variant", "gqa", VARIANTS),
            StateField("cost_kv_heads", 1, lambda r: whole(r, 1, MAX_HEADS),
                       f"a number of KV heads from 1 to {MAX_HEADS}"),
            ranged("cost_kv_latent", 16, 1, 4096, "a latent width from {lo} to {hi}"),
            ranged("cost_q_latent", 0, 0, 4096, "0 (none) or a latent width up to {hi}"),
            ranged("cost_rope_dim", 4, 0, 256, "a number of rotary dimensions from {lo} to {hi}"),
            ranged("cost_window", 64, 1, CONTEXTS[-1], "a window from {lo} to {hi}"),
            choice("cost_sinks", "none", SINK_KINDS),
            StateField("cost_moh_k", 1, lambda r: whole(r, 1, MAX_HEADS), f"a number of heads from 1 to {MAX_HEADS}"),
            StateField("cost_context", 8192, _context, f"a power of two from {CONTEXTS[0]} to {CONTEXTS[-1]}")))
