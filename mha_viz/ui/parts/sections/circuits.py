"""Circuits: Why a head does what it does, from its weights: QK and OV circuits, singular values, copying scores."""

from __future__ import annotations

from ....fields import choice, ranged
from ....parts import EVERY_MODE, Part

CIRCUITS = ("OV", "QK", "QK positions")  # the token tables

PART = Part("Circuits", EVERY_MODE, "mha_viz.ui.circuits:render", order=100,
            help="Why a head does what it does, from its weights: QK and OV circuits, singular values, copying scores.",
            fields=(choice("circuit", CIRCUITS[0], CIRCUITS),
                    ranged("circuit_k", 10, 1, 50, "a number of columns per row from {lo} to {hi}")))
