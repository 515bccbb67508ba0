"""Cohere (Command R) and Cohere 2 (Command R7B, Command A): LLaMA's projections with rotary positions on
interleaved pairs.

    Q = x W_Q, K = x W_K, V = x W_V (KV heads shared by H/KV query heads)
    Cohere, use_qk_norm: q, k = LayerNorm(q), LayerNorm(k) over each head's d, with a weight per head (no bias)
    RoPE on pairs (x_0, x_1), (x_2, x_3), ...: the trace holds each head's dims as [evens | odds] (the same
        permutation in q, k, W_Q and W_K, so every score is the model's), where the pairs are rotate_half's
    Cohere 2: rotary and a sliding window on its sliding layers; its global layers use no positions at all
    attention and MLP read the same LayerNorm(x) in parallel; the logits are scaled by logit_scale
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from .adapter import Recorder, Site, Variations, register, rotary_of
from .llama import LlamaAdapter


def interleaved_order(d: int) -> list[int]:
    """A head's dims as the trace holds them: evens then odds, so pair (x_2i, x_2i+1) becomes (x_i, x_(i + d/2))."""
    return [*range(0, d, 2), *range(1, d, 2)]


@dataclass(frozen=True)
class HeadLayerNorm:
    """Cohere's q/k norm in the trace's dim order: LayerNorm over each head's d (no bias) with the head's own weight
    (heads, d); keys repeated for grouped-query heads read their K/V head's weight."""

    norm: nn.Module
    order: Sequence[int]

    def __call__(self, x: Tensor) -> Tensor:  # (..., H, T, d)
        weight = self.norm.weight.float()[:, list(self.order)]  # (heads, d) in trace order
        weight = weight.repeat_interleave(x.shape[-3] // weight.shape[0], dim=0)  # (H, d)
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return weight[:, None, :] * (x - mean) * torch.rsqrt(var + self.norm.variance_epsilon)


class InterleavedPairs(LlamaAdapter):
    """LLaMA's layout for a model that rotates pairs (x_2i, x_2i+1): queries, keys, W_Q and W_K held as [evens | odds],
    where rotate_half's pairs (x_i, x_(i + d/2)) are the model's."""

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().heads(site, rec)
        order = interleaved_order(site.head_dim)
        return q[..., order], k[..., order], v

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        out = super().projection_weights(site)
        order = interleaved_order(site.head_dim)
        for name in ("W_Q", "W_K", "b_Q", "b_K"):
            if out[name] is not None:
                out[name] = out[name][..., order]
        return out


@register
class CohereAdapter(InterleavedPairs):
    """layers[i].self_attn.{q_proj,k_proj,v_proj,o_proj}; rotary cos/sin come in as position_embeddings, repeated
    per pair ([f0, f0, f1, f1, ...])."""

    architectures = ("cohere", "cohere2")

    def logit_scale(self) -> float:
        return float(self.model.config.logit_scale)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        a, order = site.attention, interleaved_order(site.head_dim)
        if getattr(a, "use_qk_norm", False):
            variations = replace(variations, q_norm=HeadLayerNorm(a.q_norm, order), k_norm=HeadLayerNorm(a.k_norm, order))
        if self.model.config.model_type == "cohere2" and a.sliding_window is None:
            return replace(variations, rotary=None)  # Cohere 2's global layers: no positions
        cos, sin = rotary_of(rec)  # (T, d): one angle per pair, repeated
        return replace(variations, rotary=(cos[:, order], sin[:, order]))
