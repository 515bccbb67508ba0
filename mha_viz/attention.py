"""Multi-head attention computed head by head, keeping every intermediate.

    head_h = softmax(Q_h K_h^T / sqrt(d_k)) V_h,   Q_h = x W_Q[h] + b_Q[h],  K_h, V_h from context
    MultiHead(x) = Concat(head_0, ..., head_{H-1}) W_O^T + b_O      heads numbered from 0

Parameters are stored per head, TransformerLens style:
    W_Q [H, d_model, d_k]   W_K [H, d_context, d_k]   W_V [H, d_context, d_v]   W_O [d_out, H*d_v]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .config import MHAConfig
from .trace import AttentionTrace


class AttentionTensors(NamedTuple):
    """The intermediates as (differentiable) tensors; leading batch dims allowed."""

    queries: Tensor  # (..., H, T, d_k)
    keys: Tensor  # (..., H, S, d_k)
    values: Tensor  # (..., H, S, d_v)
    scores: Tensor  # (..., H, T, S)
    weights: Tensor  # (..., H, T, S)
    head_outputs: Tensor  # (..., H, T, d_v)
    concat: Tensor  # (..., T, H*d_v)
    output: Tensor  # (..., T, d_out)


def causal_mask(T: int, S: int, device: torch.device | None = None) -> Tensor:
    """True where query i may not see key j (j > i)."""
    return torch.ones(T, S, dtype=torch.bool, device=device).triu(1)  # (T, S)


class MultiHeadAttention(nn.Module):
    """One multi-head attention layer whose forward pass returns an AttentionTrace."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        d_k: int | None = None,
        d_v: int | None = None,
        d_out: int | None = None,
        d_context: int | None = None,
        bias: bool = True,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        cfg = MHAConfig(d_model, num_heads, d_k=d_k, d_v=d_v, d_out=d_out, d_context=d_context, bias=bias)
        self.config = cfg
        H = cfg.num_heads
        self.W_Q = nn.Parameter(torch.empty(H, cfg.d_model, cfg.d_k, dtype=dtype))
        self.W_K = nn.Parameter(torch.empty(H, cfg.d_context, cfg.d_k, dtype=dtype))
        self.W_V = nn.Parameter(torch.empty(H, cfg.d_context, cfg.d_v, dtype=dtype))
        self.W_O = nn.Parameter(torch.empty(cfg.d_out, H * cfg.d_v, dtype=dtype))
        if bias:
            self.b_Q = nn.Parameter(torch.zeros(H, cfg.d_k, dtype=dtype))
            self.b_K = nn.Parameter(torch.zeros(H, cfg.d_k, dtype=dtype))
            self.b_V = nn.Parameter(torch.zeros(H, cfg.d_v, dtype=dtype))
            self.b_O = nn.Parameter(torch.zeros(cfg.d_out, dtype=dtype))
        else:
            self.b_Q = self.b_K = self.b_V = self.b_O = None
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """Xavier-uniform weights (fan-in = input width, fan-out = H * head width), zero biases."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for W, fan_in, fan_out in (
            (self.W_Q, self.W_Q.shape[1], self.W_Q.shape[0] * self.W_Q.shape[2]),
            (self.W_K, self.W_K.shape[1], self.W_K.shape[0] * self.W_K.shape[2]),
            (self.W_V, self.W_V.shape[1], self.W_V.shape[0] * self.W_V.shape[2]),
            (self.W_O, self.W_O.shape[1], self.W_O.shape[0]),
        ):
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            W.copy_(torch.rand(W.shape, generator=gen, dtype=W.dtype) * 2 * bound - bound)
        for b in (self.b_Q, self.b_K, self.b_V, self.b_O):
            if b is not None:
                b.zero_()

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """The same layer as a torch.nn.MultiheadAttention, weights and biases copied."""
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("add_bias_kv / add_zero_attn are not supported")
        if m.kdim != m.vdim:
            raise ValueError(f"kdim ({m.kdim}) and vdim ({m.vdim}) must match to share one context input")
        E, H = m.embed_dim, m.num_heads
        d = E // H
        W = m.out_proj.weight
        ours = cls(E, H, d_context=m.kdim, bias=m.in_proj_bias is not None, dtype=W.dtype)
        if m._qkv_same_embed_dim:
            Wq, Wk, Wv = m.in_proj_weight.chunk(3)  # each (E, E)
        else:
            Wq, Wk, Wv = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight  # (E, E), (E, kdim), (E, vdim)
        with torch.no_grad():
            # torch stores rows per output feature: rows h*d:(h+1)*d belong to head h.
            ours.W_Q.copy_(Wq.reshape(H, d, -1).transpose(1, 2))  # (H, E, d)
            ours.W_K.copy_(Wk.reshape(H, d, -1).transpose(1, 2))  # (H, kdim, d)
            ours.W_V.copy_(Wv.reshape(H, d, -1).transpose(1, 2))  # (H, vdim, d)
            ours.W_O.copy_(W)  # (E, E)
            if m.in_proj_bias is not None:
                bq, bk, bv = m.in_proj_bias.reshape(3, H, d)
                ours.b_Q.copy_(bq)
                ours.b_K.copy_(bk)
                ours.b_V.copy_(bv)
                if m.out_proj.bias is not None:
                    ours.b_O.copy_(m.out_proj.bias)
        return ours

    @staticmethod
    def _project(x: Tensor, W: Tensor, b: Tensor | None) -> Tensor:
        """x (..., T, d_in) times every head's W[h] (d_in, d) at once, as one matmul: (..., H, T, d)."""
        H, d_in, d = W.shape
        y = x @ W.transpose(0, 1).reshape(d_in, H * d)  # (..., T, H*d)
        if b is not None:
            y = y + b.reshape(H * d)
        return y.unflatten(-1, (H, d)).transpose(-3, -2)  # (..., H, T, d)

    def attend(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        causal: bool = False,
        head_mask: Tensor | None = None,
    ) -> AttentionTensors:
        """Differentiable forward pass. x (..., T, d_model); context (..., S, d_context).

        head_mask (H,) scales each head's output before W_O (0 switches a head off).
        """
        cfg = self.config
        c = x if context is None else context
        if x.shape[-1] != cfg.d_model:
            raise ValueError(f"x has width {x.shape[-1]}, the layer expects d_model={cfg.d_model}")
        if c.shape[-1] != cfg.d_context:
            raise ValueError(f"context has width {c.shape[-1]}, the layer expects d_context={cfg.d_context}")
        q = self._project(x, self.W_Q, self.b_Q)  # (..., H, T, d_k)
        k = self._project(c, self.W_K, self.b_K)  # (..., H, S, d_k)
        v = self._project(c, self.W_V, self.b_V)  # (..., H, S, d_v)
        scores = (q * (1.0 / math.sqrt(cfg.d_k))) @ k.transpose(-1, -2)  # (..., H, T, S)  Q K^T / sqrt(d_k)
        if causal:
            scores = scores.masked_fill(causal_mask(q.shape[-2], k.shape[-2], x.device), float("-inf"))
        weights = scores.softmax(dim=-1)  # (..., H, T, S)
        head_out = weights @ v  # (..., H, T, d_v)
        if head_mask is not None:
            if head_mask.shape != (cfg.num_heads,):
                raise ValueError(f"head_mask needs one value per head: shape ({cfg.num_heads},), got {tuple(head_mask.shape)}")
            head_out = head_out * head_mask.to(head_out.dtype)[:, None, None]  # (..., H, T, d_v)
        concat = head_out.transpose(-3, -2).flatten(-2)  # (..., T, H*d_v)
        output = concat @ self.W_O.T  # (..., T, d_out)
        if self.b_O is not None:
            output = output + self.b_O
        return AttentionTensors(q, k, v, scores, weights, head_out, concat, output)

    @torch.no_grad()
    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        causal: bool = False,
        query_tokens: Sequence[str] | None = None,
        key_tokens: Sequence[str] | None = None,
        head_mask: Tensor | None = None,
    ) -> AttentionTrace:
        """Trace one input: x (T, d_model), optional context (S, d_context) for cross-attention."""
        if x.dim() != 2 or (context is not None and context.dim() != 2):
            raise ValueError("forward traces one input: x must be (T, d_model) and context (S, d_context)")
        if x.shape[0] == 0 or (context is not None and context.shape[0] == 0):
            raise ValueError("cannot attend over an empty sequence")
        t = self.attend(x, context, causal=causal, head_mask=head_mask)
        T, S = t.weights.shape[-2:]
        qt = tuple(query_tokens) if query_tokens is not None else tuple(str(i) for i in range(T))
        kt = tuple(key_tokens) if key_tokens is not None else (qt if context is None else tuple(str(j) for j in range(S)))
        weights = {name: None if p is None else p.detach().cpu().numpy().copy()  # copies: traces do not follow training
                   for name, p in (("W_Q", self.W_Q), ("W_K", self.W_K), ("W_V", self.W_V), ("W_O", self.W_O),
                                   ("b_Q", self.b_Q), ("b_K", self.b_K), ("b_V", self.b_V), ("b_O", self.b_O))}
        return AttentionTrace(
            query_tokens=qt,
            key_tokens=kt,
            **{name: tensor.detach().cpu().numpy() for name, tensor in t._asdict().items()},  # type: ignore[arg-type]
            **weights,
            scale=1.0 / math.sqrt(self.config.d_k),
            causal=causal,
            cross=context is not None,
            meta={"model": "configurable"},
        )
