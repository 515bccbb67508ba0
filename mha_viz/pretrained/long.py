"""Long traces of pretrained models: every head of every layer over thousands of tokens, exact on demand.

One forward pass runs the model with mha-viz's own attention kernel in place of transformers' (registered through
transformers' public AttentionInterface, so no [H, T, S] tensor is ever made). Each attention call receives the
model's queries and keys after its position handling (rotary, q/k norms) and computes, tile by tile of query rows
and only the keys they can see (run_layer: the softmax of mha_viz.attention.attend, the one core, which computes
any exact block afterwards; tests hold the two equal and equal to the model's own eager weights):

    scores[h, i, j] = scale * q_i . k_j (+ ALiBi), soft-capped, -inf where causal, a window or a chunk hides j
    lse[h, i]       = log (sum_j exp(scores[h, i, j]) + exp(sink_h))        the sink term with learned sinks only
    weights         = exp(scores - lse)                                        exact softmax weights of any block
    output          = weights @ V                                              handed back to the model

It keeps, per layer, Q and K as the scores use them, V, lse, per-row statistics and the overview (block maxima and
block means of the weights, so a sink column and a diagonal both show). What it keeps per token and layer is
(H d_k + KV d_k + KV d_v + 5 H) x 4 bytes, plus 2 H x 128 x 128 x 4 bytes of overview per layer (LongLayer.nbytes,
ModelLongTrace.nbytes); work memory is a few tiles of [H, rows, keys] float32 (TILE_CELLS) and one
[KV, S, d_v + d_k + 2] copy of the keys and values. Models whose attention is their own code (BLOOM) run their own
eager pass instead (long_hooked), refused beforehand where its [H, T, T] tensors would not fit.

    >>> long = model.long_trace(text)                 # a PretrainedModel; or token ids: model.long_trace(ids=[...])
    >>> long.overview(3).max.shape                     # (heads, rows, cols) block maxima of layer 3
    >>> long.block(3, head=0, q_start=4000, k_start=0, size=128)   # exact weights, (128, 128)
    >>> long.row(3, head=0, query=16000)               # one query's weights over all keys
    >>> long.stats().distance                          # [layers, heads] mean attention distance
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import Variations, attend
from ..long import LongShape

KERNEL = "mha_viz_long"  # the attention implementation's name in transformers' AttentionInterface
OVERVIEW_SIDE = 128  # the overview has at most this many blocks a side
STAT_NAMES = ("distance", "entropy", "first", "sink")  # per-row statistics kept for every head


class LongTraceCancelled(RuntimeError):
    """The progress callback asked to stop a long trace."""


@dataclass(frozen=True)
class Rules:
    """How one layer turns the stored q and k into weights (beyond scale * q . k)."""

    scale: float
    causal: bool
    window: int | None = None  # keys with |i - j| >= window are hidden (with causal: the window - 1 keys before i)
    softcap: float | None = None  # scores -> softcap * tanh(scores / softcap)
    sinks: Tensor | None = None  # (H,) one learned logit per head in each softmax, then dropped (gpt-oss)
    alibi: Tensor | None = None  # (H,) ALiBi slopes: slope_h * j added to the score of key j (BLOOM's form)
    chunk: int | None = None  # keys outside the query's chunk of this many positions are hidden (Llama 4's chunks)
    kept: Tensor | None = None  # (T, k) the keys each query may see, the others hidden (DeepSeek-V3.2's indexer)

    def bias(self, heads: Sequence[int] | slice, c0: int, c: int) -> dict[str, Tensor]:
        """attend()'s bias terms for keys c0 ... c0 + c - 1 of heads: ALiBi's slope_h * j, (h, 1, c)."""
        if self.alibi is None:
            return {}
        return {"alibi": self.alibi[heads, None, None] * torch.arange(c0, c0 + c, dtype=torch.float32)}

    def visible(self, r0: int, r1: int, S: int) -> tuple[int, int]:
        """The keys [c0, c1) that query rows [r0, r1) can see."""
        c1 = min(S, r1) if self.causal else S
        c0 = 0 if self.window is None else max(0, r0 - self.window + 1)
        if self.chunk is not None:  # from the first row's chunk to the last row's
            c0, c1 = max(c0, r0 // self.chunk * self.chunk), min(c1, -(-r1 // self.chunk) * self.chunk)
        return c0, c1

    def mask(self, r0: int, r: int, c0: int, c: int) -> Tensor | None:
        """(r, c) True where key c0 + j is hidden from query r0 + i; None when nothing is."""
        i = torch.arange(r0, r0 + r)[:, None]  # (r, 1)
        j = torch.arange(c0, c0 + c)[None, :]  # (1, c)
        hidden = torch.zeros(r, c, dtype=torch.bool)
        if self.causal:
            hidden |= j > i
        if self.window is not None:
            hidden |= (i - j).abs() >= self.window
        if self.chunk is not None:
            hidden |= i // self.chunk != j // self.chunk
        if self.kept is not None:  # every key but the query's kept ones; a spare last column takes the others
            index = self.kept[r0:r0 + r].long() - c0  # (r, k)
            index = torch.where((index >= 0) & (index < c), index, c)
            hidden |= ~torch.zeros(r, c + 1, dtype=torch.bool).scatter_(1, index, True)[:, :c]
        return hidden if bool(hidden.any()) else None


@dataclass(frozen=True)
class Overview:
    """Every head of one layer at block resolution: max [H, t, s] the largest weight of each block of block_rows x
    block_cols token pairs, mean [H, t, s] their mean (0 for a pair a query cannot see)."""

    max: np.ndarray
    mean: np.ndarray
    block_rows: int
    block_cols: int


@dataclass(frozen=True)
class LongStats:
    """Per-head statistics over the whole context, [layers, heads] each (rows averaged over all queries; NaN for the
    heads a layer does not have, where layers differ in heads):
    distance  mean over queries of sum_j w_ij |i - j|: how far back (or away) a head looks, in tokens
    entropy   mean of -sum_j w_ij log w_ij, in nats
    first     mean weight on the first token (the usual attention sink)
    sink      mean weight of the learned sink logit (gpt-oss; 0 elsewhere): 1 - the row's sum
    On a mixer layer (linear attention, a state space) w is |M| with each row normalised to 1 (long_mixer)."""

    distance: np.ndarray
    entropy: np.ndarray
    first: np.ndarray
    sink: np.ndarray
    layers: tuple[int, ...]


class LongBlocks:
    """What every layer of a long trace gives (LongLayer, and mha_viz.pretrained.long_mixer's LongMixerLayer): exact
    blocks and rows of its weights on demand (weights(rows, cols, heads), subclasses'), its overview, its row
    statistics ([H, T] each, row_stats) averaged over the queries."""

    @property
    def overview(self) -> np.ndarray:
        """[H, t, s] block maxima (LongTrace's overview; the signed value of the largest magnitude, on a mixer)."""
        return self.overview_max

    def weights(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> np.ndarray:
        raise NotImplementedError

    def block(self, head: int, q_start: int, k_start: int, size: int) -> np.ndarray:
        """[r, c] exact weights of queries q_start ... q_start + size - 1 and keys k_start ... (cut at the ends)."""
        self._check_head(head)
        _, T, S = self.shape
        if not (0 <= q_start < T and 0 <= k_start < S and size >= 1):
            raise ValueError(f"a block needs 0 <= q_start < {T}, 0 <= k_start < {S} and size >= 1")
        return self.weights(slice(q_start, q_start + size), slice(k_start, k_start + size), [head])[0]

    def row(self, head: int, query: int) -> np.ndarray:
        """[S] exact weights of one query over every key."""
        self._check_head(head)
        if not 0 <= query < self.shape[1]:
            raise ValueError(f"query must be 0 ... {self.shape[1] - 1}, got {query}")
        return self.weights(slice(query, query + 1), slice(None), [head])[0, 0]

    def stat(self, name: str) -> np.ndarray:
        """[H] one statistic (STAT_NAMES) averaged over every query."""
        return self.row_stats[name].mean(dim=1).numpy()

    def _check_head(self, head: int) -> None:
        if not 0 <= head < self.num_heads:
            raise ValueError(f"head must be 0 ... {self.num_heads - 1}, got {head}")


@dataclass(eq=False)
class LongLayer(LongBlocks, LongShape):
    """One softmax layer of a long trace: what every block of its weights is computed from.

    queries [H, T, d_k], keys [KV, S, d_k], values [KV, S, d_v] (as the scores use them: after rotary, q/k norms),
    lse [H, T], row_stats {name: [H, T]}, overview (Overview). kv_heads[h]: the K/V head query head h reads.
    It has LongTrace's interface (shape, overview, block_rows, block_cols, weights(rows, cols), tokens), so the
    configurable layer's long figures draw it.
    """

    layer: int
    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    queries: Tensor
    keys: Tensor
    values: Tensor
    lse: Tensor
    row_stats: dict[str, Tensor]
    overview_max: np.ndarray
    overview_mean: np.ndarray
    block_rows: int
    block_cols: int
    rules: Rules
    kv_heads: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        tensors = (self.queries, self.keys, self.values, self.lse, *self.row_stats.values())
        return sum(t.nelement() * t.element_size() for t in tensors) + self.overview_max.nbytes + self.overview_mean.nbytes

    def weights(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> np.ndarray:
        """[h, r, c] the exact softmax weights of query positions rows and key positions cols (0 where hidden)."""
        H, T, S = self.shape
        r0, r1, _ = rows.indices(T)
        c0, c1, _ = cols.indices(S)
        heads = list(range(H)) if heads is None else [int(h) for h in heads]
        q = self.queries[heads, r0:r1]  # (h, r, d_k)
        k = self.keys[[self.kv_heads[h] for h in heads], c0:c1]  # (h, c, d_k)
        rules = self.rules
        var = Variations(scale=rules.scale, softcap=rules.softcap, mask=rules.mask(r0, r1 - r0, c0, c1 - c0),
                         bias=rules.bias(heads, c0, c1 - c0))
        scores = attend(q, k, torch.zeros(*k.shape[:2], 1), var).scores  # (h, r, c); a sink only changes lse
        return torch.exp(scores - self.lse[heads, r0:r1, None]).numpy().astype(np.float32)  # (h, r, c)


@dataclass(eq=False)
class ModelLongTrace:
    """Every traced layer of one long input (a PretrainedModel's long_trace): a LongLayer per softmax layer, a
    LongMixerLayer (mha_viz.pretrained.long_mixer) per linear-attention or state-space layer."""

    model: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    layers: dict[int, LongBlocks]
    seconds: float = 0.0

    @property
    def num_tokens(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers.values())

    def layer(self, layer: int) -> LongBlocks:
        if layer not in self.layers:
            raise IndexError(f"layer {layer} was not traced: traced layers are {sorted(self.layers)}")
        return self.layers[layer]

    def overview(self, layer: int) -> Overview:
        """[heads, rows, cols] block maxima and block means of one layer's weights."""
        one = self.layer(layer)
        return Overview(one.overview_max, one.overview_mean, one.block_rows, one.block_cols)

    def block(self, layer: int, head: int, q_start: int, k_start: int, size: int) -> np.ndarray:
        """[r, c] exact weights of a block of one head (LongLayer.block)."""
        return self.layer(layer).block(head, q_start, k_start, size)

    def row(self, layer: int, head: int, query: int) -> np.ndarray:
        """[S] exact weights of one query of one head (LongLayer.row)."""
        return self.layer(layer).row(head, query)

    def stats(self) -> LongStats:
        """Per-head statistics of every traced layer over the whole context (LongStats)."""
        order = sorted(self.layers)
        H = max(self.layers[i].num_heads for i in order)  # layers may differ in heads (a hybrid's): NaN pads them
        return LongStats(*(np.stack([np.pad(self.layers[i].stat(name), (0, H - self.layers[i].num_heads),
                                            constant_values=np.nan) for i in order]) for name in STAT_NAMES),
                         layers=tuple(order))


def kept_bytes_per_token(num_heads: int, num_kv_heads: int, d_k: int, d_v: int) -> int:
    """Bytes a long trace keeps per token and layer: Q, K, V, lse and the row statistics, float32."""
    return 4 * (num_heads * d_k + num_kv_heads * (d_k + d_v) + num_heads * (1 + len(STAT_NAMES)))


class _Capture:
    """What one forward pass records: the attention modules of the traced layers, and each layer's LongLayer."""

    def __init__(self, modules: dict[nn.Module, tuple[int, bool, int | None]], tokens: tuple[str, ...],
                 progress: Callable[[int, int], None] | None, side: int, total: int | None = None) -> None:
        self.modules = modules  # attention module -> (layer, causal, chunk)
        self.total = len(modules) if total is None else total  # layers to trace, with any mixer layers
        self.tokens = tokens
        self.progress = progress
        self.side = side
        self.layers: dict[int, LongBlocks] = {}
        self.causal_mask: Tensor | None = None  # the [1, 1, T, T] mask given to a model that needs one (long_pass)

    def attention(self, module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                  *, scaling: float | None = None, sliding_window: int | None = None, softcap: float | None = None,
                  s_aux: Tensor | None = None, indices: Tensor | None = None, **_: Any) -> tuple[Tensor, None]:
        """transformers' attention-function signature: query (1, H, T, d), key (1, KV, S, d), value (1, KV, S, d_v)
        -> output (1, T, H, d_v); records the layer of a traced module. indices (1, T, k): the keys each query may
        see (DeepSeek-V3.2's indexer, which also needs the causal mask the pass gave the model: self.causal_mask)."""
        if query.shape[0] != 1:
            raise ValueError("a long trace reads one input (a batch of one)")
        if attention_mask is not None and attention_mask is not self.causal_mask:
            raise ValueError(f"{type(module).__name__} passed its own attention mask (a score bias); a long trace "
                             "cannot reproduce it")
        layer, causal, chunk = self.modules.get(module, (None, bool(getattr(module, "is_causal", False)), None))
        rules = Rules(
            scale=float(scaling if scaling is not None else module.scaling), causal=causal,
            window=int(sliding_window) if sliding_window else None, softcap=float(softcap) if softcap else None,
            sinks=None if s_aux is None else s_aux.detach().float(), chunk=chunk,
            kept=None if indices is None else indices[0].detach(),
        )
        q, k, v = query[0].float(), key[0].float(), value[0].float()  # (H, T, d), (KV, S, d), (KV, S, d_v)
        output, record = run_layer(q, k, v, rules, side=self.side, keep=layer is not None and layer not in self.layers)
        if record is not None:
            lse, stats, ov_max, ov_mean, bt, bs = record
            self.layers[layer] = LongLayer(
                layer, self.tokens, self.tokens, q, k, v, lse, stats, ov_max, ov_mean, bt, bs, rules,
                kv_heads=tuple(h // (q.shape[0] // k.shape[0]) for h in range(q.shape[0])),
            )
            self.report()
        return output.to(query.dtype).transpose(0, 1).unsqueeze(0), None  # (1, T, H, d_v)

    def report(self) -> None:
        """Tell progress how many layers are traced, of how many."""
        if self.progress is not None:
            self.progress(len(self.layers), self.total)


def run_layer(q: Tensor, k: Tensor, v: Tensor, rules: Rules, *, side: int = OVERVIEW_SIDE, keep: bool = True
              ) -> tuple[Tensor, tuple | None]:
    """One layer's attention over a long input, tile by tile, over only the keys each query can see.

    q (H, T, d_k), k (KV, S, d_k), v (KV, S, d_v) (query head h reads K/V head h // (H / KV)). Returns the head
    outputs (H, T, d_v) and, with keep, (lse (H, T), row statistics {name: (H, T)}, overview max and mean (H, t, s),
    block_rows, block_cols).

    The same softmax as attend() (LongLayer.weights computes blocks through it; the tests hold the two equal), in one
    pass of tiles small enough to stay in the CPU's cache (TILE_CELLS), as flash attention does: for each chunk of
    query rows, tile by tile of keys, with m the running row max (from the sink logit, if any) and e = exp(s - m),
        acc = acc * exp(m_old - m) + e [V | K | j | 1]      head output, sum e k (entropy), sum e j (distance), sum e
        block maxima and sums of e over each key block       kept with the m they were taken at
    and at the chunk's end z = sum e + exp(sink - m), lse = m + log z, every kept value rescaled to the final m and
    divided by z, the block values reduced over row blocks. The entropy uses sum_j e_j s_j = scale q . sum_j e_j k_j
    (+ ALiBi's slope sum_j e_j j): scores are linear in k (soft-capped scores are summed tile by tile instead).
    """
    H, T, d_k = q.shape
    KV, S, d_v = v.shape
    g = H // KV  # query heads per K/V head: q's heads grouped (KV, g * rows, d) against k (KV, d, c)
    bt, bs, rows, cols = tile_shape(H, T, S, side)
    t, s = -(-T // bt), -(-S // bs)
    positions = torch.arange(S, dtype=torch.float32)  # (S,)
    extra = torch.cat((k, positions[None, :, None].expand(KV, S, 1), torch.ones(KV, S, 1)), dim=-1)
    v_ext = torch.cat((v, extra), dim=-1)  # (KV, S, n)
    blocks = torch.eye(cols // bs).repeat_interleave(bs, dim=0)  # (cols, cols / bs): key j -> its block in a tile
    qs = q * rules.scale  # (H, T, d_k)
    sinks = None if rules.sinks is None else rules.sinks.float()[:, None]  # (H, 1)
    out = torch.empty(H, T, d_v)
    lse = torch.empty(H, T)
    stats = {name: torch.zeros(H, T) for name in STAT_NAMES}
    ov_max, ov_sum = torch.zeros(H, t, s), torch.zeros(H, t, s)
    for r0 in range(0, T, rows):
        r1 = min(T, r0 + rows)
        r = r1 - r0
        c0, c1 = rules.visible(r0, r1, S)
        c0, c1 = c0 // bs * bs, min(S, -(-c1 // bs) * bs)  # whole overview blocks (the extra keys are hidden: 0)
        q_rows = qs[:, r0:r1].reshape(KV, g * r, d_k)
        m = torch.full((H, r), -math.inf) if sinks is None else sinks.expand(H, r).clone()  # (H, r)
        acc = torch.zeros(H, r, v_ext.shape[-1])  # (H, r, n)
        tiles = list(range(c0, c1, cols))
        n_blocks = -(-(c1 - c0) // bs)
        block_max, block_sum = torch.empty(H, r, n_blocks), torch.empty(H, r, n_blocks)  # (H, r, nb)
        block_m = torch.empty(H, r, n_blocks)  # the m each block's values were taken at
        soft_es = torch.zeros(H, r) if rules.softcap is not None else None  # sum e (s - m), tile by tile
        distance = torch.zeros(H, r) if not rules.causal else None  # sum e |i - j|, tile by tile
        first = None
        for a in tiles:
            b = min(c1, a + cols)
            c, n0 = b - a, (a - c0) // bs
            n1 = n0 + -(-c // bs)
            scores = torch.bmm(q_rows, k[:, a:b].transpose(1, 2)).view(H, r, c)  # (H, r, c) scale q . k
            if rules.alibi is not None:
                scores.add_(rules.bias(slice(None), a, c)["alibi"])
            if rules.softcap is not None:
                scores.div_(rules.softcap).tanh_().mul_(rules.softcap)
            _hide(scores, rules, r0, a)
            raw_max = _block_max(scores, bs)  # (H, r, nb) the largest score of each key block
            m_new = torch.maximum(m, raw_max.amax(-1))  # (H, r)
            scores.sub_(m_new[..., None])  # s - m
            alpha = torch.exp(m - m_new)[..., None]  # (H, r, 1) rescales what earlier tiles summed
            if soft_es is not None:
                soft_es = soft_es * alpha[..., 0] + torch.linalg.vecdot(scores.exp(), scores)
            e = scores.exp_()  # (H, r, c) unnormalised weights, 0 where hidden
            rhs = torch.cat((v_ext[:, a:b], blocks[:c, : n1 - n0].expand(KV, c, n1 - n0)), dim=-1)
            product = torch.bmm(e.view(KV, g * r, c), rhs).view(H, r, -1)  # [e V | e K | e j | e | block sums]
            acc.mul_(alpha).add_(product[..., : acc.shape[-1]])
            if distance is not None:
                i = torch.arange(r0, r1, dtype=torch.float32)[:, None]  # (r, 1)
                distance = distance * alpha[..., 0] + (e * (i - positions[a:b]).abs()).sum(-1)
            if a == 0:
                first = e[..., 0].clone()  # (H, r), at m_new
            m = m_new
            block_max[..., n0:n1] = torch.exp(raw_max - m[..., None])  # exp is monotonic: the max of e
            block_sum[..., n0:n1] = product[..., acc.shape[-1]:]
            block_m[..., n0:n1] = m[..., None]
        e_sum = acc[..., -1]  # (H, r)
        sink_w = None if sinks is None else torch.exp(sinks - m)  # (H, r) the sink's share before dividing by z
        z = e_sum if sink_w is None else e_sum + sink_w  # (H, r)
        out[:, r0:r1] = acc[..., :d_v] / z[..., None]
        if not keep:
            continue
        log_z = z.log()
        lse[:, r0:r1] = m + log_z
        sum_ks = acc[..., d_v:d_v + d_k]  # (H, r, d_k) sum e k
        sum_j = acc[..., -2]  # (H, r) sum e j
        if soft_es is None:  # sum e (s - m), s = scale q . k + slope j
            es = torch.linalg.vecdot(qs[:, r0:r1], sum_ks) - m * e_sum
            if rules.alibi is not None:
                es = es + rules.alibi[:, None] * sum_j
        else:
            es = soft_es
        i = torch.arange(r0, r1, dtype=torch.float32)  # (r,)
        stats["distance"][:, r0:r1] = ((i * e_sum - sum_j) if distance is None else distance) / z
        stats["entropy"][:, r0:r1] = (e_sum * log_z - es) / z
        if first is not None:
            stats["first"][:, r0:r1] = first / z  # tile 0's m is no longer m: rescaled below
            stats["first"][:, r0:r1] *= torch.exp(block_m[..., 0] - m) if c0 == 0 else 0.0
        if sink_w is not None:
            stats["sink"][:, r0:r1] = sink_w / z
        scale = torch.exp(block_m - m[..., None]) / z[..., None]  # (H, r, nb) to the final m, over z
        _pool_rows(block_max * scale, block_sum * scale, r0 // bt, c0 // bs, bt, ov_max, ov_sum)
    if not keep:
        return out, None
    counts = _block_counts(T, bt, t)[:, None] * _block_counts(S, bs, s)[None, :]  # (t, s) token pairs per block
    return out, (lse, stats, ov_max.numpy(), (ov_sum / counts).numpy(), bt, bs)


TILE_ROWS = 128  # query rows of a tile (rounded up to whole overview blocks)
TILE_CELLS = 2**20  # [H, rows, keys] cells of a tile (4 MB of float32, within the CPU's cache); bench/RESULTS-long.md
HIDDEN = 1e30  # a hidden score is -HIDDEN, not -inf: its weight is still exactly 0, and 0 * score stays 0


def tile_shape(H: int, T: int, S: int, side: int = OVERVIEW_SIDE) -> tuple[int, int, int, int]:
    """(block_rows, block_cols, rows, cols): the overview's blocks (at most side a side) and run_layer's tiles of
    rows x cols positions: whole blocks, about TILE_CELLS cells for H heads, never more keys than S's blocks hold."""
    bt, bs = -(-T // side), -(-S // side)
    rows = bt * -(-TILE_ROWS // bt)
    cols = bs * min(-(-S // bs), max(1, TILE_CELLS // (H * rows * bs)))
    return bt, bs, rows, cols


def _block_max(scores: Tensor, bs: int) -> Tensor:
    """(H, r, nb) the maxima of scores (H, r, c) over each block of bs keys (the last may be partial)."""
    full = scores.shape[-1] // bs * bs
    parts = [scores[..., :full].unflatten(-1, (-1, bs)).amax(-1)] if full else []
    if full < scores.shape[-1]:
        parts.append(scores[..., full:].amax(-1, keepdim=True))
    return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]


def _pool_rows(col_max: Tensor, col_sum: Tensor, b_row: int, b_col: int, bt: int, ov_max: Tensor, ov_sum: Tensor
               ) -> None:
    """Reduce per-row block values (H, r, nb) over each block of bt rows (the input's last may be partial: padded
    with -inf for the max, 0 for the sum) into the overview at block (b_row, b_col)."""
    r = col_max.shape[1]
    pad = -(-r // bt) * bt - r
    if pad:
        col_max = torch.nn.functional.pad(col_max, (0, 0, 0, pad), value=-math.inf)
        col_sum = torch.nn.functional.pad(col_sum, (0, 0, 0, pad))
    n_r, n_c = (r + pad) // bt, col_max.shape[-1]
    ov_max[:, b_row:b_row + n_r, b_col:b_col + n_c] = col_max.unflatten(1, (n_r, bt)).amax(2)
    ov_sum[:, b_row:b_row + n_r, b_col:b_col + n_c] = col_sum.unflatten(1, (n_r, bt)).sum(2)


def _hide(scores: Tensor, rules: Rules, r0: int, c0: int) -> None:
    """Set scores (H, r, c) of rows r0 ... and keys c0 ... to -HIDDEN where rules hide the key, touching only the
    columns where that can happen (the chunk's diagonal for causal, its left edge for a window)."""
    _, r, c = scores.shape
    spans = [(max(c0, r0 + 1), c0 + c)] if rules.causal else []
    if rules.window is not None:
        spans.append((c0, min(c0 + c, r0 + r - rules.window)))  # keys j <= i - window for some row i
        if not rules.causal:
            spans.append((max(c0, r0 + rules.window), c0 + c))  # keys j >= i + window
    if rules.chunk is not None:  # keys before the last row's chunk, and (bidirectional) after the first row's
        spans.append((c0, min(c0 + c, (r0 + r - 1) // rules.chunk * rules.chunk)))
        if not rules.causal:
            spans.append((max(c0, (r0 // rules.chunk + 1) * rules.chunk), c0 + c))
    if rules.kept is not None:  # any key may be one the query's indexer dropped
        spans = [(c0, c0 + c)]
    for a, b in spans:
        if a < b:
            hidden = rules.mask(r0, r, a, b - a)
            if hidden is not None:
                scores[:, :, a - c0:b - c0].masked_fill_(hidden, -HIDDEN)


def _block_counts(n: int, b: int, blocks: int) -> Tensor:
    """(blocks,) how many of n positions each block of b holds (the last may hold fewer)."""
    return torch.full((blocks,), float(b)).index_fill_(0, torch.tensor([blocks - 1]), float(n - (blocks - 1) * b))


_ACTIVE = threading.local()  # the capture of the forward pass running in this thread


def _kernel(module: nn.Module, *args: Any, **kwargs: Any) -> tuple[Tensor, None]:
    """The registered attention function: the running capture's (one per thread)."""
    capture = getattr(_ACTIVE, "capture", None)
    if capture is None:
        raise RuntimeError(f"the {KERNEL!r} attention runs only inside mha_viz's long_trace")
    return capture.attention(module, *args, **kwargs)


@contextmanager
def long_kernel(model: nn.Module, capture: _Capture) -> Iterator[None]:
    """While open, model's attention runs through capture (this thread only); its implementation is restored after."""
    from transformers import AttentionInterface

    AttentionInterface.register(KERNEL, _kernel)  # the same function each time
    before = model.config._attn_implementation
    _ACTIVE.capture = capture
    model.set_attn_implementation(KERNEL)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
        _ACTIVE.capture = None
