"""Concat → W_O: the heads' outputs concatenated, then mixed by W_O into the layer's output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....parts import EVERY_MODE, Part

if TYPE_CHECKING:
    from ...view_parts import ViewContext

PART = Part("Concat → W_O", EVERY_MODE, f"{__name__}:render", order=70,
            arrays=("concat", "W_O", "output", "head_outputs"),
            help="The heads' outputs concatenated, then mixed by W_O into the layer's output.")


def render(c: ViewContext) -> None:
    from ...views import output_path_view

    output_path_view(c.drawn, c.name)
