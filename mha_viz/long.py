"""Attention over long inputs (thousands of tokens) without holding [H, T, S] in memory.

At T = S = 4096 with 12 heads one float32 attention tensor is 805 MB, and a full AttentionTrace
holds two (scores and weights). A LongTrace keeps what every block of them is computed from,
plus a max-pooled overview, and computes any block exactly on demand:

    scores[h, i, j]  = scale * q_i · k_j  (-inf where causal hides key j from query i)
    lse[h, i]        = log sum_j exp(scores[h, i, j])            one number per row
    weights[h, i, j] = exp(scores[h, i, j] - lse[h, i])          = softmax over all S keys

The rows are computed in chunks through the one attention core (mha_viz.attention.attend), so
the numbers are those of MultiHeadAttention's own trace (a test checks them against it).
Memory at T = S = 4096, d_model = 768, 12 heads: Q, K, V 12.6 MB each, concat and output 12.6
MB each, lse 0.2 MB, overview 0.8 MB: 65 MB instead of 1.6 GB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from .attention import MultiHeadAttention, Variations, attend

OVERVIEW_SIDE = 128  # the overview has at most this many cells a side (as heads_figure's MAX_CELLS_PER_SIDE)
CHUNK_CELLS = 2**22  # query rows go through attend() in chunks of about this many cells, all heads (16 MB float32)


class LongShape:
    """What a long trace's figures read of its size: num_heads and shape (H, T, S), from its queries [H, T, d_k] and
    keys [., S, d_k] (LongTrace here, a pretrained model's LongLayer)."""

    kind: ClassVar[str] = "softmax"  # what its weights are (mha_viz.mixers.KINDS; a LongMixerLayer's is not softmax)

    @property
    def num_heads(self) -> int:
        return self.queries.shape[0]

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, T, S): the shape of the attention this trace stands for."""
        return self.queries.shape[0], self.queries.shape[1], self.keys.shape[1]


@dataclass(frozen=True, eq=False)
class LongTrace(LongShape):
    """One attention layer on a long input: Q, K, V, the row log-sum-exp, the output and an overview.

    queries [H, T, d_k]   keys [H, S, d_k]   values [H, S, d_v]   lse [H, T]
    concat  [T, H*d_v]    output [T, d_out]  W_O [d_out, H*d_v]
    overview [H, t, s]: the largest weight in each block_rows x block_cols block of positions
    (t = ceil(T / block_rows), s = ceil(S / block_cols), both at most OVERVIEW_SIDE).
    """

    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    queries: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    lse: np.ndarray
    concat: np.ndarray
    output: np.ndarray
    W_O: np.ndarray
    overview: np.ndarray
    block_rows: int
    block_cols: int
    scale: float
    causal: bool = False
    cross: bool = False
    kv_heads: tuple[int, ...] | None = None  # as AttentionTrace's: the K/V head of each query head (None: its own)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.queries, self.keys, self.values, self.lse, self.concat, self.output,
                                      self.W_O, self.overview))

    def scores(self, rows: slice, cols: slice) -> np.ndarray:
        """[H, r, c] scale * Q K^T of query positions rows and key positions cols (-inf where masked)."""
        q = torch.from_numpy(self.queries[:, rows])  # (H, r, d_k)
        k = torch.from_numpy(self.keys[:, cols])  # (H, c, d_k)
        r0, c0 = rows.indices(self.shape[1])[0], cols.indices(self.shape[2])[0]
        mask = _causal_block(r0, q.shape[1], c0, k.shape[1]) if self.causal else None
        v = torch.zeros(*k.shape[:2], 1)  # attend needs values; this block's outputs are not used
        return attend(q, k, v, Variations(scale=self.scale, mask=mask)).scores.numpy()  # (H, r, c)

    def weights(self, rows: slice, cols: slice) -> np.ndarray:
        """[H, r, c] the exact softmax weights (normalised over all S keys) of a block of positions."""
        return np.exp(self.scores(rows, cols) - self.lse[:, rows, None]).astype(np.float32)  # (H, r, c)


def _causal_block(r0: int, r: int, c0: int, c: int) -> torch.Tensor:
    """(r, c) True where key c0 + j comes after query r0 + i."""
    return (torch.arange(c0, c0 + c)[None, :] > torch.arange(r0, r0 + r)[:, None])  # (r, c)


def long_trace(
    mha: MultiHeadAttention,
    x: torch.Tensor,
    context: torch.Tensor | None = None,
    *,
    causal: bool = False,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    overview_side: int = OVERVIEW_SIDE,
) -> LongTrace:
    """Trace mha on x (T, d_model) [and context (S, d_context)], keeping no [H, T, S] tensor.

    Query rows go through attend() in chunks (a whole number of overview blocks each), so peak memory is
    a few chunks of [H, rows, S], not [H, T, S].
    """
    if x.dim() != 2 or (context is not None and context.dim() != 2):
        raise ValueError("long_trace traces one input: x must be (T, d_model) and context (S, d_context)")
    c = x if context is None else context
    T, S = x.shape[0], c.shape[0]
    if T == 0 or S == 0:
        raise ValueError("cannot attend over an empty sequence")
    if len(query_tokens) != T or (key_tokens is not None and len(key_tokens) != S):
        raise ValueError(f"{len(query_tokens)} query tokens for {T} positions")
    cfg = mha.config
    scale = 1.0 / math.sqrt(cfg.d_k)
    bt, bs = -(-T // overview_side), -(-S // overview_side)
    rows_per_chunk = bt * max(1, CHUNK_CELLS // (cfg.num_heads * S * bt))
    with torch.inference_mode():
        q = mha._project(x, mha.W_Q, mha.b_Q)  # (H, T, d_k)
        k, v = mha.project_kv(c)  # (H, S, d_k), (H, S, d_v): grouped-query K/V repeated per query head
        H = q.shape[0]
        lse = torch.empty(H, T)  # (H, T)
        head_outputs = torch.empty(H, T, v.shape[-1])  # (H, T, d_v)
        overview = torch.empty(H, -(-T // bt), -(-S // bs))  # (H, t, s)
        pad_cols = -(-S // bs) * bs - S
        for r0 in range(0, T, rows_per_chunk):
            r1 = min(T, r0 + rows_per_chunk)
            mask = _causal_block(r0, r1 - r0, 0, S) if causal else None
            a = attend(q[:, r0:r1], k, v, Variations(scale=scale, mask=mask))  # scores, weights (H, r, S)
            lse[:, r0:r1] = torch.logsumexp(a.scores, dim=-1)  # (H, r)
            head_outputs[:, r0:r1] = a.head_outputs  # (H, r, d_v)
            pad_rows = -(-(r1 - r0) // bt) * bt - (r1 - r0)
            w = a.weights  # (H, r, S)
            if pad_cols or pad_rows:  # -inf never wins a max
                w = torch.nn.functional.pad(w, (0, pad_cols, 0, pad_rows), value=-math.inf)  # (H, r', S')
            blocks = w.unflatten(-1, (-1, bs)).unflatten(-3, (-1, bt))  # (H, r/bt, bt, S'/bs, bs)
            overview[:, r0 // bt:r0 // bt + blocks.shape[1]] = blocks.amax(dim=(-3, -1))  # (H, r/bt, s)
        concat = head_outputs.transpose(0, 1).flatten(1)  # (T, H*d_v)
        output = concat @ mha.W_O.T  # (T, d_out)
        if mha.b_O is not None:
            output = output + mha.b_O
    qt = tuple(query_tokens)
    kt = qt if context is None else tuple(key_tokens or (str(j) for j in range(S)))
    return LongTrace(
        query_tokens=qt, key_tokens=kt,
        queries=q.numpy(), keys=k.numpy(), values=v.numpy(), lse=lse.numpy(),
        concat=concat.numpy(), output=output.numpy(), W_O=mha.W_O.detach().numpy().copy(),
        overview=overview.numpy(), block_rows=bt, block_cols=bs, scale=scale,
        causal=causal, cross=context is not None, meta={"model": "configurable"},
        kv_heads=None if cfg.group_size == 1 else tuple(cfg.kv_head(h) for h in range(cfg.num_heads)),
    )
