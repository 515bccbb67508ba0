"""GPTBigCode (SantaCoder, StarCoder 1): GPT-2's layout with one fused projection per layer, multi-query or not.

    c_attn: one Linear; multi_query (one K/V head for all H query heads): [Q (H*d) | K (d) | V (d)] side by side,
            the default split; else each head's [q_h | k_h | v_h] in turn: (H, 3*d) per position
    scores = scale * Q K^T + causal mask    scale = 1/sqrt(d) (1 without scale_attn_weights)
    output = concat W_O^T + b_O              c_proj
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from .adapter import Adapter, Site, register


@register
class GPTBigCodeAdapter(Adapter):
    """h[i].attn.c_attn (q, k and v at once) and h[i].attn.c_proj."""

    architectures = ("gpt_bigcode",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].attn
        return Site(a, a.c_attn, a.c_attn, a.c_attn, a.c_proj, a.num_heads, a.kv_heads, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.h[layer].ln_1

    def qkv_columns(self, site: Site, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if site.num_kv_heads == 1:  # multi-query: [Q | K | V]
            return super().qkv_columns(site, x)
        q, k, v = x.unflatten(-1, (site.num_heads, 3 * site.head_dim)).split(site.head_dim, dim=-1)  # (..., H, d) each
        return q.flatten(-2), k.flatten(-2), v.flatten(-2)  # (..., H*d) each

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f
