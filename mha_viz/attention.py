"""Multi-head attention computed head by head, keeping every intermediate.

    head_h = softmax(Q_h K_h^T / sqrt(d_k)) V_h,   Q_h = x W_Q[h] + b_Q[h],  K_h, V_h from context
    MultiHead(x) = Concat(head_0, ..., head_{H-1}) W_O^T + b_O      heads numbered from 0

attend() is the one attention core: this module's configurable layer and every pretrained
architecture's adapter (mha_viz.pretrained) call it, each with the variations its model uses
(a Variations: scale, per-head q/k norms, rotary positions, additive biases, soft-capping, masks, sink logits,
differential pairs of maps, a norm on each head's output; and head masks).

Parameters are stored per head, TransformerLens style:
    W_Q [H, d_model, d_k]   W_K [G, d_context, d_k]   W_V [G, d_context, d_v]   W_O [d_out, H*d_v]
G = kv_heads key/value heads (G = H: multi-head attention; G < H: grouped-query, G = 1: multi-query): query head h
reads K/V head h // (H / G). Its traces hold keys, values, W_K, W_V per query head (each K/V head repeated), as
pretrained grouped-query traces do, with trace.kv_heads naming the K/V head of each query head.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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


class Attended(NamedTuple):
    """What attend() computes from per-head q, k, v; leading batch dims allowed."""

    queries: Tensor  # (..., H, T, d_k) as the scores use them: after q_norm and rotary positions
    keys: Tensor  # (..., H, S, d_k) likewise
    scores: Tensor  # (..., H, T, S) masked entries -inf
    weights: Tensor  # (..., H, T, S)
    head_outputs: Tensor  # (..., H, T, d_v) after head_norm and head_mask
    concat: Tensor  # (..., T, H*d_v) after head_mask: what W_O receives
    values: Tensor  # (..., H, S, d_v) as the head outputs use them: v, or a differential pair's [v_i | v_(i+H)]
    maps: Tensor  # (..., H_q, T, S) the softmax of each query head (= weights unless differential)
    mixed: Tensor  # (..., H, T, d_v) weights @ values, before head_norm and head_mask


def causal_mask(T: int, S: int, device: torch.device | None = None) -> Tensor:
    """True where query i may not see key j (j > i)."""
    return torch.ones(T, S, dtype=torch.bool, device=device).triu(1)  # (T, S)


def window_mask(T: int, S: int, window: int, device: torch.device | None = None) -> Tensor:
    """True where key j is `window` or more positions away from query i: |i - j| >= window.

    With causal_mask this is a causal sliding window (Mistral, GPT-Neo's and Gemma2's local layers:
    the query and the window - 1 keys before it); alone it is ModernBERT's bidirectional window.
    """
    i = torch.arange(T, device=device)[:, None]  # (T, 1)
    j = torch.arange(S, device=device)[None, :]  # (1, S)
    return (i - j).abs() >= window  # (T, S)


def chunk_mask(T: int, S: int, chunk: int, device: torch.device | None = None) -> Tensor:
    """True where query i and key j lie in different chunks of `chunk` positions: i // chunk != j // chunk. With
    causal_mask this is chunked attention (Llama 4's chunked layers: a query sees the keys from its chunk's start)."""
    i = torch.arange(T, device=device)[:, None] // chunk  # (T, 1)
    j = torch.arange(S, device=device)[None, :] // chunk  # (1, S)
    return i != j  # (T, S)


def rotate_half(x: Tensor) -> Tensor:
    """[x1, x2] -> [-x2, x1] on the last dim: the 90-degree turn of each (x_i, x_{i+d/2}) pair."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d/2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., d)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary positions on the first r = cos.shape[-1] dims of x (all of them, or a part: GPT-NeoX, Phi).

        x_rot' = x_rot * cos + rotate_half(x_rot) * sin,   the other d - r dims pass unchanged
    x (..., H, T, d); cos, sin (T, r) or broadcastable to (..., H, T, r).
    """
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]  # (..., H, T, r), (..., H, T, d - r)
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)  # (..., H, T, d)


def check_one_input(x: Tensor, context: Tensor | None = None) -> None:
    """ValueError unless x is one input (T, d_model) with T > 0, and context one (S, d_context) with S > 0 or None:
    what a layer's forward() traces."""
    if x.dim() != 2 or (context is not None and context.dim() != 2):
        raise ValueError("forward traces one input: x must be (T, d_model) and context (S, d_context)")
    if x.shape[0] == 0 or (context is not None and context.shape[0] == 0):
        raise ValueError("cannot attend over an empty sequence")


def scale_heads(concat: Tensor, head_mask: Tensor) -> Tensor:
    """concat (..., T, H*d_v) with head h's column block scaled by head_mask[h] (0 switches the head off).

    The one head-mask function: attend(), the pretrained Recorder and knockout (HeadMasks) all use it.
    """
    H = head_mask.shape[0]
    if head_mask.dim() != 1 or concat.shape[-1] % H:
        raise ValueError(f"head_mask needs one value per head: shape ({H},) for a concat of width {concat.shape[-1]}")
    d_v = concat.shape[-1] // H
    return concat * head_mask.to(concat).repeat_interleave(d_v)  # (..., T, H*d_v)


@dataclass(frozen=True)
class Variations:
    """How one layer's attention differs from softmax(Q K^T / sqrt(d_k)) V: what attend() applies."""

    scale: float
    q_norm: Callable[[Tensor], Tensor] | None = None  # per-head norm over d_k, before rotary (Qwen3, Phi)
    k_norm: Callable[[Tensor], Tensor] | None = None
    rotary: tuple[Tensor, Tensor] | None = None  # (cos, sin), each (T, r): r < d_k rotates part of each head
    bias: dict[str, Tensor] = field(default_factory=dict)  # named terms added to the scores, each (H or 1, T or 1, S)
    softcap: float | None = None  # scores -> softcap * tanh(scores / softcap)
    mask: Tensor | None = None  # the model's own mask: True (or -inf) where a key is hidden
    causal: bool = False
    window: int | None = None  # keys |i - j| >= window are hidden (with causal: the window - 1 keys before i)
    chunk: int | None = None  # keys in another chunk of `chunk` positions are hidden (Llama 4's chunked layers)
    sinks: Tensor | None = None  # (H,) one learned logit per head in each softmax, then dropped (gpt-oss)
    differential: Tensor | float | None = None  # lambda, scalar or (H,): weights = map_i - lambda map_(i+H) (DiffLlama)
    head_norm: Callable[[Tensor], Tensor] | None = None  # on each head's output before the concat (DiffLlama)
    gates: Tensor | None = None  # (..., H, T): head h's output at token t times gates[h, t] before the concat (MoH)


def hidden_keys(T: int, S: int, var: Variations, device: torch.device) -> Tensor | None:
    """True where a query may not see a key: the model's boolean mask, causal, window and chunk, or'ed together on
    their own small shapes ((..., T, S) at most, no head dim), so the scores are masked in a single pass."""
    masks = [m for m in (
        var.mask if var.mask is not None and var.mask.dtype == torch.bool else None,
        causal_mask(T, S, device) if var.causal else None,
        None if var.window is None else window_mask(T, S, var.window, device),
        None if var.chunk is None else chunk_mask(T, S, var.chunk, device),
    ) if m is not None]
    return functools.reduce(torch.logical_or, masks) if masks else None


def attend(q: Tensor, k: Tensor, v: Tensor, variations: Variations, head_mask: Tensor | None = None) -> Attended:
    """Scaled dot-product attention of every head at once, with the variations real models use.

    q (..., H, T, d_k), k (..., H, S, d_k), v (..., H, S, d_v): one K/V per query head (repeat
    grouped-query K/V heads first). In this order:
        q, k    = q_norm(q), k_norm(k)                  per-head norms over d_k (Qwen3, Phi)
        q, k    = apply_rotary(q | k, cos, sin)         rotary positions, rotary = (cos, sin)
        scores  = scale * q k^T + sum(bias)             bias terms (..., H, T, S): ALiBi, relative positions
        scores  = softcap * tanh(scores / softcap)      logit soft-capping (Gemma2)
        scores  = scores + mask                         mask: True (or -inf) where a key is hidden
        scores  = -inf where j > i (causal), |i - j| >= window or i // chunk != j // chunk
        weights = softmax(scores)                       over keys
        weights = softmax([scores | sink_h])[:, :S]     with sinks (H,): one more logit per row, its column
                                                        dropped, so a row sums to 1 - sink mass (gpt-oss)
        weights = maps_i - lambda maps_(i+H)            differential: q, k, v hold 2H heads, pairs (i, i + H);
        v_i     = [v_i | v_(i+H)]                       the signed difference of two softmax maps (DiffLlama)
        head_h  = head_norm(weights_h v_h)
        head_h  = gates_h[:, None] * head_h             per-token head gates (H, T): a router's weights (MoH)
        concat  = [head_0 | ... | head_{H-1}] scaled by head_mask (H,)
    """
    var = variations
    if var.q_norm is not None:
        q = var.q_norm(q)  # (..., H, T, d_k)
    if var.k_norm is not None:
        k = var.k_norm(k)  # (..., H, S, d_k)
    if var.rotary is not None:
        cos, sin = var.rotary  # (T, r) each
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # (..., H, T, d_k), (..., H, S, d_k)
    scores = (q * var.scale) @ k.transpose(-1, -2)  # (..., H, T, S)  scale * Q K^T
    if var.bias:
        scores = scores + sum(var.bias.values())  # (..., H, T, S)
    if var.softcap is not None:
        scores = var.softcap * torch.tanh(scores / var.softcap)  # (..., H, T, S)
    if var.mask is not None and var.mask.dtype != torch.bool:
        scores = scores + var.mask  # (..., H, T, S) additive
    # scores is this call's own tensor from here on (each line above made a new one): masked in place, in one pass
    hidden = hidden_keys(scores.shape[-2], scores.shape[-1], var, scores.device)  # (..., T, S), None: none
    if hidden is not None:
        scores.masked_fill_(hidden, float("-inf"))  # (..., H, T, S)
    if var.sinks is None:
        maps = scores.softmax(dim=-1)  # (..., H, T, S)
    else:  # as transformers' gpt-oss: [scores | sink], minus the row max, softmax, the sink column dropped
        sink = var.sinks.to(scores).reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)  # (..., H, T, 1)
        logits = torch.cat((scores, sink), dim=-1)  # (..., H, T, S + 1)
        maps = (logits - logits.max(dim=-1, keepdim=True).values).softmax(dim=-1)[..., :-1]  # (..., H, T, S)
    weights, values = maps, v  # (..., H, T, S), (..., H, S, d_v)
    if var.differential is not None:
        if maps.shape[-3] % 2:
            raise ValueError(f"differential attention pairs query heads: {maps.shape[-3]} is odd")
        first, second = maps.chunk(2, dim=-3)  # (..., H, T, S) each: heads i and i + H
        lam = torch.as_tensor(var.differential).to(maps).reshape(-1, 1, 1)  # (H or 1, 1, 1)
        weights = first - lam * second  # (..., H, T, S)  signed: rows sum to 1 - lambda
        values = torch.cat(v.chunk(2, dim=-3), dim=-1)  # (..., H, S, 2 d_v): [v_i | v_(i+H)]
    mixed = weights @ values  # (..., H, T, d_v)
    head_outputs = mixed if var.head_norm is None else var.head_norm(mixed)  # (..., H, T, d_v)
    if var.gates is not None:
        head_outputs = head_outputs * var.gates.to(head_outputs).unsqueeze(-1)  # (..., H, T, d_v)
    concat = head_outputs.transpose(-3, -2).flatten(-2)  # (..., T, H*d_v)
    if head_mask is not None:
        H = weights.shape[-3]
        if head_mask.shape != (H,):
            raise ValueError(f"head_mask needs one value per head: shape ({H},), got {tuple(head_mask.shape)}")
        concat = scale_heads(concat, head_mask)  # (..., T, H*d_v)
        head_outputs = concat.unflatten(-1, (H, -1)).transpose(-3, -2)  # (..., H, T, d_v)
    return Attended(q, k, scores, weights, head_outputs, concat, values, maps, mixed)


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
        kv_heads: int | None = None,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        cfg = MHAConfig(d_model, num_heads, d_k=d_k, d_v=d_v, d_out=d_out, d_context=d_context, bias=bias,
                        kv_heads=kv_heads)
        self.config = cfg
        H, G = cfg.num_heads, cfg.kv_heads
        self.W_Q = nn.Parameter(torch.empty(H, cfg.d_model, cfg.d_k, dtype=dtype))
        self.W_K = nn.Parameter(torch.empty(G, cfg.d_context, cfg.d_k, dtype=dtype))
        self.W_V = nn.Parameter(torch.empty(G, cfg.d_context, cfg.d_v, dtype=dtype))
        self.W_O = nn.Parameter(torch.empty(cfg.d_out, H * cfg.d_v, dtype=dtype))
        if bias:
            self.b_Q = nn.Parameter(torch.zeros(H, cfg.d_k, dtype=dtype))
            self.b_K = nn.Parameter(torch.zeros(G, cfg.d_k, dtype=dtype))
            self.b_V = nn.Parameter(torch.zeros(G, cfg.d_v, dtype=dtype))
            self.b_O = nn.Parameter(torch.zeros(cfg.d_out, dtype=dtype))
        else:
            self.b_Q = self.b_K = self.b_V = self.b_O = None
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """Xavier-uniform weights (fan-in = input width, fan-out = heads * head width), zero biases."""
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

    def per_query_head(self, t: Tensor) -> Tensor:
        """A tensor over the G key/value heads (dim -3, or dim 0 of a weight) repeated for the H query heads:
        K/V head g serves query heads g * H/G ... (g + 1) * H/G - 1 (no copy when G = H)."""
        n = self.config.group_size
        return t if n == 1 else t.repeat_interleave(n, dim=-3 if t.dim() >= 3 else 0)

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (..., H, S, d_k) and values (..., H, S, d_v) of context (..., S, d_context), one per query head:
        each of the G key/value heads computed once, then repeated for the query heads of its group."""
        k = self._project(context, self.W_K, self.b_K)  # (..., G, S, d_k)
        v = self._project(context, self.W_V, self.b_V)  # (..., G, S, d_v)
        return self.per_query_head(k), self.per_query_head(v)  # (..., H, S, d_k), (..., H, S, d_v)

    def check_inputs(self, x: Tensor, context: Tensor | None) -> Tensor:
        """The key/value-side input (context, or x for self-attention), after checking both widths."""
        cfg = self.config
        c = x if context is None else context
        if x.shape[-1] != cfg.d_model:
            raise ValueError(f"x has width {x.shape[-1]}, the layer expects d_model={cfg.d_model}")
        if c.shape[-1] != cfg.d_context:
            raise ValueError(f"context has width {c.shape[-1]}, the layer expects d_context={cfg.d_context}")
        return c

    def variations(self, x: Tensor, T: int, S: int, causal: bool) -> Variations:
        """What attend() applies for T queries and S keys: here the scale 1/sqrt(d_k) and the causal mask. A variant
        layer (mha_viz.variants) overrides it: a window, sink logits, a differential pair, per-token gates."""
        return Variations(scale=1.0 / math.sqrt(self.config.d_k), causal=causal)

    def attended(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                 head_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Attended, Tensor]:
        """q, k, v as projected, what attend() computes from them, and the output concat @ W_O^T + b_O."""
        c = self.check_inputs(x, context)
        q = self._project(x, self.W_Q, self.b_Q)  # (..., H, T, d_k)
        k, v = self.project_kv(c)  # (..., H, S, d_k), (..., H, S, d_v): grouped-query K/V repeated per query head
        a = attend(q, k, v, self.variations(x, q.shape[-2], k.shape[-2], causal), head_mask)
        return q, k, v, a, self.project_out(a.concat)

    def project_out(self, concat: Tensor) -> Tensor:
        """The output concat @ W_O^T + b_O: (..., T, H*d_v) -> (..., T, d_out)."""
        output = concat @ self.W_O.T  # (..., T, d_out)
        return output if self.b_O is None else output + self.b_O

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
        q, k, v, a, output = self.attended(x, context, causal=causal, head_mask=head_mask)
        return AttentionTensors(q, k, v, a.scores, a.weights, a.head_outputs, a.concat, output)

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
        check_one_input(x, context)
        t = self.attend(x, context, causal=causal, head_mask=head_mask)
        T, S = t.weights.shape[-2:]
        qt = tuple(query_tokens) if query_tokens is not None else tuple(str(i) for i in range(T))
        kt = tuple(key_tokens) if key_tokens is not None else (qt if context is None else tuple(str(j) for j in range(S)))
        kv = self.per_query_head  # W_K, W_V, b_K, b_V per query head, as the trace's keys and values
        weights = {name: None if p is None else p.detach().cpu().numpy().copy()  # copies: traces do not follow training
                   for name, p in (("W_Q", self.W_Q), ("W_K", kv(self.W_K)), ("W_V", kv(self.W_V)), ("W_O", self.W_O),
                                   ("b_Q", self.b_Q), ("b_K", self.b_K if self.b_K is None else kv(self.b_K)),
                                   ("b_V", self.b_V if self.b_V is None else kv(self.b_V)), ("b_O", self.b_O))}
        cfg = self.config
        return AttentionTrace(
            query_tokens=qt,
            key_tokens=kt,
            **{name: tensor.detach().cpu().numpy() for name, tensor in t._asdict().items()},  # type: ignore[arg-type]
            **weights,
            scale=1.0 / math.sqrt(cfg.d_k),
            causal=causal,
            cross=context is not None,
            kv_heads=None if cfg.group_size == 1 else tuple(cfg.kv_head(h) for h in range(cfg.num_heads)),
            meta={"model": "configurable"},
        )
