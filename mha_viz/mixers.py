"""Token mixers that are not softmax attention, written as exact mixing matrices.

For one fixed input every such layer is linear in its values: head h's output before its gate and norm is

    mixed_h = M_h @ values_h        M_h [T, T] causal (M_h[t, s] = 0 for s > t), signed, rows not normalised

so a linear-attention or state-space head can be drawn, compared and knocked out like an attention head. The
matrices here are materialised from the quantities the layer computes (queries, keys, decays, step sizes); they equal
the layer's own chunked or recurrent kernel up to float rounding (tests/unit/test_mixers.py checks them against
transformers' kernels). What each kind's matrix means:
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

KINDS = {
    "softmax": "softmax attention: each row is a probability distribution over the keys a query may see",
    "linear": "linear attention (a gated delta rule, or lightning attention's decayed q . k): M[t, s] is how much "
              "value s still adds to output t after the decays (and the delta rule's corrections) between s and t; "
              "signed, rows do not sum to 1",
    "ssm": "a selective state space (Mamba-2): M[t, s] = (C_t . B_s) exp(sum of A dt from s+1 to t) dt_s, plus D on "
           "the diagonal; signed, rows do not sum to 1",
    "sparse": "softmax attention over the keys an indexer kept for each query (DeepSeek-V3.2's top-k); the others 0",
}
# a layer button's mark in a model whose layers are not all softmax attention
MARKS = {"softmax": "attn", "linear": "lin", "ssm": "ssm", "sparse": "sparse"}
__doc__ += "".join(f"\n    {kind:<8} {text}" for kind, text in KINDS.items()) + "\n"


def decay_matrix(log_decay: Tensor) -> Tensor:
    """exp(G_t - G_s) for s <= t, else 0, with G the running sum of log_decay (..., T): the decay a state carries
    from step s to step t, (..., T, T). Differences of running sums, so a long sequence neither overflows nor
    underflows where the decay itself does not."""
    G = log_decay.cumsum(-1)  # (..., T)
    x = G[..., :, None] - G[..., None, :]  # (..., T, T)
    return x.tril_().exp_().tril_()  # above the diagonal: 0 before exp (no overflow), then 0


def gated_delta_matrix(q: Tensor, k: Tensor, log_decay: Tensor, beta: Tensor, chunk: int = 64) -> Tensor:
    """The mixing matrix of a gated delta rule, M (..., H, T, T): Gated DeltaNet (Qwen3-Next, Qwen3.5: one decay per
    head and token, log_decay (..., H, T)) and Kimi Delta Attention (Kimi Linear: one per key dim, (..., H, T, d_k)).

    q, k (..., H, T, d_k) as the rule reads them (L2-normalised, q times d_k^-1/2), beta (..., H, T). The recurrence
    S_t = (I - b_t k_t k_t^T) diag(a_t) S_(t-1) + b_t k_t v_t^T, out_t = S_t^T q_t, is linear in the values, and
    unrolled over the whole sequence (Yang et al. 2024, the WY / UT form) with one decay per head it is
        Gamma[t, s] = exp(G_t - G_s) (s <= t)                 G the running sum of log_decay
        A = strictly_lower(diag(b) (K K^T * Gamma))           what each write already predicts of the later ones
        M = lower(Q K^T * Gamma) (I + A)^-1 diag(b)           out = M @ V
    (with a decay per key dim, Gamma weighs each dim of q_t . k_s and k_t . k_s on its own). Computed chunk by chunk
    (`chunk` positions at a time, the state carried between chunks as a [d_k, T] matrix whose column s is what value s
    has written so far): O(T^2 (3 d_k + chunk)) instead of the O(T^3) of the inverse.
    """
    *lead, T, d = q.shape
    per_dim = log_decay.dim() == q.dim()  # a decay per key dim (KDA), else per head and token
    C = min(chunk, T)
    pad = -T % C
    if pad:  # padded positions write nothing (b = 0) and are cut from the rows at the end
        q, k = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (q, k))
        beta = torch.nn.functional.pad(beta, (0, pad))
        log_decay = torch.nn.functional.pad(log_decay, (0, 0, 0, pad) if per_dim else (0, pad))
    n = (T + pad) // C
    q, k = (x.unflatten(-2, (n, C)) for x in (q, k))  # (..., n, C, d)
    beta = beta.unflatten(-1, (n, C))  # (..., n, C)
    if per_dim:
        G = log_decay.unflatten(-2, (n, C)).cumsum(-2)  # (..., n, C, d) the decay from each chunk's start
        above = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)[..., None]
        inside = (G[..., :, None, :] - G[..., None, :, :]).masked_fill(above, float("-inf")).exp()  # (.., C, C, d)
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
    reads_state = writes @ (k * G.exp())  # (..., n, C, d): (I + A)^-1 diag(b) (K * exp G), the old state's share
    q_from_start = q * G.exp()  # (..., n, C, d)
    k_to_end = k * (G[..., -1:, :] - G).exp()  # (..., n, C, d)
    state = q.new_zeros(*lead, d, T + pad)  # (..., d, T): column s is what value s has written so far
    M = q.new_empty(*lead, T + pad, T + pad)
    for i in range(n):
        here = slice(i * C, (i + 1) * C)
        new = -reads_state[..., i, :, :] @ state  # (..., C, T): each write's correction by what the state predicts
        new[..., here] += writes[..., i, :, :]  # plus its own value, b_t v_t, through (I + A)^-1
        M[..., here, :] = q_from_start[..., i, :, :] @ state + scores[..., i, :, :] @ new  # (..., C, T)
        state = state * G[..., i, -1, :].exp()[..., :, None] + k_to_end[..., i, :, :].transpose(-1, -2) @ new
    return M[..., :T, :T]  # (..., T, T)


def decayed_linear_matrix(q: Tensor, k: Tensor, log_decay: Tensor) -> Tensor:
    """The mixing matrix of decayed linear attention (MiniMax's lightning attention, RetNet-like), M (..., H, T, T):
        M[t, s] = (q_t . k_s) exp(G_t - G_s)  (s <= t)       G the running sum of log_decay (..., H, T)
    q, k (..., H, T, d) as the layer reads them (lightning attention: after its activation, not scaled)."""
    return (q @ k.transpose(-1, -2)).mul_(decay_matrix(log_decay))  # (..., H, T, T)


def ssd_matrix(C: Tensor, B: Tensor, dt: Tensor, A: Tensor, D: Tensor | None = None) -> Tensor:
    """The mixing matrix of Mamba-2's state space duality (SSD) layer, M (..., H, T, T), on the head's x.

    C, B (..., H, T, n) (a group's C and B repeated for its heads), dt (..., H, T) after softplus and clamping,
    A (H,) negative, D (H,) or None:
        M[t, s] = (C_t . B_s) exp(sum_{r = s+1..t} A dt_r) dt_s  (s <= t)   + D on the diagonal
    """
    M = (C @ B.transpose(-1, -2)).mul_(decay_matrix(A[:, None] * dt)).mul_(dt[..., None, :])  # (..., H, T, T)
    if D is not None:
        M.diagonal(dim1=-2, dim2=-1).add_(D[:, None])
    return M


def layer_marks(kinds: Sequence[str]) -> list[str] | None:
    """Each layer's short mark (MARKS) where a model's layers are not all softmax attention, else None."""
    return None if all(k == "softmax" for k in kinds) else [MARKS[k] for k in kinds]
