"""Per-head statistics of a mixer layer (linear attention, a state space): what softmax statistics become when a
head's matrix M [H, T, T] is signed and its rows are not distributions.

    reach      mean_t sum_s |M_ts| (t - s) / sum_s |M_ts|     how far back a head reads, in tokens (|M|-weighted)
    half_life  ln(1/2) / mean_t ln(decay_t)                   tokens until the head's state has halved (its decays'
                                                              geometric mean); inf for a head that never forgets
    decay      mean_t decay_t                                 the per-token factor on the head's state
               (half_life and decay are NaN for a layer without decays: a short convolution keeps exactly its width)
    diagonal   sum_t |M_tt| / sum_ts |M_ts|                   share of the matrix on the token itself
    negative   sum of |M_ts| where M_ts < 0 / sum_ts |M_ts|   share that subtracts (softmax: 0)
    row_sum    mean_t sum_s M_ts                              what a constant value comes out as (softmax: 1)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..trace import AttentionTrace


@dataclass(frozen=True)
class MixerStats:
    """One value per head for each statistic (all [H], float64); see the module docstring."""

    reach: np.ndarray
    half_life: np.ndarray
    decay: np.ndarray
    diagonal: np.ndarray
    negative: np.ndarray
    row_sum: np.ndarray

    @property
    def num_heads(self) -> int:
        return len(self.reach)

    def columns(self) -> dict[str, np.ndarray]:
        """A table: a 'head' column, then one column per statistic."""
        return {"head": np.arange(self.num_heads), **{f.name: getattr(self, f.name) for f in fields(self)}}


def mixer_stats(trace: AttentionTrace) -> MixerStats:
    """The statistics of a mixer layer's trace (trace.kind "linear", "ssm" or "conv"); ValueError for softmax
    attention, whose rows are distributions (mha_viz.analysis.trace_head_stats)."""
    if not trace.mixes:
        raise ValueError("mixer_stats reads a mixer layer's matrix; this layer is softmax attention "
                         "(use trace_head_stats)")
    M = trace.weights.astype(np.float64)  # (H, T, T)
    size = np.abs(M)
    T = M.shape[-1]
    back = np.maximum(np.arange(T)[:, None] - np.arange(T)[None, :], 0)  # (T, T) t - s, 0 above the diagonal
    row_total = size.sum(-1)  # (H, T)
    reach = np.divide((size * back).sum(-1), row_total, out=np.zeros_like(row_total), where=row_total > 0).mean(-1)
    total = size.sum((-1, -2))  # (H,)
    decays = trace.head_arrays.get("decay", np.full(M.shape[:2], np.nan)).astype(np.float64)  # (H, T)
    log_decay = np.log(decays).mean(-1)  # (H,)
    half_life = np.divide(np.log(0.5), log_decay, out=np.where(np.isnan(log_decay), np.nan, np.inf),
                          where=log_decay < 0)
    return MixerStats(
        reach=reach,
        half_life=half_life,
        decay=decays.mean(-1),
        diagonal=np.diagonal(size, axis1=1, axis2=2).sum(-1) / total,
        negative=np.where(M < 0, size, 0.0).sum((-1, -2)) / total,
        row_sum=M.sum(-1).mean(-1),
    )
