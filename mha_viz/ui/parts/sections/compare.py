"""Compare: this layer against another sentence, layer or model."""

from __future__ import annotations

from ....fields import BOOL, MODEL_ID, boolean, choice, model_id, optional_int, short_text
from ....limits import MAX_HEADS, MAX_LAYERS, MAX_MODEL_CHARS, MAX_TEXT_CHARS
from ....parts import EVERY_MODE, Part, StateField

COMPARE_WITH = ("Another sentence", "Another layer", "Another model")

PART = Part("Compare", EVERY_MODE, "mha_viz.ui.analysis:compare", order=60,
            help="This layer against another sentence, layer or model.",
            fields=(choice("compare_with", COMPARE_WITH[0], COMPARE_WITH),
                    StateField("other_text", "", short_text(MAX_TEXT_CHARS), f"at most {MAX_TEXT_CHARS} characters",
                               MAX_TEXT_CHARS),
                    StateField("other_layer", None, optional_int(MAX_LAYERS - 1),
                               f"a layer number from 0 to {MAX_LAYERS - 1}"),
                    StateField("other_model", "", model_id, MODEL_ID, MAX_MODEL_CHARS),
                    StateField("compare_head", None, optional_int(MAX_HEADS - 1),  # None: the mean over heads
                               f"mean or a head number from 0 to {MAX_HEADS - 1}"),
                    StateField("by_position", False, boolean, BOOL)))
