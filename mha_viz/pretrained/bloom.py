"""Bloom and Falcon: causal self-attention with one fused query_key_value projection.

Bloom: ALiBi instead of position embeddings, head h's columns interleaved as [q_h | k_h | v_h]:
    scores = Q K^T / sqrt(d_k) + ALiBi + causal mask,   ALiBi[h, i, j] = m_h * j
    (m_h the head's slope; softmax ignores a constant per row, so m_h * j acts as m_h * (j - i))
Falcon: rotary positions, or with alibi=True ALiBi twice, as transformers (5.24) computes it: inside the
attention, (Q K^T + ALiBi) / sqrt(d_k), and again in the attention mask it builds, ALiBi / sqrt(d_k).
Falcon's projection has one of three layouts:
    multi_query (7B):            [q_0 ... q_{H-1} | k | v]             one K/V head
    new_decoder_architecture:    per K/V group g: [q_g0 ... q_g(n-1) | k_g | v_g]   grouped-query
    neither:                     Bloom's [q_h | k_h | v_h] per head
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, register, rotary_of
from .neox import interleaved


@register
class BloomAdapter(Adapter):
    """h[i].self_attention.{query_key_value,dense}; the ALiBi tensor comes in as the alibi argument."""

    architectures = ("bloom",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].self_attention
        return Site(a, a.query_key_value, a.query_key_value, a.query_key_value, a.dense, a.num_heads, a.num_heads,
                    a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.h[layer].input_layernorm

    def scale(self, site: Site) -> float:
        return float(site.attention.inv_norm_factor)

    def qkv_columns(self, site: Site, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return interleaved(x, site.num_heads, site.head_dim)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        alibi = rec.arguments["alibi"].view(-1, site.num_heads, 1, q.shape[-2])[0]  # (H, 1, S): m_h * j
        return replace(super().variations(part, site, rec, q, k), bias={"ALiBi": alibi})

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f


@register
class FalconAdapter(Adapter):
    """h[i].self_attention.{query_key_value,dense}; rotary cos/sin as position_embeddings, or alibi."""

    architectures = ("falcon",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].self_attention
        return Site(a, a.query_key_value, a.query_key_value, a.query_key_value, a.dense, a.num_heads,
                    a.num_kv_heads, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        block = self.base.h[layer]
        return block.ln_attn if hasattr(block, "ln_attn") else block.input_layernorm  # new architecture: two norms

    def scale(self, site: Site) -> float:
        return float(site.attention.inv_norm_factor)

    def qkv_columns(self, site: Site, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        H, KV, d = site.num_heads, site.num_kv_heads, site.head_dim
        if site.attention.new_decoder_architecture:
            groups = x.unflatten(-1, (KV, H // KV + 2, d))  # (..., KV, H/KV + 2, d)
            return groups[..., :-2, :].flatten(-3), groups[..., -2, :].flatten(-2), groups[..., -1, :].flatten(-2)
        if site.attention.multi_query:
            heads = x.unflatten(-1, (H + 2, d))  # (..., H + 2, d)
            return heads[..., :-2, :].flatten(-2), heads[..., -2, :], heads[..., -1, :]
        return interleaved(x, H, d)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        alibi = rec.arguments.get("alibi")
        if alibi is None:
            return replace(variations, rotary=rotary_of(rec))
        alibi = alibi.view(-1, site.num_heads, 1, q.shape[-2])[0]  # (H, 1, S)
        mask = rec.arguments["attention_mask"][0]  # (H, T, S): ALiBi / sqrt(d_k), the dtype's minimum where hidden
        again = mask.masked_fill(variations.mask, 0.0)  # (H, T, S)
        return replace(variations, bias={
            "ALiBi": alibi * variations.scale,  # (Q K^T + ALiBi) / sqrt(d_k)
            "ALiBi again (in the attention mask)": again,
        })

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f
