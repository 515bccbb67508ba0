"""Two maps: differential attention's two softmax maps a head, their signed difference, and what it cancels."""

from __future__ import annotations

from ....parts import Part

PART = Part("Two maps", ("Configurable", "Pretrained"), "mha_viz.ui.differential:two_maps", order=90,
            needs=("differential",), arrays=("maps", "lambdas"),
            help="Differential attention: each head's two softmax maps, their signed difference, and what it cancels.")
