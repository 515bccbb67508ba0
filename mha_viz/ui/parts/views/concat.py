"""Concat → W_O: the heads' outputs concatenated, then mixed by W_O into the layer's output."""

from __future__ import annotations

from ....parts import EVERY_MODE, Part

PART = Part("Concat → W_O", EVERY_MODE, "mha_viz.ui.parts.views.concat:render", order=70,
            arrays=("concat", "W_O", "output", "head_outputs"),
            help="The heads' outputs concatenated, then mixed by W_O into the layer's output.")


def render(c) -> None:
    from ...views import output_path_view

    output_path_view(c.drawn, c.name)
