"""LLaMA, Mistral, Qwen2: causal self-attention with rotary positions and grouped-query attention.

    Q = x W_Q (H heads), K = x W_K, V = x W_V (KV heads; KV < H shares each K/V head among H/KV)
    RoPE: x' = x * cos + rotate_half(x) * sin,   rotate_half([x1, x2]) = [-x2, x1]   on Q and K
    scores = Q' K'^T / sqrt(d_k) + mask   (causal, and a sliding window where the model uses one)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., d/2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., d)


class LlamaAdapter(Adapter):
    """layers[i].self_attn.{q_proj,k_proj,v_proj,o_proj}; rotary cos/sin come in as position_embeddings."""

    architectures = ("llama", "mistral", "qwen2")
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.layers[layer].self_attn
        H, KV = self.model.config.num_attention_heads, self.model.config.num_key_value_heads
        return Site(a, a.q_proj, a.k_proj, a.v_proj, a.o_proj, H, KV, a.head_dim)

    def positions(self, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, None]:
        cos, sin = (t[0] for t in rec.arguments["position_embeddings"])  # (T, d) each
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, None  # (H, T, d), (KV, T, d)

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.norm
