"""Knockout: switch heads off and measure what changes."""

from __future__ import annotations

from ....fields import BOOL, boolean, choice, heads, short_text
from ....limits import MAX_HEADS, MAX_TEXT_CHARS
from ....names import ABLATION_KINDS
from ....parts import EVERY_MODE, Part, StateField

PART = Part("Knockout", EVERY_MODE, "mha_viz.ui.analysis:knockout", order=40, arrays=("head_outputs", "W_O", "output"),
            help="Switch heads off and measure what changes.",
            fields=(StateField("off", (), heads(MAX_HEADS), f"head numbers from 0 to {MAX_HEADS - 1}, comma-separated"),
                    StateField("rank_final", False, boolean, BOOL),
                    choice("ablation", "zero", ABLATION_KINDS),
                    StateField("ablation_text", "", short_text(MAX_TEXT_CHARS), f"at most {MAX_TEXT_CHARS} characters",
                               MAX_TEXT_CHARS)))
