"""Two attention traces side by side (two sentences, two layers, or two models on one sentence).

    difference = b.weights - a.weights   [H, T, S], when both read the same token sequences with the
                                          same number of heads (by_position=True: the same numbers of
                                          tokens suffice); otherwise `reason` says why there is none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..trace import AttentionTrace


@dataclass(frozen=True, eq=False)
class Comparison:
    a: AttentionTrace
    b: AttentionTrace
    difference: np.ndarray | None  # (H, T, S)  b - a
    reason: str | None  # why there is no difference map; None when there is one


def _mismatch(side: str, a: Sequence[str], b: Sequence[str], by_position: bool) -> str | None:
    if len(a) != len(b):
        return f"the {side} tokens differ in number ({len(a)} vs {len(b)})"
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None or by_position:
        return None
    return f"the {side} tokens differ at position {first} ({a[first]!r} vs {b[first]!r})"


def compare_traces(a: AttentionTrace, b: AttentionTrace, *, by_position: bool = False) -> Comparison:
    """The difference b - a of two traces' weights, when their tokens (by_position: positions) line up."""
    reason = (
        _mismatch("query", a.query_tokens, b.query_tokens, by_position)
        or _mismatch("key", a.key_tokens, b.key_tokens, by_position)
        or (None if a.num_heads == b.num_heads else f"the number of heads differs ({a.num_heads} vs {b.num_heads})")
    )
    if reason is not None:
        return Comparison(a, b, None, f"No difference map: {reason}, so the cells do not line up.")
    return Comparison(a, b, b.weights.astype(np.float64) - a.weights, None)
