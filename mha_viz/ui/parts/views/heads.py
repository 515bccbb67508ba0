"""Heads: every head's attention weights, one heatmap a head (a long input: all its tokens, an overview and a zoom)."""

from __future__ import annotations

from ....fields import heads, one_of, whole
from ....limits import MAX_HEADS, MAX_MODEL_LONG_TOKENS
from ....parts import Part, StateField

LONG_STATS = ("distance", "entropy", "first", "sink")  # mha_viz.pretrained.long.STAT_NAMES
_LONG_POSITION = f"a position from 0 to {MAX_MODEL_LONG_TOKENS - 1}"  # a long input's, pretrained mode's too
COMPARE = StateField("compare", (), heads(MAX_HEADS), f"head numbers from 0 to {MAX_HEADS - 1}, comma-separated")
# the heads opened larger (Heads) or below the thumbnails (Overview): one field of two views

PART = Part(
    "Heads", ("Configurable", "Pretrained"), "mha_viz.ui.view_parts:heads", arrays=("weights",),  # Train: Training
    order=30, does=("draws_long", "switches_layers"), help="Every head's attention weights, one heatmap a head.",
    fields=(COMPARE,
            StateField("zoom", 0, lambda r: whole(r, 0, MAX_MODEL_LONG_TOKENS - 1), _LONG_POSITION),  # a long window
            StateField("zoom_k", 0, lambda r: whole(r, 0, MAX_MODEL_LONG_TOKENS - 1), _LONG_POSITION),
            StateField("long_stat", "distance", one_of(LONG_STATS), "one of " + ", ".join(LONG_STATS))))
