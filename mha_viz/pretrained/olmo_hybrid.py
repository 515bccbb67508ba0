"""OLMo hybrid: Gated DeltaNet layers between OLMo 3's softmax attention layers.

Softmax layers (layers[i].self_attn): OLMo 2's (q and k normed across all heads, norms after the blocks), rotary or
none (the released checkpoints use no positions: rope_parameters without rope_theta).
Gated DeltaNet layers (layers[i].linear_attn), read through input_layernorm, as Qwen3.5's with:
    q, k, v = x W_q, x W_k, x W_v (separate projections),  gate z = x W_g
    b = sigmoid(x W_b), doubled when config.linear_allow_neg_eigval (write strengths in [0, 2]: negative eigenvalues)
    head_h = o_norm(M_h @ v_h, z_h), then o_proj
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .adapter import Site, register
from .olmo import Olmo2Adapter
from .qwen3_next import GatedDeltaNetMixer


@register
class OlmoHybridAdapter(GatedDeltaNetMixer, Olmo2Adapter):
    """layers[i].linear_attn (Gated DeltaNet, its gated norm o_norm, its projection o_proj) or layers[i].self_attn
    (OLMo 2's attention), by config.layer_types."""

    architectures = ("olmo_hybrid",)
    norm_name, out_name = "o_norm", "o_proj"
    weights_unavailable = ("OLMo hybrid's Gated DeltaNet layers have no W_Q K^T: their mixing matrix depends on the "
                           "whole sequence (decays and the delta rule)")

    def attention_site(self, layer: int) -> Site:
        return Olmo2Adapter.site(self, "decoder", layer)

    def projected(self, module: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        m = module
        qkv = torch.cat([m.q_proj(x), m.k_proj(x), m.v_proj(x)], -1)  # (T, 2 H_k d_k + H_v d_v)
        return qkv, m.g_proj(x).unflatten(-1, (m.num_v_heads, -1)), m.b_proj(x), m.a_proj(x)

    def beta(self, module: nn.Module, b: Tensor) -> Tensor:
        return super().beta(module, b) * (2.0 if module.allow_neg_eigval else 1.0)
