"""Head detectors: previous-token, duplicate-token and induction scores of every head."""

from __future__ import annotations

from ....fields import choice
from ....names import DETECTOR_KINDS
from ....parts import EVERY_MODE, Part

PART = Part("Head detectors", EVERY_MODE, "mha_viz.ui.analysis:head_detectors", order=90,
            help="Previous-token, duplicate-token and induction scores of every head.",
            fields=(choice("detector", "induction", DETECTOR_KINDS),))
