"""Hide tokens (e.g. [CLS], [SEP], BOS) from a trace and renormalise the attention that is left."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

import numpy as np

from ..trace import AttentionTrace


def without_tokens(trace: AttentionTrace, hidden: Collection[str]) -> AttentionTrace:
    """The trace without the query and key positions whose token is in `hidden`.

    Each remaining row of weights is renormalised over the remaining keys:
        w'_ij = w_ij / sum_{j' kept} w_ij'
    A row whose whole weight went to hidden tokens stays all zero (nothing left to show).
    Everything else is the model's own numbers at the kept positions: queries, scores, head
    outputs, concat and output rows of the kept queries; keys and values of the kept keys. The
    head outputs (and so the concat and the output) were computed with every key, hidden ones
    included, so they are not weights' @ values; meta["hidden_tokens"] says what was hidden.
    """
    q_keep = [i for i, t in enumerate(trace.query_tokens) if t not in hidden]
    k_keep = [j for j, t in enumerate(trace.key_tokens) if t not in hidden]
    if not q_keep or not k_keep:
        raise ValueError("hiding the special tokens would leave nothing to show")
    w = trace.weights[:, q_keep][:, :, k_keep]  # (H, T', S')
    total = w.sum(-1, keepdims=True)  # (H, T', 1)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)  # (H, T', S')

    def rows(name: str, keep: list[int], axis: int) -> np.ndarray | None:
        array = getattr(trace, name)
        return None if array is None else np.take(array, keep, axis=axis)

    scores = rows("scores", q_keep, 1)
    return replace(
        trace,
        query_tokens=tuple(trace.query_tokens[i] for i in q_keep),
        key_tokens=tuple(trace.key_tokens[j] for j in k_keep),
        weights=w,
        queries=rows("queries", q_keep, 1),  # (H, T', d_k)
        keys=rows("keys", k_keep, 1),  # (H, S', d_k)
        values=rows("values", k_keep, 1),  # (H, S', d_v)
        scores=None if scores is None else scores[:, :, k_keep],  # (H, T', S')
        head_outputs=rows("head_outputs", q_keep, 1),  # (H, T', d_v)
        concat=rows("concat", q_keep, 0),  # (T', H*d_v)
        output=rows("output", q_keep, 0),  # (T', d_out)
        gates=rows("gates", q_keep, 1),  # (H, T')
        score_bias={name: b[:, q_keep][:, :, k_keep] for name, b in trace.score_bias.items()},  # (H, T', S') each
        meta={**trace.meta, "hidden_tokens": sorted(hidden)},
    )
