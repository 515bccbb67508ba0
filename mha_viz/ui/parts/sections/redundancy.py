"""Redundancy: which heads attend alike (Jensen-Shannon divergence)."""

from __future__ import annotations

from ....fields import ranged
from ....parts import EVERY_MODE, Part

PART = Part("Redundancy", EVERY_MODE, "mha_viz.ui.analysis:redundancy_section", order=20,
            help="Which heads attend alike (Jensen-Shannon divergence).",
            fields=(ranged("threshold", 0.05, 0.0, 0.5, "a number from {lo} to {hi}"),))
