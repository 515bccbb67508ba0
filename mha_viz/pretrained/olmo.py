"""OLMo 2 and OLMo 3: LLaMA's projections, with a norm over each projection's whole output and norms after the blocks.

    q = RMSNorm_q(x W_Q), k = RMSNorm_k(x W_K)     one norm over all heads at once (H·d_k wide), before the split
    RoPE on q and k; scores = Q K^T / sqrt(d_k) + mask     causal; OLMo 3: a sliding window on its local layers
    x = x + RMSNorm(attention(x)), x = x + RMSNorm(MLP(x))     the attention reads the residual stream itself
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor, nn

from .adapter import Recorder, Site, Variations, register
from .llama import LlamaAdapter


@dataclass(frozen=True)
class AcrossHeads:
    """A norm over every head's dims at once (OLMo 2's q_norm and k_norm: its weight is KV·d_k or H·d_k wide),
    applied to split heads; keys arrive repeated for the query heads that share them (grouped-query attention), so
    the norm reads each key/value head once and the result is repeated again."""

    norm: nn.Module

    def __call__(self, x: Tensor) -> Tensor:  # (..., H, T, d) -> the same, normed across the projection per position
        *lead, H, T, d = x.shape
        heads = self.norm.weight.shape[0] // d  # the heads the projection computed (KV <= H)
        group = H // heads
        own = x[..., ::group, :, :]  # (..., heads, T, d): each computed head once
        joined = own.transpose(-3, -2).reshape(*lead, T, heads * d)
        normed = self.norm(joined).reshape(*lead, T, heads, d).transpose(-3, -2)  # (..., heads, T, d)
        return normed.repeat_interleave(group, dim=-3)  # (..., H, T, d)


@register
class Olmo2Adapter(LlamaAdapter):
    """layers[i].self_attn.{q_proj,k_proj,v_proj,o_proj} with q_norm, k_norm across all heads; no norm before the
    attention (post_attention_layernorm normalises its output instead); OLMo 3's sliding layers keep their window on
    the module (self_attn.sliding_window)."""

    architectures = ("olmo2", "olmo3")
    attribution_unavailable = (
        "OLMo 2 and 3 normalise each attention output (post_attention_layernorm) before adding it to the residual "
        "stream, so their logits do not split into one term per head"
    )

    scores_unavailable = None  # score attribution freezes the post-attention norm and the QK-norm across heads
    attention_reads_stream = True

    def pre_norm(self, part: str, layer: int) -> nn.Module | None:
        return None  # the attention reads the residual stream itself

    def post_attention_norm(self, layer: int) -> nn.Module:
        return self.base.layers[layer].post_attention_layernorm

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        return replace(super().variations(part, site, rec, q, k), q_norm=AcrossHeads(a.q_norm),
                       k_norm=AcrossHeads(a.k_norm))
