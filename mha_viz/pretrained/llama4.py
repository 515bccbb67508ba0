"""Llama 4 (text): chunked attention with rotary positions, and position-free (NoPE) layers between them.

    Q = x W_Q, K = x W_K, V = x W_V (KV heads shared by H/KV query heads)
    rotary layers (config.no_rope_layers[i] == 1): RoPE on pairs (x_2i, x_2i+1), complex frequencies (the trace holds
        each head's dims as [evens | odds], where those pairs are rotate_half's); then, with use_qk_norm,
        q, k = q / rms(q), k / rms(k) (no weight; it commutes with the rotation); keys only in the query's chunk of
        attention_chunk_size positions (causal within it)
    NoPE layers: no positions at all; with attn_temperature_tuning each query is scaled by its position's
        temperature, 1 + attn_scale * log(1 + floor((t + 1) / floor_scale)), and every earlier key is seen
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .adapter import Adapter, Recorder, Site, Variations, register
from .cohere import InterleavedPairs


@dataclass(frozen=True)
class Temperature:
    """Llama 4's temperature tuning on a NoPE layer: query t times scales[t] (T,), before the scores."""

    scales: Tensor

    def __call__(self, x: Tensor) -> Tensor:  # (..., H, T, d)
        return x * self.scales[:, None].to(x)


def temperatures(attention: torch.nn.Module, T: int) -> Tensor:
    """The temperature of each of T positions (from 0): 1 + attn_scale * log(1 + floor((t + 1) / floor_scale))."""
    t = torch.arange(T, dtype=torch.float32)
    return torch.log1p(torch.floor((t + 1.0) / attention.floor_scale)) * attention.attn_scale + 1.0


@register
class Llama4Adapter(InterleavedPairs):
    """layers[i].self_attn.{q_proj,k_proj,v_proj,o_proj}; rotary frequencies come in as one complex tensor (T, d/2);
    which layers rotate (self_attn.use_rope) and which are chunked (config.layer_types) as the model says."""

    architectures = ("llama4_text",)
    # its chunked layers' cache holds only the current chunk's keys: generation reads each step from the whole sequence
    steps_from_cache = False

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        if not hasattr(self.base, "layers"):  # Llama4ForCausalLM names its text model "model", its base_model_prefix
            self.base = model.model  # "language_model" (the multimodal model's name for it)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        variations = Adapter.variations(self, part, site, rec, q, k)  # the scale, the model's mask, causal
        if not a.use_rope:
            if a.attn_temperature_tuning:
                variations = replace(variations, q_norm=Temperature(temperatures(a, q.shape[-2])))
            return variations
        freqs = rec.arguments["position_embeddings"][0]  # (T, d/2) complex: pair i turns by angle(freqs[t, i])
        cos, sin = freqs.real.float(), freqs.imag.float()
        variations = replace(variations, rotary=(torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)))
        if hasattr(a, "qk_norm"):
            variations = replace(variations, q_norm=a.qk_norm, k_norm=a.qk_norm)
        return replace(variations, chunk=self.chunk(site))

    def chunk(self, site: Site) -> int | None:
        cfg = self.model.config
        return cfg.attention_chunk_size if cfg.layer_types[site.attention.layer_idx] == "chunked_attention" else None
