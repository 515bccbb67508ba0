"""Redundant heads: how differently do two heads spread their attention over the same input?

    D[a, b] = mean_i JSD(w_a[i], w_b[i])   heads a and b compared query by query (mha_viz.divergence)
Heads are ordered by average-linkage clustering of D, so that similar heads sit side by side;
pairs with D < threshold are flagged as near-duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..divergence import head_divergence


@dataclass(frozen=True)
class Redundancy:
    divergence: np.ndarray  # (H, H)  mean Jensen-Shannon divergence, bits
    order: np.ndarray  # (H,)  a permutation of the heads that puts similar heads next to each other
    duplicates: tuple[tuple[int, int], ...]  # head pairs (a < b) with divergence < threshold
    threshold: float


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
