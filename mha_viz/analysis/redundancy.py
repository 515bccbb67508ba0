"""Redundant heads: how differently do two heads spread their attention over the same input?

    JSD(p, q) = 1/2 KL(p || m) + 1/2 KL(q || m),  m = (p + q) / 2,  in bits: 0 (same) ... 1 (disjoint)
    D[a, b]   = mean_i JSD(w_a[i], w_b[i])        heads a and b compared query by query
Heads are ordered by average-linkage clustering of D, so that similar heads sit side by side;
pairs with D < threshold are flagged as near-duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Redundancy:
    divergence: np.ndarray  # (H, H)  mean Jensen-Shannon divergence, bits
    order: np.ndarray  # (H,)  a permutation of the heads that puts similar heads next to each other
    duplicates: tuple[tuple[int, int], ...]  # head pairs (a < b) with divergence < threshold
    threshold: float


def js_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon divergence in bits along the last axis (0 log 0 = 0)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> np.ndarray:  # KL(a || m); a > 0 implies m > 0
        return np.where(a > 0, a * np.log2(np.where(a > 0, a, 1.0) / np.where(a > 0, m, 1.0)), 0.0).sum(-1)

    return np.clip((kl(p) + kl(q)) / 2, 0.0, 1.0)


def head_divergence(weights: np.ndarray) -> np.ndarray:
    """[H, H]: D[a, b] = mean over queries of JSD(weights[a, i], weights[b, i]); symmetric, zero diagonal."""
    w = np.asarray(weights, dtype=np.float64)  # (H, T, S)
    if (w < 0).any():
        raise ValueError("these weights are signed (differential attention: one map minus another), and the "
                         "Jensen-Shannon divergence compares distributions")
    D = np.stack([js_divergence(w[a][None], w).mean(-1) for a in range(len(w))])  # (H, H)
    D = (D + D.T) / 2
    np.fill_diagonal(D, 0.0)
    return D


def cluster_order(distance: np.ndarray) -> np.ndarray:
    """A leaf order of average-linkage clustering: merge the two closest clusters (mean pairwise
    distance) until one is left, joining their orders at the ends that are closest."""
    D = np.asarray(distance, dtype=np.float64)
    clusters = [[h] for h in range(len(D))]
    while len(clusters) > 1:
        pairs = [(a, b) for a in range(len(clusters)) for b in range(a + 1, len(clusters))]
        a, b = min(pairs, key=lambda ab: D[np.ix_(clusters[ab[0]], clusters[ab[1]])].mean())
        left, right = clusters[a], clusters[b]
        n = len(left)
        joins = [lo + ro for lo in (left, left[::-1]) for ro in (right, right[::-1])]
        joined = min(joins, key=lambda order: D[order[n - 1], order[n]])  # closest ends meet
        clusters = [c for k, c in enumerate(clusters) if k not in (a, b)] + [joined]
    return np.array(clusters[0], dtype=int)


def near_duplicates(distance: np.ndarray, threshold: float) -> tuple[tuple[int, int], ...]:
    """Pairs of heads (a < b) whose divergence is below threshold."""
    a, b = np.nonzero(np.triu(np.asarray(distance) < threshold, k=1))
    return tuple(zip(a.tolist(), b.tolist()))


def redundancy(weights: np.ndarray, threshold: float = 0.05) -> Redundancy:
    """Divergence matrix, clustered head order and near-duplicate pairs of weights [H, T, S]."""
    D = head_divergence(weights)
    return Redundancy(D, cluster_order(D), near_duplicates(D, threshold), threshold)
