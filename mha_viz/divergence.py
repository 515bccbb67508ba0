"""How differently two heads spread their attention: the Jensen-Shannon divergence of attention rows.

    JSD(p, q) = 1/2 KL(p || m) + 1/2 KL(q || m),  m = (p + q) / 2,  in bits: 0 (same) ... 1 (disjoint)
    D[a, b]   = mean_i JSD(w_a[i], w_b[i])        heads a and b compared query by query
Math only (numpy), so that both floors that measure heads use it: training (the variant grid's redundancy) and
analysis (mha_viz.analysis.redundancy: clustered order, near-duplicates).
"""

from __future__ import annotations

import numpy as np


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
        raise ValueError("these weights are signed (a differential head's one map minus another, or a linear or "
                         "state-space layer's mixing matrix), and the Jensen-Shannon divergence compares distributions")
    D = np.stack([js_divergence(w[a][None], w).mean(-1) for a in range(len(w))])  # (H, H)
    D = (D + D.T) / 2
    np.fill_diagonal(D, 0.0)
    return D
