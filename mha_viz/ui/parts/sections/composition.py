"""Composition: how much each head reads what an earlier head writes (Q-, K-, V-composition)."""

from __future__ import annotations

from ....fields import choice
from ....names import COMPOSITION_KINDS
from ....parts import Part

PART = Part("Composition", ("Pretrained",), "mha_viz.ui.composition:render", needs=("composable",), order=110,
            help="How much each head reads what an earlier head writes (Q-, K-, V-composition).",
            fields=(choice("composition", "k", COMPOSITION_KINDS),))
