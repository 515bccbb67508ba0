"""Formulas: the layer's equations with this layer's sizes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....parts import Part

if TYPE_CHECKING:
    from ...view_parts import ViewContext

PART = Part("Formulas", ("Configurable",), f"{__name__}:render", order=140,
            help="The layer's equations with this layer's sizes.")


def render(c: ViewContext) -> None:
    from ...views import formulas_view

    formulas_view(c.cfg, *c.sizes(), c.trace.causal, cross=c.trace.cross, variant=getattr(c.source, "variant", None))
