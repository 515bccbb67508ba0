"""Concat vs sum: What concatenating the heads keeps that summing them would lose."""

from __future__ import annotations

from ....parts import EVERY_MODE, Part

PART = Part("Concat vs sum", EVERY_MODE, "mha_viz.ui.analysis:concat_sum", order=70, arrays=("head_outputs", "W_O", "output", "concat"),
            help="What concatenating the heads keeps that summing them would lose.")
