"""Attention rollout (Abnar and Zuidema 2020): how attention composes through the layers.

    A_l = 0.5 * mean_h W_l + 0.5 * I      the residual connection as an identity "attention"
    A_l <- A_l / rowsum(A_l)
    R_l = A_l R_{l-1},  R_1 = A_1         R_L = A_L ... A_1: how much of input token j reaches
                                          position i after the last layer
"""

from __future__ import annotations

import numpy as np


def attention_rollout(attentions: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Rollout of self-attention weights [L, H, T, T] layer by layer: [L, T, T], [l] = A_l ... A_1.

    The last entry is the rollout through the whole stack. residual: weight of the identity.
    """
    a = np.asarray(attentions, dtype=np.float64)  # (L, H, T, T)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"rollout needs self-attention weights [L, H, T, T], got shape {a.shape}")
    T = a.shape[-1]
    A = (1 - residual) * a.mean(1) + residual * np.eye(T)  # (L, T, T)
    A = A / A.sum(-1, keepdims=True)  # (L, T, T)  rows sum to 1
    R = np.empty_like(A)
    R[0] = A[0]
    for layer in range(1, len(A)):
        R[layer] = A[layer] @ R[layer - 1]  # (T, T)  R_l = A_l R_{l-1}
    return R
