"""One head: one head step by step (Q, K, V, scores, softmax, output) and why one score is what it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import whole
from ....limits import MAX_TOKENS
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    from ...view_parts import ViewContext

_POSITION = f"a position from 0 to {MAX_TOKENS - 1}"

PART = Part(
    "One head", EVERY_MODE, f"{__name__}:render", order=60,
    arrays=("queries", "keys", "values", "scores", "head_outputs"),
    help="One head step by step: Q, K, V, scores, softmax, output; why one score is what it is.",
    fields=(StateField("q_pos", 0, lambda r: whole(r, 0, MAX_TOKENS - 1), _POSITION),
            StateField("k_pos", 0, lambda r: whole(r, 0, MAX_TOKENS - 1), _POSITION)))


def render(c: ViewContext) -> None:
    from ...views import head_view

    head_view(c.drawn, c.name)
