"""Formulas: the layer's equations with this layer's sizes."""

from __future__ import annotations

from ....parts import Part

PART = Part("Formulas", ("Configurable",), "mha_viz.ui.parts.views.formulas:render", order=140,
            help="The layer's equations with this layer's sizes.")


def render(c) -> None:
    from ...views import formulas_view

    formulas_view(c.cfg, *c.sizes(), c.trace.causal, cross=c.trace.cross, variant=getattr(c.source, "variant", None))
