"""Token mixers that are not softmax attention, written as exact mixing matrices.

For one fixed input every such layer is linear in its values: head h's output before its gate and norm is

    mixed_h = M_h @ values_h        M_h [T, T] causal (M_h[t, s] = 0 for s > t), signed, rows not normalised

so a linear-attention or state-space head can be drawn, compared and knocked out like an attention head. The
matrices here are materialised from the quantities the layer computes (queries, keys, decays, step sizes: a layer's
Factors, which give the whole matrix, any block of it exactly, or its rows chunk by chunk for long inputs); they equal
the layer's own chunked or recurrent kernel up to float rounding (tests/unit/test_mixers.py checks them against
transformers' kernels). What each kind's matrix means:
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

KINDS = {
    "softmax": "softmax attention: each row is a probability distribution over the keys a query may see",
    "linear": "linear attention (a gated delta rule, or lightning attention's decayed q . k): M[t, s] is how much "
              "value s still adds to output t after the decays (and the delta rule's corrections) between s and t; "
              "signed, rows do not sum to 1",
    "ssm": "a selective state space; signed, rows do not sum to 1. Mamba-2: M[t, s] = (C_t . B_s) exp(sum of A dt "
           "from s+1 to t) dt_s, plus D on the diagonal. Mamba-1 (Mamba, Falcon Mamba, Jamba) has one matrix per "
           "channel (a 'head' of width 1), whose decay differs for each state dim: M[t, s] = sum over n of "
           "C_t[n] B_s[n] exp(sum of A[n] dt from s+1 to t) dt_s, plus D on the diagonal",
    "conv": "a gated short convolution (LFM2): one matrix per channel (a 'head' of width 1), a band as wide as the "
            "kernel, M[t, s] = C_t w[t - s] B_s for 0 <= t - s < width, else 0; signed, rows do not sum to 1",
    "sparse": "softmax attention over the keys an indexer kept for each query (DeepSeek-V3.2's top-k); the others 0",
}
# a layer button's mark in a model whose layers are not all softmax attention
MARKS = {"softmax": "attn", "linear": "lin", "ssm": "ssm", "conv": "conv", "sparse": "sparse"}
__doc__ += "".join(f"\n    {kind:<8} {text}" for kind, text in KINDS.items()) + "\n"


# The smallest decay kept: e^x for x < MIN_EXP is 0 (a share under 4e-18 of what it decays), and so is a product of
# decays (a delta rule's state and rows, a scan's float64 tile) under e^MIN_EXP. Products of smaller float32 numbers
# turn subnormal, which a CPU computes about a hundred times slower (bench/RESULTS-mixers.md).
MIN_EXP = -40.0


def decayed(x: Tensor) -> Tensor:
    """exp(x), 0 where x < MIN_EXP."""
    return flushed(x.exp())


def flushed(x: Tensor) -> Tensor:
    """x with every entry under e^MIN_EXP in size 0 (a new tensor)."""
    return torch.nn.functional.hardshrink(x, math.exp(MIN_EXP))


def decay_block(log_decay: Tensor, rows: slice, cols: slice) -> Tensor:
    """exp(G_t - G_s) for query positions t in rows and key positions s in cols where s <= t, else 0, with G the
    running sum of log_decay (..., T): the decay a state carries from step s to step t, (..., r, c). Differences of
    running sums, so a long sequence neither overflows nor underflows where the decay itself does not; below e^MIN_EXP,
    0."""
    T = log_decay.shape[-1]
    (r0, r1, _), (c0, c1, _) = rows.indices(T), cols.indices(T)
    G = log_decay.cumsum(-1)  # (..., T)
    x = G[..., r0:r1, None] - G[..., None, c0:c1]  # (..., r, c)
    after = r0 - c0  # the key after the query: local column - local row > r0 - c0
    x.tril_(after).masked_fill_(x < MIN_EXP, float("-inf"))  # 0 before exp (no overflow); e^-inf = 0 (MIN_EXP)
    return x.exp_().tril_(after)


def decay_matrix(log_decay: Tensor) -> Tensor:
    """decay_block over every position: (..., T) -> (..., T, T)."""
    return decay_block(log_decay, slice(None), slice(None))


def zeros(like: Tensor, *shape: int) -> Tensor:
    """A zeroed tensor of like's dtype and device. On the CPU numpy allocates it: numpy asks the kernel for huge pages
    for large arrays, so filling a whole [H, T, T] matrix faults once per 2 MiB instead of once per 4 KiB page (about
    half the time of torch.zeros for 32 MiB, bench/RESULTS-mixers.md)."""
    if like.device.type != "cpu" or like.dtype not in (torch.float32, torch.float64):
        return like.new_zeros(shape)
    return torch.from_numpy(np.zeros(shape, np.float32 if like.dtype == torch.float32 else np.float64))


def largest_row_sum(M: Tensor, rows: int = 64) -> Tensor:
    """max over t of sum_s |M[h, t, s]|, per head (H,), of M (H, T, T): `rows` rows at a time, so no temporary as
    large as M is made."""
    return torch.stack([M[:, r:r + rows].abs().sum(-1).amax(-1) for r in range(0, M.shape[-2], rows)]).amax(0)


def gated_delta_rows(q: Tensor, k: Tensor, log_decay: Tensor, beta: Tensor, rows: slice, cols: slice,
                     chunk: int = 64) -> Iterator[tuple[int, Tensor]]:
    """The mixing matrix of a gated delta rule, chunk by chunk of rows: (first row, M[..., those rows, cols' first w])
    for the rows of each chunk of `chunk` positions that meet rows, in order; w: up to the chunk's last position (the
    columns after it are 0). Exact for any block: column s of M only depends
    on the steps from s on, so the recurrence starts at cols' first position and carries only cols' columns.

    Gated DeltaNet (Qwen3-Next, Qwen3.5: one decay per head and token, log_decay (..., H, T)) and Kimi Delta Attention
    (Kimi Linear: one per key dim, (..., H, T, d_k)). q, k (..., H, T, d_k) as the rule reads them (L2-normalised,
    q times d_k^-1/2), beta (..., H, T). The recurrence S_t = (I - b_t k_t k_t^T) diag(a_t) S_(t-1) + b_t k_t v_t^T,
    out_t = S_t^T q_t, is linear in the values, and unrolled (Yang et al. 2024, the WY / UT form) with one decay per
    head it is
        Gamma[t, s] = exp(G_t - G_s) (s <= t)                 G the running sum of log_decay
        A = strictly_lower(diag(b) (K K^T * Gamma))           what each write already predicts of the later ones
        M = lower(Q K^T * Gamma) (I + A)^-1 diag(b)           out = M @ V
    (with a decay per key dim, Gamma weighs each dim of q_t . k_s and k_t . k_s on its own). Computed chunk by chunk,
    the state carried between chunks as a [d_k, c] matrix whose column s is what value s has written so far:
    O((t1 - c0)(d_k c + chunk (d_k + chunk))) for rows up to t1 and cols from c0, never the O(T^3) of the inverse.
    """
    T = q.shape[-2]
    (r0, r1, _), (c0, c1, _) = rows.indices(T), cols.indices(T)
    if r1 <= r0 or c1 <= c0 or c0 >= r1:  # no rows, no columns, or every key after every query: all 0
        return
    per_dim = log_decay.dim() == q.dim()  # a decay per key dim (KDA), else per head and token
    span = slice(c0, r1)  # the steps that matter: from the first column's write to the last row
    q, k, beta = q[..., span, :], k[..., span, :], beta[..., span]
    log_decay = log_decay[..., span, :] if per_dim else log_decay[..., span]
    *lead, L, d = q.shape
    C = min(chunk, L)
    pad = -L % C
    if pad:  # padded positions write nothing (b = 0) and are cut from the rows
        q, k = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (q, k))
        beta = torch.nn.functional.pad(beta, (0, pad))
        log_decay = torch.nn.functional.pad(log_decay, (0, 0, 0, pad) if per_dim else (0, pad))
    n = (L + pad) // C
    q, k = (x.unflatten(-2, (n, C)) for x in (q, k))  # (..., n, C, d)
    beta = beta.unflatten(-1, (n, C))  # (..., n, C)
    if per_dim:
        G = log_decay.unflatten(-2, (n, C)).cumsum(-2)  # (..., n, C, d) the decay from each chunk's start
        above = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)[..., None]
        inside = decayed((G[..., :, None, :] - G[..., None, :, :]).masked_fill(above, float("-inf")))  # (.., C, C, d)
        kk = torch.einsum("...id,...jd,...ijd->...ij", k, k, inside)  # (..., n, C, C)
        scores = torch.einsum("...id,...jd,...ijd->...ij", q, k, inside)  # (..., n, C, C)
    else:
        log_decay = log_decay.unflatten(-1, (n, C))  # (..., n, C)
        inside = decay_matrix(log_decay)  # (..., n, C, C) Gamma within each chunk
        kk = (k @ k.transpose(-1, -2)) * inside
        scores = (q @ k.transpose(-1, -2)) * inside  # (..., n, C, C)
        G = log_decay.cumsum(-1)[..., None]  # (..., n, C, 1)
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    A = (beta[..., :, None] * kk).tril(-1)  # (..., n, C, C)
    writes = torch.linalg.solve_triangular(eye + A, torch.diag_embed(beta), upper=False, unitriangular=True)
    reads_state = writes @ (k * decayed(G))  # (..., n, C, d): (I + A)^-1 diag(b) (K * exp G), the old state's share
    q_from_start = q * decayed(G)  # (..., n, C, d)
    k_to_end = k * decayed(G[..., -1:, :] - G)  # (..., n, C, d)
    c = c1 - c0
    state = q.new_zeros(*lead, d, c)  # (..., d, c): column s is what value c0 + s has written so far
    for i in range(n):
        a, b = i * C, (i + 1) * C  # this chunk's steps, from c0
        w = min(b, c)  # the columns written up to this chunk's end: the state's later ones are still 0
        written = state[..., :w]  # (..., d, w)
        new = -reads_state[..., i, :, :] @ written  # (..., C, w): each write's correction by what the state predicts
        if a < c:  # columns written in this chunk: their own value, b_t v_t, through (I + A)^-1
            new[..., :, a:w] += writes[..., i, :, :w - a]
        new = flushed(new)  # no subnormal numbers (MIN_EXP), here and below
        lo, hi = max(a, r0 - c0), min(b, r1 - c0)  # the rows wanted in this chunk
        if lo < hi:
            out = q_from_start[..., i, lo - a:hi - a, :] @ written + scores[..., i, lo - a:hi - a, :] @ new
            yield c0 + lo, flushed(out)  # (..., hi - lo, w)
        if b >= r1 - c0:
            return
        written.copy_(flushed(written * decayed(G[..., i, -1, :])[..., :, None]
                              + k_to_end[..., i, :, :].transpose(-1, -2) @ new))


def gated_delta_matrix(q: Tensor, k: Tensor, log_decay: Tensor, beta: Tensor, chunk: int = 64) -> Tensor:
    """The whole mixing matrix of a gated delta rule, M (..., H, T, T) (gated_delta_rows: what it means)."""
    T = q.shape[-2]
    rows = gated_delta_rows(q, k, log_decay, beta, slice(None), slice(None), chunk)
    return torch.cat([torch.nn.functional.pad(m, (0, T - m.shape[-1])) for _, m in rows], -2)


def decayed_linear_matrix(q: Tensor, k: Tensor, log_decay: Tensor) -> Tensor:
    """The mixing matrix of decayed linear attention (MiniMax's lightning attention, RetNet-like), M (..., H, T, T):
        M[t, s] = (q_t . k_s) exp(G_t - G_s)  (s <= t)       G the running sum of log_decay (..., H, T)
    q, k (..., H, T, d) as the layer reads them (lightning attention: after its activation, not scaled)."""
    return DecayedLinear(q, k, log_decay).matrix()


def ssd_matrix(C: Tensor, B: Tensor, dt: Tensor, A: Tensor, D: Tensor | None = None) -> Tensor:
    """The mixing matrix of Mamba-2's state space duality (SSD) layer, M (..., H, T, T), on the head's x.

    C, B (..., G, T, n) per group of heads (G = H: one per head), dt (..., H, T) after softplus and clamping,
    A (H,) negative, D (H,) or None:
        M[t, s] = (C_t . B_s) exp(sum_{r = s+1..t} A dt_r) dt_s  (s <= t)   + D on the diagonal
    """
    if dt.dim() > 2:  # leading batch dims: one StateSpace each
        return torch.stack([ssd_matrix(c, b, step, A, D) for c, b, step in zip(C, B, dt)])
    return StateSpace(C, B, dt, A, D).matrix()


ROW_CELLS = 2**22  # Factors.row_chunks: about this many cells of work at a time (16 MB of float32)
TILE, MIN_TILE = 64, 16  # scan_block: keys per tile computed from differences; the narrowest factorised tile
# scan_block: the largest exponent a tile's factors may reach, by the matmul's dtype (float32 overflows past e^88,
# float64 past e^709: a margin for the sum over the state dims)
MAX_EXP = {torch.float32: 30.0, torch.float64: 600.0}


class Factors:
    """What a mixer layer's matrix M [H, T, T] is made of, per head and token (queries, keys, decays, step sizes):
    any block of M computed exactly on demand, and M row chunk by row chunk, never [H, T, T] unless asked for."""

    def tensors(self) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def per_token(self) -> Tensor:
        """One of the factors with a value per head (or channel) and token, (..., H, T): their count and the length."""
        raise NotImplementedError

    @property
    def num_heads(self) -> int:
        return self.per_token().shape[-2]

    @property
    def length(self) -> int:
        return self.per_token().shape[-1]

    @property
    def nbytes(self) -> int:
        return sum(t.nelement() * t.element_size() for t in self.tensors() if t is not None)

    def block(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> Tensor:
        """M[heads, rows, cols] (h, r, c), exact (heads: of unbatched factors, (H, T, ...))."""
        raise NotImplementedError

    def matrix(self) -> Tensor:
        """The whole M (H, T, T)."""
        return self.block(slice(None), slice(None))

    def row_chunks(self, cells: int = ROW_CELLS) -> Iterator[tuple[slice, int, Tensor]]:
        """(heads, first row, M[heads, rows, :rows' end]) for consecutive chunks of rows covering all T (what a causal
        row can reach; the columns after it are 0), each about `cells` cells."""
        H, T = self.num_heads, self.length
        step = max(1, cells // (H * T))
        for r0 in range(0, T, step):
            r1 = min(T, r0 + step)
            yield slice(None), r0, self.block(slice(r0, r1), slice(0, r1))


def _pick(heads: Sequence[int] | None, *per_token: Tensor) -> tuple[Tensor, ...]:
    """Each tensor (H, ...) at heads (None: all of a batched or unbatched tensor; heads: unbatched only)."""
    if heads is None:
        return per_token
    h = torch.as_tensor(list(heads), dtype=torch.long)
    return tuple(None if x is None else x.index_select(0, h) for x in per_token)


@dataclass(frozen=True, eq=False)
class DeltaRule(Factors):
    """A gated delta rule's factors (gated_delta_rows): q, k (H, T, d_k), log_decay (H, T) or (H, T, d_k),
    beta (H, T)."""

    q: Tensor
    k: Tensor
    log_decay: Tensor
    beta: Tensor

    def tensors(self) -> tuple[Tensor, ...]:
        return self.q, self.k, self.log_decay, self.beta

    def per_token(self) -> Tensor:
        return self.beta  # (..., H, T)

    def block(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> Tensor:
        (r0, r1, _), (c0, c1, _) = rows.indices(self.length), cols.indices(self.length)
        q, k, log_decay, beta = _pick(heads, *self.tensors())
        out = zeros(q, q.shape[0], max(0, r1 - r0), max(0, c1 - c0))  # rows before cols' first stay 0
        for t0, m in gated_delta_rows(q, k, log_decay, beta, rows, cols):
            out[:, t0 - r0:t0 - r0 + m.shape[-2], :m.shape[-1]] = m
        return out

    def row_chunks(self, cells: int = ROW_CELLS) -> Iterator[tuple[slice, int, Tensor]]:
        """Every row in chunks of 64 (the recurrence's own), the columns up to the chunk's end, a few heads at a time:
        the state (d_k x T a head) is carried, not recomputed, and a chunk's rows and state stay near `cells` cells."""
        H, T, d = self.num_heads, self.length, self.q.shape[-1]
        per = max(1, cells // (T * (64 + d)))  # heads at a time
        for h0 in range(0, H, per):
            heads = slice(h0, min(H, h0 + per))
            for r0, rows in gated_delta_rows(*(x[heads] for x in self.tensors()), slice(None), slice(None)):
                yield heads, r0, rows


@dataclass(frozen=True, eq=False)
class DecayedLinear(Factors):
    """Decayed linear attention's factors (decayed_linear_matrix): q, k (H, T, d), log_decay (H, T)."""

    q: Tensor
    k: Tensor
    log_decay: Tensor

    def tensors(self) -> tuple[Tensor, ...]:
        return self.q, self.k, self.log_decay

    def per_token(self) -> Tensor:
        return self.log_decay  # (..., H, T)

    def block(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> Tensor:
        q, k, log_decay = _pick(heads, *self.tensors())
        return (q[..., rows, :] @ k[..., cols, :].transpose(-1, -2)).mul_(decay_block(log_decay, rows, cols))


@dataclass(frozen=True, eq=False)
class StateSpace(Factors):
    """Mamba-2's SSD factors (ssd_matrix): C, B (G, T, n) per group of heads (head h reads group h // (H / G); G = H
    where each head has its own), dt (H, T), A (H,), D (H,) or None: a selective scan (scan_block) whose decay is
    the same for every state dim."""

    C: Tensor
    B: Tensor
    dt: Tensor
    A: Tensor
    D: Tensor | None = None

    def tensors(self) -> tuple[Tensor, ...]:
        return self.C, self.B, self.dt

    def per_token(self) -> Tensor:
        return self.dt  # (H, T)

    def block(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> Tensor:
        group = torch.arange(self.num_heads) // (self.num_heads // self.C.shape[0])  # (H,) each head's group
        dt, A, D, group = _pick(heads, self.dt, self.A[:, None], self.D, group)
        return scan_block(self.C.transpose(-1, -2), self.B.transpose(-1, -2), group, dt, A, D, rows, cols)


@dataclass(frozen=True, eq=False)
class SelectiveScan(Factors):
    """Mamba-1's selective scan, one matrix per channel c (the channel's x is its value, of width 1):
        M[c, t, s] = dt[c, s] sum_n C[t, n] B[s, n] exp(sum_{r = s+1..t} A[c, n] dt[c, r])  (s <= t)  + D[c] on the
        diagonal
    C, B (T, N) shared by every channel, dt (channels, T) after softplus, A (channels, N) negative, D (channels,): a
    selective scan (scan_block) whose decay differs for each state dim."""

    C: Tensor
    B: Tensor
    dt: Tensor
    A: Tensor
    D: Tensor | None = None

    def tensors(self) -> tuple[Tensor, ...]:
        return self.C, self.B, self.dt, self.A

    def per_token(self) -> Tensor:
        return self.dt  # (channels, T)

    def block(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> Tensor:
        dt, A, D = _pick(heads, self.dt, self.A, self.D)
        shared = torch.zeros(dt.shape[0], dtype=torch.long)  # every channel reads the one C and B
        return scan_block(self.C.T[None], self.B.T[None], shared, dt, A, D, rows, cols)


def scan_block(C: Tensor, B: Tensor, group: Tensor, dt: Tensor, A: Tensor, D: Tensor | None, rows: slice,
               cols: slice) -> Tensor:
    """M[:, rows, cols] (h, r, c) of a selective scan (Mamba-1: a decay per state dim; Mamba-2: one per head):
        M[h, t, s] = dt[h, s] sum_n C[g, n, t] B[g, n, s] exp(G[h, n, t] - G[h, n, s])  (s <= t)  + D[h] on the diagonal
    with g = group[h], C, B (groups, N, T), dt (h, T), A (h, N) or (h, 1) negative, D (h,) or None, G the running sum
    of A dt over the tokens (in float64).

    A tile of keys [b, b1) at a time: with g = G at the tile's last key, exp(G_t - G_s) = exp(G_t - g) exp(g - G_s),
    so the tile is one matmul over the state dims, (C_t e^(G_t - g)) . (B_s e^(g - G_s) dt_s). With A <= 0, G never
    rises: the key factor is at most 1, the query factor at most e^(the tile's own decay), which MAX_EXP bounds for
    the matmul's dtype (a query factor under e^MIN_EXP counts as 0). So a tile is as wide as
    its decay allows in M's dtype, written straight into M (the whole matrix at once where decays are slow), else
    TILE keys in float64; where even MIN_TILE keys decay past float64's range, TILE keys come from the differences
    (_exact_tile), exactly."""
    (H, T), N = dt.shape, C.shape[-2]
    (r0, r1, _), (c0, c1, _) = rows.indices(T), cols.indices(T)
    M = zeros(dt, H, max(0, r1 - r0), max(0, c1 - c0))  # (h, r, c)
    if r1 <= r0 or c1 <= c0:
        return M
    end = min(c1, r1)  # keys from `end` on come after every row
    per = max(1, ROW_CELLS // (N * (r1 - c0)))  # heads at a time: their factors (per, N, r1 - c0) stay near ROW_CELLS
    for h0 in range(0, H, per):
        h = slice(h0, h0 + per)
        Ch, Bh = (x if x.shape[0] == 1 else x[group[h]] for x in (C, B))  # (per or 1, N, T)
        A_h, dt_h = A[h].double(), dt[h].double()  # (per, N or 1), (per, T)
        G = (A_h[:, :, None] * dt_h[:, None, c0:r1]).cumsum(-1)  # (per, N or 1, r1 - c0) from c0
        fastest = (-A_h[:, :, None] * dt_h[:, None, c0:end]).amax((0, 1)).cumsum(0)  # (end - c0,) bounds G_b - G_s
        b = c0
        while b < end:
            t0 = max(r0, b)  # rows before the tile's first key see none of it
            dtype = M.dtype
            b1 = b + _reach(fastest, b - c0, MAX_EXP.get(dtype, MAX_EXP[torch.float32]))
            if b1 - b < min(TILE, end - b):  # narrow in M's dtype: TILE keys in float64
                dtype = torch.float64
                b1 = b + min(TILE, _reach(fastest, b - c0, MAX_EXP[dtype]))
            exact = b1 - b < min(MIN_TILE, end - b)  # even a narrow tile would overflow: from the differences
            if exact:
                b1 = min(b + TILE, end)
            tile = M[h, t0 - r0:, b - c0:b1 - c0]  # (per, R, c)
            if exact:
                tile.copy_(_exact_tile(Ch, Bh, dt_h, A_h, slice(t0, r1), slice(b, b1)))
            else:
                g = G[:, :, b1 - 1 - c0, None]  # (per, N or 1, 1): the tile's last key
                since = G[:, :, t0 - c0:r1 - c0] - g  # (per, N or 1, R) the decay from the tile's last key
                left = Ch[:, :, t0:r1] * decayed(since)  # (per, N, R) <= e^MAX_EXP
                right = Bh[:, :, b:b1] * (g - G[:, :, b - c0:b1 - c0]).exp() * dt_h[:, None, b:b1]  # (per, N, c) <= 1
                left, right = left.transpose(1, 2).to(dtype), right.to(dtype)  # (per, R, N), (per, N, c)
                if dtype == M.dtype and not (left.requires_grad or right.requires_grad):
                    torch.matmul(left, right, out=tile)  # straight into M
                else:
                    tile.copy_(flushed(left @ right))  # float64 products that float32 would hold subnormal: 0
            tile[:, :max(0, b1 - t0)].tril_(t0 - b)  # keys after their query (s > t): 0
            b = b1
    if D is not None:  # on the diagonal t = s: the block's entries (t - r0, t - c0)
        M.diagonal(r0 - c0, dim1=-2, dim2=-1).add_(D[:, None])
    return M


def _reach(fastest: Tensor, i: int, limit: float) -> int:
    """How many keys from the i-th on decay by at most e^limit (>= 1), fastest (n,) the running sum of the fastest
    decay at each step."""
    return int(torch.searchsorted(fastest, fastest[i] + limit, right=True)) - i


def _exact_tile(C: Tensor, B: Tensor, dt: Tensor, A: Tensor, rows: slice, cols: slice) -> Tensor:
    """scan_block's tile from the differences of the running sums (decay_block), one decay at a time (each state
    dim's, or the head's for all of them): no factor can overflow, (h, r, c) in memory."""
    M = dt.new_zeros(dt.shape[0], rows.stop - rows.start, cols.stop - cols.start)
    width = C.shape[-2] // A.shape[-1]  # state dims per decay: 1, or all of them
    for j in range(A.shape[-1]):
        dims = slice(j * width, (j + 1) * width)
        M.add_(decay_block(A[:, j, None] * dt, rows, cols) * (C[:, dims, rows].transpose(-1, -2) @ B[:, dims, cols]))
    return M.mul_(dt[:, None, cols])


@dataclass(frozen=True, eq=False)
class ShortConv(Factors):
    """A gated short convolution (LFM2), one matrix per channel c (the channel's x is its value, of width 1):
        M[c, t, s] = C[c, t] w[c, K - 1 - (t - s)] B[c, s]   for 0 <= t - s < K, else 0
    C, B (channels, T) the gates after and before the convolution, w (channels, K) its taps (the newest last, as
    torch's conv1d with K - 1 positions of padding on the left)."""

    C: Tensor
    B: Tensor
    w: Tensor

    def tensors(self) -> tuple[Tensor, ...]:
        return self.C, self.B, self.w

    def per_token(self) -> Tensor:
        return self.C  # (channels, T)

    def block(self, rows: slice, cols: slice, heads: Sequence[int] | None = None) -> Tensor:
        """M[heads, rows, cols]: zeros, then the band. A query whose K keys t - K + 1 .. t all lie in cols holds them
        side by side, C_t w[k] B_(t - K + 1 + k): all such rows in one strided write; the diagonals t - s = j give the
        rest (where cols cut a query's band), each C_t w[K - 1 - j] B_s."""
        C, B, w = _pick(heads, self.C, self.B, self.w)
        (r0, r1, _), (c0, c1, _) = rows.indices(self.length), cols.indices(self.length)
        M = zeros(C, C.shape[0], max(0, r1 - r0), max(0, c1 - c0))  # (h, r, c)
        h, r, c = M.shape
        K = w.shape[-1]
        f0, f1 = max(r0, c0 + K - 1), min(r1, c1)  # the queries with their whole band in cols
        if f0 < f1:
            band = C[:, f0:f1, None] * w[:, None, :] * B[:, f0 - K + 1:f1].unfold(-1, K, 1)  # (h, f1 - f0, K)
            start = (f0 - r0) * c + (f0 - K + 1 - c0)  # entry (f0 - r0, f0 - K + 1 - c0); each next query: c + 1 on
            M.as_strided((h, f1 - f0, K), (r * c, c + 1, 1), start).copy_(band)
        for j in range(K):  # lag t - s = j: the block's diagonal (r0 - c0) - j, from entry (i, i + r0 - c0 - j)
            t_lo, t_hi = max(r0, c0 + j), min(r1, c1 + j)  # queries t whose key s = t - j lies in cols
            diagonal = M.diagonal(r0 - c0 - j, dim1=-2, dim2=-1)  # (h, t_hi - t_lo): queries t_lo .. t_hi - 1
            for a, b in ((t_lo, min(t_hi, f0)), (max(t_lo, f1), t_hi)) if f0 < f1 else ((t_lo, t_hi),):
                if a < b:  # queries a .. b - 1, whose band cols cut
                    diagonal[:, a - t_lo:b - t_lo] = C[:, a:b] * w[:, K - 1 - j, None] * B[:, a - j:b - j]
        return M


def layer_marks(kinds: Sequence[str]) -> list[str] | None:
    """Each layer's short mark (MARKS) where a model's layers are not all softmax attention, else None."""
    return None if all(k == "softmax" for k in kinds) else [MARKS[k] for k in kinds]
