"""Why one attention score has its value: the query and key vectors, dimension by dimension.

    score[h, i, j] = scale * sum_d q_d k_d + other
q = queries[h, i], k = keys[h, j] (after positions such as rotary are applied); scale is the
trace's factor on Q K^T (1/sqrt(d_k) by default); other is what else the model added: a position
bias (T5), the attention mask (-inf for a masked pair), or 0 for plain attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import AttentionTrace


@dataclass(frozen=True, eq=False)
class ScoreTerms:
    q: np.ndarray  # [d_k] the query vector
    k: np.ndarray  # [d_k] the key vector
    products: np.ndarray  # [d_k] q_d * k_d: they sum to dot
    dot: float  # q . k
    scale: float  # the factor on q . k
    other: float  # score - scale * dot: position bias or mask; -inf when the pair is masked
    score: float  # the score in the trace
    weight: float  # softmax of the score row at this key


def score_terms(trace: AttentionTrace, head: int, query: int, key: int) -> ScoreTerms:
    """The terms of scores[head, query, key] (float64 products of the trace's q and k)."""
    H, T, S = trace.weights.shape
    if not (0 <= head < H and 0 <= query < T and 0 <= key < S):
        raise ValueError(f"head {head}, query {query}, key {key} outside {H} heads x {T} queries x {S} keys")
    q = trace.require("queries")[head, query].astype(np.float64)  # (d_k,)
    k = trace.require("keys")[head, key].astype(np.float64)  # (d_k,)
    products = q * k  # (d_k,)
    dot = float(products.sum())
    score = float(trace.require("scores")[head, query, key])
    scale = trace.score_scale
    other = score - scale * dot if np.isfinite(score) else score
    return ScoreTerms(q, k, products, dot, scale, other, score, float(trace.weights[head, query, key]))
