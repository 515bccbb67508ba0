"""Training: h heads and one head trained side by side on a task, with their accuracy."""

from __future__ import annotations

from ....parts import Part

PART = Part("Training", ("Train",), "mha_viz.ui.view_parts:training", order=20, does=("trains",),
            help="h heads and one head trained side by side on a task, with their accuracy.")
