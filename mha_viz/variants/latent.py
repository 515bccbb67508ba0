"""Multi-head latent attention (MLA, DeepSeek-V2/V3): keys and values up-projected per head from one cached latent.

With n = d_k (position-free query/key dims), r = rope_dim, d_c = kv_latent, d_q = q_latent, as DeepSeek-V3 computes it
(transformers' DeepseekV3Attention):
    q       = x W_Q[h]   or   RMSNorm(x W_DQ + b_DQ) W_UQ[h]           (H, T, r + n) per head: [q_rope | q_nope]
    [c | k_rope] = context W_DKV + b_DKV                               c (S, d_c), k_rope (S, r): one for every head
    c_KV    = RMSNorm(c)                                               the latent: with k_rope, all the cache holds
    k_nope  = c_KV W_UK[h],  v = c_KV W_UV[h]                          (H, S, n), (H, S, d_v): rebuilt from the latent
    q_rope, k_rope rotated (RoPE, rotate_half pairs (i, i + r/2); queries at 0..T-1, keys at 0..S-1)
    scores  = [q_rope | q_nope] . [k_rope | k_nope] / sqrt(r + n)
    output  = concat(heads) W_O^T + b_O
Biases (when cfg.bias) sit where DeepSeek's attention_bias puts them: W_DQ, W_DKV and W_O.

Why the rotary part is apart: q_nope . k_nope = (q_nope W_UK[h]^T) . c_KV, so at decoding W_UK is absorbed into the
query side and scores are taken against the cached latent itself. A rotation R_i - R_j between query i and key j
would sit inside that product and depend on both positions, so no fixed matrix can absorb it: the positions go into
a separate small key part k_rope, cached beside the latent and shared by every head.

The trace uses the layout of the real DeepSeek adapter (mha_viz.pretrained.deepseek): queries and keys are
[r rotary dims | n position-free dims], after rotation; meta["kv_latent"] (S, d_c) is c_KV, meta["k_rope"] (S, r)
the rotated shared key part (= keys[h, :, :r] for every h), meta["W_UK"] [H, d_c, n] and meta["W_UV"] [H, d_c, d_v]
rebuild keys[..., r:] and values from it. W_Q, W_K, W_V are None: the latent's RMSNorm sits between x and K, V.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import AttentionTensors, Variations, apply_rotary, attend, check_one_input
from ..config import MHAConfig
from ..fields import ranged
from ..limits import MAX_ROPE_DIM, MAX_VARIANT_WIDTH
from ..trace import AttentionTrace
from ..variants_cost import VariantShape, kv_bytes_per_token, mha_baseline
from .base import LayerVariant
from .spec import Control, Training, Values, VariantSpec, register, whole_number

ROPE_BASE = 10000.0  # rotary base theta (DeepSeek-V3 config: rope_theta = 10000)
NORM_EPS = 1e-6  # the RMSNorms' epsilon (DeepseekV3RMSNorm)
UNAVAILABLE = ("multi-head latent attention has no W_K or W_V per head: keys and values are up-projected (W_UK, W_UV "
               "in meta) from a latent that passes an RMSNorm of its own, so no matrix maps the input to them")


def rotary_table(positions: int, r: int, base: float = ROPE_BASE) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (positions, r), for rotate_half pairs (i, i + r/2): pair i turns by pos / base^(2i/r)."""
    inv_freq = 1.0 / base ** (torch.arange(0, r, 2, dtype=torch.float32) / r)  # (r/2,)
    angles = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq  # (positions, r/2)
    emb = torch.cat((angles, angles), dim=-1)  # (positions, r)
    return emb.cos(), emb.sin()


def rms_norm(x: Tensor, weight: Tensor, eps: float = NORM_EPS) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (computed in float32, as DeepseekV3RMSNorm)."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class LatentRMSNorm(nn.Module):
    """rms_norm with the weight of its owner's parameter `name` (kv_norm, q_norm): a module, so that a hook can see
    and freeze it (score attribution), while the parameter and the owner's state_dict keys stay where they were."""

    def __init__(self, owner: nn.Module, name: str, eps: float = NORM_EPS) -> None:
        super().__init__()
        object.__setattr__(self, "owner", owner)  # a plain reference, not a submodule: no parameter counted twice
        self.name, self.eps = name, eps

    @property
    def weight(self) -> Tensor:
        """(d,) the owner's parameter, read at each call (a loaded state or a copy of the owner included)."""
        return getattr(self.owner, self.name)

    def extra_repr(self) -> str:
        return f"{self.name}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        """(..., d) -> (..., d): x / sqrt(mean(x^2) + eps) * weight."""
        return rms_norm(x, self.weight, self.eps)


def _xavier(W: Tensor, fan_in: int, fan_out: int, gen: torch.Generator | None) -> None:
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    W.copy_(torch.rand(W.shape, generator=gen, dtype=W.dtype) * 2 * bound - bound)


class LatentAttention(nn.Module):
    """Multi-head latent attention with the configurable layer's h, d_k (position-free dims), d_v, d_out.

    Parameters (per head h as W[h] (d_in, d)): W_Q [H, d_model, r + n] (no query latent) or W_DQ [d_model, d_q],
    q_norm [d_q], W_UQ [H, d_q, r + n]; W_DKV [d_context, d_c + r], kv_norm [d_c], W_UK [H, d_c, n],
    W_UV [H, d_c, d_v], W_O [d_out, H*d_v]; biases b_DQ, b_DKV, b_O when cfg.bias. The norms are the modules
    q_rmsnorm and kv_rmsnorm (LatentRMSNorm), which read q_norm and kv_norm: no parameters of their own.
    """

    def __init__(self, cfg: MHAConfig, variant: LayerVariant, *, seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if variant.kind != "mla":
            raise ValueError(f"LatentAttention computes the mla variant, got {variant.kind!r}")
        self.config, self.variant = cfg, variant
        H, n, r, L, Lq = cfg.num_heads, cfg.d_k, variant.rope_dim, variant.kv_latent, variant.q_latent
        width = r + n
        empty = {"dtype": dtype}
        bias = cfg.bias
        if Lq:
            self.W_Q = None
            self.W_DQ = nn.Parameter(torch.empty(cfg.d_model, Lq, **empty))
            self.b_DQ = nn.Parameter(torch.zeros(Lq, **empty)) if bias else None
            self.q_norm = nn.Parameter(torch.ones(Lq, **empty))
            self.q_rmsnorm = LatentRMSNorm(self, "q_norm")
            self.W_UQ = nn.Parameter(torch.empty(H, Lq, width, **empty))
        else:
            self.W_Q = nn.Parameter(torch.empty(H, cfg.d_model, width, **empty))
            self.W_DQ = self.b_DQ = self.q_norm = self.W_UQ = self.q_rmsnorm = None
        self.W_DKV = nn.Parameter(torch.empty(cfg.d_context, L + r, **empty))
        self.b_DKV = nn.Parameter(torch.zeros(L + r, **empty)) if bias else None
        self.kv_norm = nn.Parameter(torch.ones(L, **empty))
        self.kv_rmsnorm = LatentRMSNorm(self, "kv_norm")
        self.W_UK = nn.Parameter(torch.empty(H, L, n, **empty))
        self.W_UV = nn.Parameter(torch.empty(H, L, cfg.d_v, **empty))
        self.W_O = nn.Parameter(torch.empty(cfg.d_out, H * cfg.d_v, **empty))
        self.b_O = nn.Parameter(torch.zeros(cfg.d_out, **empty)) if bias else None
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """Xavier-uniform matrices (fan-in = input width, fan-out = heads * head width), zero biases, unit norms."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for W in (self.W_Q, self.W_UQ, self.W_UK, self.W_UV):
            if W is not None:
                _xavier(W, W.shape[1], W.shape[0] * W.shape[2], gen)
        for W in (self.W_DQ, self.W_DKV):
            if W is not None:
                _xavier(W, W.shape[0], W.shape[1], gen)
        _xavier(self.W_O, self.W_O.shape[1], self.W_O.shape[0], gen)

    @property
    def scale(self) -> float:
        """1 / sqrt(r + n): the width of a query/key head, rotary and position-free dims together."""
        return 1.0 / math.sqrt(self.variant.rope_dim + self.config.d_k)

    @staticmethod
    def _per_head(x: Tensor, W: Tensor) -> Tensor:
        """x (..., T, d_in) times every W[h] (d_in, d): (..., H, T, d)."""
        return x.unsqueeze(-3) @ W  # (..., H, T, d)

    def queries(self, x: Tensor) -> Tensor:
        """(..., H, T, r + n) before rotation, [q_rope | q_nope] per head."""
        if self.W_Q is not None:
            return self._per_head(x, self.W_Q)
        c_q = x @ self.W_DQ  # (..., T, d_q)
        if self.b_DQ is not None:
            c_q = c_q + self.b_DQ
        return self._per_head(self.q_rmsnorm(c_q), self.W_UQ)  # (..., H, T, r + n)

    def latent(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """The latent c_KV = RMSNorm(c) (..., S, d_c) and the shared key part k_rope (..., S, r) before rotation."""
        ckv = context @ self.W_DKV  # (..., S, d_c + r)
        if self.b_DKV is not None:
            ckv = ckv + self.b_DKV
        c, k_rope = ckv.split([self.variant.kv_latent, self.variant.rope_dim], dim=-1)
        return self.kv_rmsnorm(c), k_rope

    def attend(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
               head_mask: Tensor | None = None) -> AttentionTensors:
        """Differentiable forward pass. x (..., T, d_model); context (..., S, d_context). Queries and keys are
        returned as the scores use them: rotated, [rotary r | position-free n] per head."""
        cfg, r = self.config, self.variant.rope_dim
        c = x if context is None else context
        if x.shape[-1] != cfg.d_model:
            raise ValueError(f"x has width {x.shape[-1]}, the layer expects d_model={cfg.d_model}")
        if c.shape[-1] != cfg.d_context:
            raise ValueError(f"context has width {c.shape[-1]}, the layer expects d_context={cfg.d_context}")
        q = self.queries(x)  # (..., H, T, r + n)
        latent, k_rope = self.latent(c)  # (..., S, d_c), (..., S, r)
        k_nope = self._per_head(latent, self.W_UK)  # (..., H, S, n)
        v = self._per_head(latent, self.W_UV)  # (..., H, S, d_v)
        k = torch.cat((k_rope.unsqueeze(-3).expand(*k_nope.shape[:-1], r), k_nope), dim=-1)  # (..., H, S, r + n)
        T, S = q.shape[-2], k.shape[-2]
        rotary = None
        if r and T == S:  # the core rotates queries and keys with one table
            rotary = tuple(t.to(q) for t in rotary_table(T, r))
        elif r:  # cross-attention over S != T keys: each side turned by its own positions first
            q = apply_rotary(q, *(t.to(q) for t in rotary_table(T, r)))
            k = apply_rotary(k, *(t.to(k) for t in rotary_table(S, r)))
        a = attend(q, k, v, Variations(scale=self.scale, rotary=rotary, causal=causal), head_mask)
        output = a.concat @ self.W_O.T  # (..., T, d_out)
        if self.b_O is not None:
            output = output + self.b_O
        return AttentionTensors(a.queries, a.keys, v, a.scores, a.weights, a.head_outputs, a.concat, output)

    @torch.no_grad()
    def forward(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                head_mask: Tensor | None = None) -> AttentionTrace:
        """Trace one input: x (T, d_model), optional context (S, d_context) for cross-attention."""
        check_one_input(x, context)
        t = self.attend(x, context, causal=causal, head_mask=head_mask)
        latent, _ = self.latent(x if context is None else context)  # (S, d_c)
        T, S = t.weights.shape[-2:]
        r = self.variant.rope_dim
        qt = tuple(query_tokens) if query_tokens is not None else tuple(str(i) for i in range(T))
        kt = tuple(key_tokens) if key_tokens is not None else (qt if context is None else tuple(str(j) for j in range(S)))
        arrays = {name: tensor.detach().cpu().numpy() for name, tensor in t._asdict().items()}
        meta = {"model": "configurable", "mla": "multi-head latent attention: queries and keys are [r rotary dims | "
                "position-free dims]; meta['kv_latent'] (S, kv_latent) and meta['k_rope'] (S, r) are what the cache "
                "holds per token", "rope_dim": r, "kv_latent": latent.cpu().numpy().copy(),
                "k_rope": arrays["keys"][0, :, :r].copy(), "W_UK": self.W_UK.detach().cpu().numpy().copy(),
                "W_UV": self.W_UV.detach().cpu().numpy().copy(), "unavailable": UNAVAILABLE}
        return AttentionTrace(
            query_tokens=qt, key_tokens=kt, **arrays,
            W_O=self.W_O.detach().cpu().numpy().copy(),
            b_O=None if self.b_O is None else self.b_O.detach().cpu().numpy().copy(),
            scale=self.scale, causal=causal, cross=context is not None, meta=meta,
        )


def absorbed_scores(trace: AttentionTrace) -> np.ndarray:
    """[H, T, S] (q_nope W_UK[h]^T) . c_KV: the position-free part of q.k with W_UK absorbed into the query, so taken
    against the cached latent itself (no key built). Equal to q_nope . k_nope; the scores are
    scale * (q_rope . k_rope + this). Needs meta["kv_latent"] and meta["W_UK"] (a configurable MLA trace)."""
    if "kv_latent" not in trace.meta or "W_UK" not in trace.meta:
        raise ValueError("absorbed scores need meta['kv_latent'] and meta['W_UK']: a multi-head latent attention trace")
    r = int(trace.meta["rope_dim"])
    q_nope = trace.require("queries")[..., r:]  # (H, T, n)
    absorbed = q_nope @ trace.meta["W_UK"].transpose(0, 2, 1)  # (H, T, d_c): W_UK^T folded into each query
    return absorbed @ trace.meta["kv_latent"].T  # (H, T, S)


def cache_numbers(cfg: MHAConfig, variant: LayerVariant) -> tuple[int, int]:
    """Numbers cached per token and layer: MLA's kv_latent + rope_dim, and MHA's h·(d_k + r + d_v) beside it (the
    same h and query/key width; mha_viz.variants_cost)."""
    shape = VariantShape("mla", cfg.d_model, cfg.num_heads, head_dim=cfg.d_k, v_dim=cfg.d_v, kv_latent=variant.kv_latent,
                         q_latent=variant.q_latent, rope_dim=variant.rope_dim)
    return kv_bytes_per_token(shape, 1), kv_bytes_per_token(mha_baseline(shape), 1)


def _describe(cfg: MHAConfig, variant: LayerVariant) -> str:
    """What the layer computes and what its cache holds per token, beside MHA's."""
    H, n, r, L, Lq = cfg.num_heads, cfg.d_k, variant.rope_dim, variant.kv_latent, variant.q_latent
    _, mha = cache_numbers(cfg, variant)
    query = (f"queries pass a latent of {Lq} number{'s' * (Lq != 1)} (W_DQ, RMSNorm, W_UQ)" if Lq else
             "queries are projected from each token directly (W_Q)")
    rope = (f"a rotary key part of {r} numbers, shared by every head, carries the positions"
            if r else "no rotary part: the scores do not see positions")
    latent, cached = f"{L} number{'s' * (L != 1)}", f"{L + r} number{'s' * (L + r != 1)}"
    return (f"Multi-head latent attention (DeepSeek-V2/V3): each token is compressed to one latent of {latent} "
            f"(W_DKV, RMSNorm), and each of the {H} heads rebuilds its keys ({n} dims) and values ({cfg.d_v} dims) "
            f"from it with W_UK and W_UV; {rope}; {query}. The cache holds {L} + {r} = {cached} per token "
            f"instead of MHA's h·(d_k + r + d_v) = {H}·({n} + {r} + {cfg.d_v}) = {mha} ({(L + r) / mha:.3g}×).")


def _formulas(cfg: MHAConfig, T: int, S: int | None = None, *, causal: bool = False, **params: Any) -> list[str]:
    """LaTeX lines of what this variant changes, with live dimensions (mha_viz.formulas.variant_formulas)."""
    S = T if S is None else S
    d_k, d_v, d = cfg.d_k, cfg.d_v, cfg.d_model
    c, r, q = params["kv_latent"], params["rope_dim"], params["q_latent"]
    rotary = r"\mathrm{RoPE}(q^R_h)\,\mathrm{RoPE}(k^R)^\top + " if r else ""  # rope_dim 0: no positions in the scores
    query = (rf"[\,q^R_h \,|\, q^C_h\,] = \mathrm{{RMSNorm}}(X W^{{DQ}})\, W^{{UQ}}_h, \quad W^{{DQ}} \in "
             rf"\mathbb{{R}}^{{{d} \times {q}}}" if q else
             rf"[\,q^R_h \,|\, q^C_h\,] = X W^Q_h, \quad W^Q_h \in \mathbb{{R}}^{{{d} \times {r + d_k}}}")
    return [
        (rf"[\,c \,|\, k^R\,] = X W^{{DKV}}, \quad c^{{KV}} = \mathrm{{RMSNorm}}(c) \in \mathbb{{R}}^{{{S} \times {c}}}"
        rf", \quad k^R \in \mathbb{{R}}^{{{S} \times {r}}} \quad \text{{(all the cache holds: {c} + {r} numbers a token)}}"),
        (rf"K^C_h = c^{{KV}} W^{{UK}}_h \in \mathbb{{R}}^{{{S} \times {d_k}}}, \quad V_h = c^{{KV}} W^{{UV}}_h \in "
        rf"\mathbb{{R}}^{{{S} \times {d_v}}} \quad \text{{(rebuilt per head from the latent)}}"),
        query,
        (rf"\mathrm{{head}}_h = \mathrm{{softmax}}\!\left(\frac{{{rotary}q^C_h K^{{C\top}}_h}}{{\sqrt{{{r + d_k}}}}}"
        rf"{' + M' if causal else ''}\right) V_h"),
        (r"q^C_h K^{C\top}_h = (q^C_h W^{UK\top}_h)\, c^{KV\top} \quad \text{(absorbed: scores against the latent "
        r"itself; a rotation between q and k could not be absorbed, so positions live in } k^R\text{)}"),
    ]


def _validate(params: Values) -> None:
    for name, lo in (("kv_latent", 1), ("q_latent", 0), ("rope_dim", 0)):
        whole_number(name, params[name], lo, MAX_VARIANT_WIDTH)
    if params["rope_dim"] % 2:
        raise ValueError(f"rope_dim must be even (rotary positions turn pairs of dims), got {params['rope_dim']}")


register(VariantSpec(
    "mla", "MLA", LatentAttention, _describe,
    lambda cfg, v: VariantShape("mla", cfg.d_model, cfg.num_heads, head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias,
                                kv_latent=v.kv_latent, q_latent=v.q_latent, rope_dim=v.rope_dim),
    Training(lambda v, h: f"MLA c={v.kv_latent}", grid=lambda h: [LayerVariant("mla", kv_latent=c) for c in (4, 8, 16)],
             colour="#2ca02c", step_cost=(1.7, 5.0),  # latents and rotary keys: 3-7 times what their weights count
             unsplit="keys and values are up-projected from one latent per token, and the rotary "
             "key part is shared by all heads"),
    fields=(ranged("kv_latent", 16, 1, MAX_VARIANT_WIDTH, "a latent width from {lo} to {hi}"),
            ranged("q_latent", 0, 0, MAX_VARIANT_WIDTH, "0 (none) or a latent width up to {hi}"),
            ranged("rope_dim", 4, 0, MAX_ROPE_DIM, "an even number of rotary dimensions from {lo} to {hi}", even=True)),
    validate=_validate, formulas=_formulas, flag="latent",
    controls=(
        Control("kv_latent", "KV latent kv_latent", "number", column=True,
                help="The width of the one latent vector cached per token; every head's keys and values are "
                "up-projected from it."),
        Control("q_latent", "Query latent q_latent", "number", column=True,
                help="0: queries are projected from the token directly. Else they pass a latent of this width first "
                "(DeepSeek-V3: 1536), which saves parameters, not cache."),
        Control("rope_dim", "Rotary dims rope_dim", "select_slider", options=lambda v: range(0, MAX_ROPE_DIM + 1, 2),
                help="Per head, this many extra query/key dims carry rotary positions, in a key part shared by every "
                "head and cached beside the latent (DeepSeek-V3: 64). 0: no positions in the scores.")),
    example={"kv_latent": "8", "rope_dim": "6", "q_latent": "4"},
    help="MLA (DeepSeek-V2/V3): keys and values are rebuilt per head from one small cached latent."))
