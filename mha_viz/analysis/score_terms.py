"""Why one attention score has its value: the query and key vectors, dimension by dimension, and what else adds to it.

    score[h, i, j] = c * tanh((scale * sum_d q_d k_d + sum_n bias_n) / c) + mask        (c: soft-capping)
                   = scale * sum_d q_d k_d + sum_n bias_n + mask                         without soft-capping
q = queries[h, i], k = keys[h, j] (after positions such as rotary are applied); scale is the
trace's factor on Q K^T (1/sqrt(d_k) by default); bias_n are the trace's named score_bias terms
(T5's relative position bias, Bloom's ALiBi, DeBERTa's content->position and position->content);
mask is 0, or -inf for a masked pair. `other` lumps together everything but scale * q . k.
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
    terms: dict[str, float]  # the trace's score_bias terms at this pair, by name
    softcap: float | None  # c of soft-capping, None: none
    other: float  # score - scale * dot: bias terms, soft-capping's change and mask; -inf when the pair is masked
    score: float  # the score in the trace
    weight: float  # softmax of the score row at this key

    @property
    def logit(self) -> float:
        """scale * dot + the bias terms: the score before soft-capping and the mask."""
        return self.scale * self.dot + sum(self.terms.values())

    @property
    def capped(self) -> float:
        """The logit after soft-capping, c * tanh(logit / c) (the logit itself without soft-capping)."""
        return self.logit if self.softcap is None else self.softcap * float(np.tanh(self.logit / self.softcap))


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
    terms = {name: float(bias[head, query, key]) for name, bias in trace.score_bias.items()}
    other = score - scale * dot if np.isfinite(score) else score
    weight = float(trace.weights[head, query, key])
    return ScoreTerms(q, k, products, dot, scale, terms, trace.softcap, other, score, weight)
