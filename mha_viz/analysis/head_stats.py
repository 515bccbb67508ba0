"""Per-head statistics of attention weights [H, T, S]: what kind of head is this?

    entropy     mean_i H_i / log n_i    H_i = -sum_j w_ij log w_ij, n_i = number of keys row i may see:
                                        uniform over the visible keys = 1, one-hot = 0. A row that sees
                                        one key has no choice to make and is skipped (NaN if all are).
    confidence  mean_i max_j w_ij       how peaked the rows are
    first       mean_i w_i0             share of attention on the first key token
    special     mean_i sum_{j in P} w_ij  share on the special tokens P (given as positions or strings)
    previous    mean_{i>=1} w_i,i-1     same: mean_i w_ii     next: mean_{i<=S-2} w_i,i+1
    distance    mean_i sum_j w_ij |i-j| mean attended distance, in tokens
    sink        mean_i (1 - sum_j w_ij) share of the softmax a learned sink logit took (gpt-oss; trace_head_stats of
                                        a trace with sinks), else None
    dropped     mean_i of the mass dense attention would have given the keys a sparse layer's indexer dropped
                                        (DeepSeek-V3.2: trace.head_arrays["dropped mass"]), else None
previous, same, next and distance compare query and key positions: NaN for cross-attention.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from ..trace import AttentionTrace


@dataclass(frozen=True)
class HeadStats:
    """One value per head for each statistic (all [H], float64); see the module docstring."""

    entropy: np.ndarray
    confidence: np.ndarray
    first: np.ndarray
    special: np.ndarray
    previous: np.ndarray
    same: np.ndarray
    next: np.ndarray
    distance: np.ndarray
    sink: np.ndarray | None = None
    dropped: np.ndarray | None = None

    @property
    def num_heads(self) -> int:
        return len(self.entropy)

    def columns(self) -> dict[str, np.ndarray]:
        """A table: a 'head' column, then one column per statistic."""
        return {"head": np.arange(self.num_heads),
                **{f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}}


def _mean(values: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Mean over the last axis of values [H, n], only where rows [H, n] is True; NaN where nothing counts."""
    rows = np.ones(values.shape, dtype=bool) if rows is None else rows
    count = rows.sum(-1)  # (H,)
    total = np.where(rows, values, 0.0).sum(-1)  # (H,)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def head_stats(
    weights: np.ndarray,
    *,
    visible: np.ndarray | None = None,
    special: Collection[int] = (),
    positional: bool = True,
) -> HeadStats:
    """Statistics of weights [H, T, S].

    visible [T, S] or [H, T, S]: True where query i may see key j (default: every key).
    special: key positions counted as special tokens. positional=False (cross-attention):
    previous/same/next/distance are NaN.
    """
    w = np.asarray(weights, dtype=np.float64)  # (H, T, S)
    H, T, S = w.shape
    seen = np.ones((T, S), dtype=bool) if visible is None else np.asarray(visible, dtype=bool)
    n = np.broadcast_to(seen.sum(-1), (H, T))  # (H, T) visible keys per row
    row_entropy = -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1)  # (H, T)  -sum_j w_ij log w_ij, 0 log 0 = 0
    choice = n >= 2
    normalised = row_entropy / np.log(np.where(choice, n, 2))  # (H, T)  H_i / log n_i
    keys = sorted({int(j) for j in special if 0 <= int(j) < S})
    if positional:
        # diagonal k holds w_i,i+k for the rows that have a key i+k: (H, T - |k|) for a square matrix
        previous, same, next_ = (_mean(np.diagonal(w, offset=k, axis1=1, axis2=2)) for k in (-1, 0, 1))
        distance = (w * np.abs(np.arange(T)[:, None] - np.arange(S))).sum(-1).mean(-1)  # mean_i sum_j w_ij |i-j|
    else:
        previous = same = next_ = distance = np.full(H, np.nan)
    return HeadStats(
        entropy=_mean(normalised, choice),
        confidence=w.max(-1).mean(-1),
        first=w[..., 0].mean(-1),
        special=w[..., keys].sum(-1).mean(-1),
        previous=previous,
        same=same,
        next=next_,
        distance=distance,
    )


def special_positions(tokens: Sequence[str], special: Collection[str | int]) -> list[int]:
    """Positions of tokens that are in special (strings), plus the integer positions in special."""
    positions = {int(s) for s in special if isinstance(s, (int, np.integer))}
    names = {s for s in special if isinstance(s, str)}
    return sorted(positions | {j for j, t in enumerate(tokens) if t in names})


def visible_keys(trace: AttentionTrace) -> np.ndarray:
    """[H, T, S] or [T, S]: True where a query may see a key (finite score; else the causal mask)."""
    if trace.scores is not None:
        return np.isfinite(trace.scores)  # (H, T, S)
    T, S = trace.weights.shape[1:]
    return np.tri(T, S, dtype=bool) if trace.causal else np.ones((T, S), dtype=bool)  # (T, S)


def trace_head_stats(trace: AttentionTrace, special: Collection[str | int] = ()) -> HeadStats:
    """head_stats of a trace: visibility from its scores or mask, special tokens by string or position; with sinks,
    the mean sink mass per head; for a sparse layer, the mean dropped mass per head."""
    stats = head_stats(
        trace.weights,
        visible=visible_keys(trace),
        special=special_positions(trace.key_tokens, special),
        positional=not trace.cross,
    )
    if trace.sink_mass is not None:
        stats = replace(stats, sink=trace.sink_mass.mean(-1).astype(np.float64))
    if "dropped mass" in trace.head_arrays:
        stats = replace(stats, dropped=trace.head_arrays["dropped mass"].mean(-1).astype(np.float64))
    return stats
