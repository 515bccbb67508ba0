"""Rollout: attention chained through the layers (Abnar and Zuidema 2020)."""

from __future__ import annotations

from ....fields import optional_int
from ....limits import MAX_LAYERS
from ....parts import EVERY_MODE, Part, StateField

PART = Part("Rollout", EVERY_MODE, "mha_viz.ui.analysis:rollout", order=50,
            help="Attention chained through the layers (Abnar and Zuidema 2020).",
            fields=(StateField("rollout_layer", None, optional_int(MAX_LAYERS - 1),
                               f"last or a layer number from 0 to {MAX_LAYERS - 1}"),))
