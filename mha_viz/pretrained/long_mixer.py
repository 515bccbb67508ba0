"""Long traces of mixer layers (linear attention, state spaces): what each head's matrix M is made of, per token, and
from it any block of M exactly on demand, with no [H, T, T] in memory.

A mixer's matrix needs no softmax normaliser: M[t, s] depends only on the factors of positions s ... t (queries,
keys, decays, write strengths, step sizes: mha_viz.mixers.Factors), so a long trace keeps those and computes
    block(head, q_start, k_start, size)      M of those rows and keys (a delta rule runs its recurrence from k_start
                                             on, carrying only the block's columns; the others are closed forms)
    row(head, query)                         one query's M over every key
After the model's own forward pass (the mixer running its own kernel) M is swept once, row chunk by row chunk, for:
    overview      per block of positions, the signed value of the largest |M| (max) and the mean of M (mean)
    row_stats     on |M|'s rows normalised to 1 (a mixer's rows are signed and do not sum to 1): distance
                  sum_s p_ts (t - s), entropy -sum_s p_ts log p_ts, first p_t0; sink 0 (no sink logit)
    check         max |M @ values - the kernel's own output| (where a norm after the kernel shows that output)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..mixers import Factors
from .adapter import per_head
from .long import STAT_NAMES, LongBlocks, _block_counts


@dataclass(eq=False)
class LongMixerLayer(LongBlocks):
    """One mixer layer of a long trace: factors (mha_viz.mixers.Factors) of M [H, T, T], its row statistics
    {name: [H, T]} and overview (max, mean [H, t, s]), kind ("linear" or "ssm"), meta (the self-check, as a trace's)."""

    layer: int
    kind: str
    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    factors: Factors
    row_stats: dict[str, Tensor]
    overview_max: np.ndarray
    overview_mean: np.ndarray
    block_rows: int
    block_cols: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_heads(self) -> int:
        return self.factors.num_heads

    @property
    def shape(self) -> tuple[int, int, int]:
        T = self.factors.length
        return self.num_heads, T, T

    @property
    def nbytes(self) -> int:
        stats = sum(t.nelement() * t.element_size() for t in self.row_stats.values())
        return self.factors.nbytes + stats + self.overview_max.nbytes + self.overview_mean.nbytes

    def weights(self, rows: slice, cols: slice, heads: list[int] | None = None) -> np.ndarray:
        """[h, r, c] the exact mixing matrix of query positions rows and key positions cols (signed; 0 above the
        diagonal)."""
        heads = None if heads is None else [int(h) for h in heads]
        with torch.inference_mode():
            return self.factors.block(rows, cols, heads).numpy().astype(np.float32, copy=False)  # (h, r, c)


@dataclass(frozen=True)
class Swept:
    """What one pass over a mixer's M (H, T, T) gives: row statistics {name: (H, T)}, the overview's max and mean
    (H, t, s) by blocks of block x block positions, and with values (H, T, d_v): mixed = M @ values and the size
    rounding scales with, a bound on the largest sum_s |M_ts| |v_s|: each head's largest sum_s |M_ts| times its
    largest |value| (mha_viz.checks)."""

    stats: dict[str, Tensor]
    largest: np.ndarray
    mean: np.ndarray
    block: int
    mixed: Tensor | None = None
    terms: float = 0.0


def sweep(factors: Factors, side: int, values: Tensor | None = None) -> Swept:
    """One pass over M (H, T, T), row chunk by row chunk (Factors.row_chunks: never the whole matrix)."""
    H, T = factors.num_heads, factors.length
    b = -(-T // side)  # positions per overview block, both ways
    n = -(-T // b)  # blocks a side
    stats = {name: torch.zeros(H, T) for name in STAT_NAMES}
    largest, total = torch.zeros(H, n, n), torch.zeros(H, n, n)  # signed value of the largest |M|, sum of M
    mixed = None if values is None else values.new_zeros(H, T, values.shape[-1])
    terms = 0.0
    top = None if values is None else values.abs().amax((-1, -2))  # (H,) each head's largest |value|
    with torch.inference_mode():
        for h, r0, m in factors.row_chunks():  # (h, r, c): heads h, rows r0 ..., keys 0 ... c - 1 (the rest are 0)
            r, c = m.shape[-2:]
            size = m.abs()
            if mixed is not None:
                mixed[h, r0:r0 + r] = m @ values[h, :c]
                terms = max(terms, float((size.sum(-1).amax(-1) * top[h]).max()))  # (h,) >= sum_s |M_ts| |v_s|
            row_total = size.sum(-1)  # (h, r)
            p = size / row_total.clamp_min(torch.finfo(size.dtype).tiny)[..., None]  # (h, r, c), rows sum to 1 or 0
            back = (torch.arange(r0, r0 + r)[:, None] - torch.arange(c)[None, :]).clamp_min(0).float()  # (r, c)
            stats["distance"][h, r0:r0 + r] = (p * back).sum(-1)
            stats["entropy"][h, r0:r0 + r] = -torch.special.xlogy(p, p).sum(-1)
            stats["first"][h, r0:r0 + r] = p[..., 0]
            m = torch.nn.functional.pad(m, (0, n * b - c)).unflatten(-1, (n, b))  # (h, r, n, b) key blocks
            at = m.abs().argmax(-1, keepdim=True)  # (h, r, n, 1)
            row_largest, row_sum = m.gather(-1, at)[..., 0], m.sum(-1)  # (h, r, n)
            for rb in range(r0 // b, (r0 + r - 1) // b + 1):  # the overview rows this chunk's rows fall in
                lo, hi = max(r0, rb * b) - r0, min(r0 + r, (rb + 1) * b) - r0
                seg = row_largest[:, lo:hi]  # (h, rows, n)
                best = seg.gather(1, seg.abs().argmax(1, keepdim=True))[:, 0]  # (h, n)
                largest[h, rb] = torch.where(best.abs() > largest[h, rb].abs(), best, largest[h, rb])
                total[h, rb] += row_sum[:, lo:hi].sum(1)
    counts = _block_counts(T, b, n)[:, None] * _block_counts(T, b, n)[None, :]  # (n, n) token pairs per block
    return Swept(stats, largest.numpy(), (total / counts).numpy(), b, mixed, terms)


def long_mixer_layer(adapter: Any, layer: int, x: Tensor, core_input: Tensor | None, tokens: tuple[str, ...],
                     side: int) -> LongMixerLayer:
    """The LongMixerLayer of adapter's mixer layer on its input x (T, d_model) from the long forward pass;
    core_input: what the norm after its kernel received (T H d_v numbers, in any shape), for the self-check, or None."""
    module = adapter.mixer(layer)
    with torch.inference_mode():
        mix = adapter.mixing(module, x)  # its factors only: the whole matrix is never made
    swept = sweep(mix.factors, side, mix.values if core_input is not None else None)
    check, scale = {}, {}
    if core_input is not None:  # the kernel's own output, where a norm between it and the projection shows it
        own = per_head(core_input.float().reshape(x.shape[0], -1), mix.factors.num_heads)  # (H, T, d_v)
        label = "mixing matrix @ values vs the mixer's own output"
        check[label] = float((swept.mixed - own).abs().max())
        scale[label] = swept.terms
    dtype = "float32" if core_input is None else str(core_input.dtype).removeprefix("torch.")
    return LongMixerLayer(
        layer, mix.kind, tokens, tokens, mix.factors, swept.stats, swept.largest, swept.mean, swept.block, swept.block,
        meta={"mixer": mix.name, "check": check, "check_scale": scale, "model_dtype": dtype,
              **adapter.block_meta(layer)},
    )
