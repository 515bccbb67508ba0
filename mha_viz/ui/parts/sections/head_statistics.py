"""Head statistics: entropy, confidence and where each head looks, one row a head."""

from __future__ import annotations

from ....parts import EVERY_MODE, Part

PART = Part("Head statistics", EVERY_MODE, "mha_viz.ui.analysis:head_statistics", order=10,
            help="Entropy, confidence and where each head looks, one row a head.")
