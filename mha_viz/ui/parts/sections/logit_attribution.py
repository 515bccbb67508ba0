"""Logit attribution: each head's share of the logit of the next token (direct logit attribution)."""

from __future__ import annotations

from ....fields import optional_int, short_text
from ....limits import MAX_TOKENS
from ....parts import EVERY_MODE, Part, StateField

PART = Part("Logit attribution", EVERY_MODE, "mha_viz.ui.analysis:logit_attribution", order=80,
            help="Each head's share of the logit of the next token (direct logit attribution).",
            fields=(StateField("dla_position", None, optional_int(MAX_TOKENS - 1),  # None: the last position
                               f"last or a position from 0 to {MAX_TOKENS - 1}"),
                    StateField("dla_token", "", short_text(100), "a token, at most 100 characters", 100)))
