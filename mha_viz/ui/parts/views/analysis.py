"""Analysis: which heads do what, and which heads matter; its sections are mha_viz/ui/parts/sections/."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import one_of, one_of_registered
from ....parts import EVERY_MODE, SECTIONS, Part, StateField

if TYPE_CHECKING:
    from ...view_parts import ViewContext

PART = Part("Analysis", EVERY_MODE, f"{__name__}:render", arrays=("weights",), order=80,
            help="Which heads do what, and which heads matter: the analysis sections.",
            fields=(StateField("section", "Head statistics", one_of(SECTIONS), one_of_registered(SECTIONS)),))


def render(c: ViewContext) -> None:
    from ...analysis import analysis_view

    analysis_view(c.trace, c.source, layer=c.layer, name=c.name, other_model=c.other_model,
                  max_passes=None if c.limits is None else c.limits.max_passes)
