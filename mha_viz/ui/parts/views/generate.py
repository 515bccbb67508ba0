"""Generate: a causal language model writes, token by token, with the attention behind each new token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import ranged, whole
from ....limits import MAX_NEW_TOKENS, MAX_SEED
from ....parts import Part, StateField

if TYPE_CHECKING:
    from ...view_parts import ViewContext

PART = Part(
    "Generate", ("Pretrained",), f"{__name__}:render", needs=("causal_lm",), order=10, does=("reads_long",),
    help="A causal language model writes, token by token, with the attention behind each new token.",
    fields=(StateField("new_tokens", 8, lambda r: whole(r, 1, MAX_NEW_TOKENS),
                       f"a number of tokens from 1 to {MAX_NEW_TOKENS}"),
            ranged("temperature", 0.0, 0.0, 2.0, "a number from {lo} (greedy) to {hi}"),
            ranged("top_k", 0, 0, 1_000_000, "0 (off) or a number of tokens up to {hi}"),
            ranged("top_p", 1.0, 0.01, 1.0, "a number from {lo} to {hi} (off)"),
            ranged("gen_seed", 0, 0, MAX_SEED, "a whole number from {lo} to {hi}"),
            StateField("gen_step", 1, lambda r: whole(r, 1, MAX_NEW_TOKENS), f"a step from 1 to {MAX_NEW_TOKENS}")))


def render(c: ViewContext) -> None:
    from ...generate import generate_view

    generate_view(c.source, c.name, c.limits)
