"""Lines: attention as lines from each query token to the keys it reads (BertViz's head view)."""

from __future__ import annotations

import re

from ....fields import BOOL, boolean
from ....parts import EVERY_MODE, Part, StateField


def _pick(raw: str) -> str:
    """"" (no token picked), "q<position>" or "k<position>"."""
    raw = raw.strip()
    if raw and not re.fullmatch(r"[qk]\d{1,4}", raw):
        raise ValueError
    return raw


PART = Part(
    "Lines", EVERY_MODE, "mha_viz.ui.view_parts:lines", arrays=("weights",), order=40,
    help="Attention as lines from each query token to the keys it reads.",
    fields=(StateField("lines_all", True, boolean, BOOL),  # every head overlaid, else only `head`
            StateField("pick", "", _pick, "q or k and a position, e.g. q3")))  # "q3": query 3's lines only
