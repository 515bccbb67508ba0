"""Which relation does each head follow: the attention mass it puts on each relation's keys.

    score[h, r] = mean over counted queries (b, t) of  sum_s weights[b, h, t, s] * mask[b, r, t, s]
A query t counts for relation r where r is defined and its key differs from every other relation's
key there (at t = 1 'previous' and 'first' are both key 0, so attention there tells them apart for no head).
"""

from __future__ import annotations

import numpy as np


def relation_masks(positions: np.ndarray, num_keys: int) -> np.ndarray:
    """Key positions [..., R, T] (-1: undefined) -> masks [..., R, T, S] of the counted queries' keys."""
    pos = np.asarray(positions)  # (..., R, T)
    clash = (pos[..., :, None, :] == pos[..., None, :, :]).sum(-2) > 1  # (..., R, T)  shared with another relation
    keep = (pos >= 0) & ~clash  # (..., R, T)
    return (pos[..., None] == np.arange(num_keys)) & keep[..., None]  # (..., R, T, S)


def relation_scores(weights: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """weights [..., H, T, S], masks [..., R, T, S] -> scores [H, R] (NaN: relation never counted).

    Leading dims (a batch of sequences) are averaged over together with the queries.
    """
    w = np.asarray(weights, dtype=np.float64)
    H, T, S = w.shape[-3:]
    R = masks.shape[-3]
    w = w.reshape(-1, H, T, S)  # (N, H, T, S)
    m = np.asarray(masks, dtype=np.float64).reshape(-1, R, T, S)  # (N, R, T, S)
    counted = m.any(-1)  # (N, R, T)
    mass = np.einsum("nhts,nrts->hr", w, m)  # (H, R)  summed over counted queries
    count = counted.sum((0, 2))  # (R,)
    return mass / np.where(count > 0, count, np.nan)  # (H, R)
