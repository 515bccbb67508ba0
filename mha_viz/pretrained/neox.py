"""GPT-NeoX (Pythia): causal self-attention, one fused projection interleaved per head, partial rotary.

    query_key_value: output (T, H * 3 * d_k); head h's columns are [q_h | k_h | v_h]
    RoPE on the first rotary_pct * d_k dims of each head's q and k; the rest pass unchanged
    scores = Q' K'^T / sqrt(d_k) + causal mask      W_O is attention.dense
Attention and MLP run in parallel on the same input when use_parallel_residual is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, register, rotary_of


def interleaved(x: Tensor, heads: int, d: int) -> tuple[Tensor, Tensor, Tensor]:
    """Columns (..., heads * 3 * d), per head [q_h | k_h | v_h] -> q, k, v (..., heads*d) each, heads in order."""
    per_head = x.unflatten(-1, (heads, 3, d))  # (..., heads, 3, d)
    return tuple(per_head[..., i, :].flatten(-2) for i in range(3))  # type: ignore[return-value]


@register
class GPTNeoXAdapter(Adapter):
    """layers[i].attention.{query_key_value,dense}; rotary cos/sin (partial) come in as position_embeddings."""

    architectures = ("gpt_neox",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.layers[layer].attention
        H = self.model.config.num_attention_heads
        return Site(a, a.query_key_value, a.query_key_value, a.query_key_value, a.dense, H, H, a.head_size)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].input_layernorm

    def qkv_columns(self, site: Site, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return interleaved(x, site.num_heads, site.head_dim)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        return replace(super().variations(part, site, rec, q, k), rotary=rotary_of(rec))  # partial: r < d_k dims

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.final_layer_norm
