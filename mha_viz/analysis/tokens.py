"""Hide tokens (e.g. [CLS], [SEP], BOS) from attention and renormalise what is left."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from ..trace import AttentionTrace


def without_tokens(trace: AttentionTrace, hidden: Collection[str]) -> AttentionTrace:
    """A weights-only trace without the query and key positions whose token is in `hidden`.

    Each remaining row is renormalised to sum to 1 over the remaining keys:
        w'_ij = w_ij / sum_{j' kept} w_ij'
    A row whose whole weight went to hidden tokens stays all zero (nothing left to show).
    """
    q_keep = [i for i, t in enumerate(trace.query_tokens) if t not in hidden]
    k_keep = [j for j, t in enumerate(trace.key_tokens) if t not in hidden]
    if not q_keep or not k_keep:
        raise ValueError("hiding the special tokens would leave nothing to show")
    w = trace.weights[:, q_keep][:, :, k_keep]  # (H, T', S')
    total = w.sum(-1, keepdims=True)  # (H, T', 1)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
    return AttentionTrace(
        query_tokens=tuple(trace.query_tokens[i] for i in q_keep),
        key_tokens=tuple(trace.key_tokens[j] for j in k_keep),
        weights=w,
        causal=trace.causal,
        cross=trace.cross,
        kv_heads=trace.kv_heads,
        meta={**trace.meta, "hidden_tokens": sorted(hidden), "unavailable": "special tokens are hidden and rows renormalised"},
    )
