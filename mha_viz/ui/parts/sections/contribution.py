"""Contribution: how much each head adds to the output; norm-based attention."""

from __future__ import annotations

from ....fields import BOOL, boolean
from ....parts import EVERY_MODE, Part, StateField

PART = Part("Contribution", EVERY_MODE, "mha_viz.ui.analysis:contribution", order=30, arrays=("head_outputs", "W_O"),
            help="How much each head adds to the output; norm-based attention.",
            fields=(StateField("norm", False, boolean, BOOL),))
