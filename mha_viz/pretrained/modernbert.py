"""ModernBERT: a bidirectional encoder with rotary positions, one fused Wqkv, global and local layers.

    [Q | K | V] = x Wqkv                   side by side (the default split)
    RoPE on Q and K (its own theta on global and on local layers)
    scores = Q' K'^T / sqrt(d_k) + mask    local layers: only keys with |i - j| <= local_attention / 2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, register, rotary_of


@register
class ModernBertAdapter(Adapter):
    """layers[i].attn.{Wqkv,Wo}; layer_types[i] is "full_attention" or "sliding_attention"."""

    architectures = ("modernbert",)
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.layers[layer].attn
        H = self.model.config.num_attention_heads
        return Site(a, a.Wqkv, a.Wqkv, a.Wqkv, a.Wo, H, H, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module | None:
        norm = self.base.layers[layer].attn_norm
        return None if isinstance(norm, nn.Identity) else norm  # layer 0 reads the normalised embeddings as they are

    def encoder_blocks(self) -> Sequence[nn.Module]:
        return self.base.layers  # x + attn(attn_norm(x)), then + mlp(mlp_norm(.)); layer 0 reads the normed embeddings

    def scale(self, site: Site) -> float:
        return site.head_dim**-0.5

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        # the module's sliding_window is local_attention / 2 + 1: keys |i - j| >= it are hidden
        variations = super().variations(part, site, rec, q, k)
        return replace(variations, rotary=rotary_of(rec), window=site.attention.sliding_window)
