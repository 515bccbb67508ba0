"""Kimi Linear: Kimi Delta Attention (KDA) layers beside multi-head latent attention without positions.

KDA layers (layers[i].self_attn with a forget_gate), per head:
    [q k v] = SiLU(causal_conv1d(x W_q | x W_k | x W_v)),  q, k = L2norm(q) / sqrt(d_k), L2norm(k)
    log decay g = forget_gate(x), one per key dim;  b = sigmoid(x W_b)
    mixed_h = M_h @ v_h    M_h = mha_viz.mixers.gated_delta_matrix(q, k, g, b)   (a decay per key dim)
    head_h = o_norm(mixed_h, x W_ga W_gb): its gated RMSNorm; then o_proj
Softmax layers: DeepSeek's multi-head latent attention (mha_viz.pretrained.deepseek) with no rotation.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from ..mixers import DeltaRule
from .adapter import Recorder, Site, per_head, register
from .deepseek import DeepseekAdapter
from .mixing import MixerAdapter, Mixing
from .qwen3_next import causal_conv, gated_head_norm, l2norm


@register
class KimiLinearAdapter(MixerAdapter, DeepseekAdapter):
    """layers[i].self_attn: a KDA layer (it has a forget_gate) or latent attention (MLA) without rotary positions."""

    architectures = ("kimi_linear",)

    def mixer(self, layer: int) -> nn.Module | None:
        a = self.base.layers[layer].self_attn
        return a if hasattr(a, "forget_gate") else None

    def kind_of(self, module: nn.Module) -> str:
        return "linear"

    def attention_site(self, layer: int) -> Site:
        return DeepseekAdapter.site(self, "decoder", layer)

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        m = module
        return Site(m, None, None, None, m.o_proj, m.num_heads, m.num_heads, m.head_dim, core=m.o_norm)

    def interleaved(self, site: Site) -> bool:
        return False  # no rotation at all

    def rotary(self, site: Site, rec: Recorder) -> None:
        return None  # Kimi Linear's latent attention uses no positions (NoPE)

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        m, T = module, x.shape[0]
        H, d = m.num_heads, m.head_dim
        mixed = causal_conv(m.conv1d, torch.cat((m.q_proj(x), m.k_proj(x), m.v_proj(x)), -1), m.activation)
        q, k, v = (per_head(t.float(), H) for t in mixed.split(m.qkv_dim, dim=-1))  # (H, T, d) each
        log_decay = m.forget_gate(x[None])[0].float().transpose(0, 1)  # (H, T, d): one per key dim
        beta = m.b_proj(x).float().sigmoid().T  # (H, T)
        gate = m.g_b_proj(m.g_a_proj(x)).view(T, H, d)  # (T, H, d)
        return Mixing(
            kind="linear",
            name="Kimi Delta Attention",
            factors=DeltaRule(l2norm(q) * d**-0.5, l2norm(k), log_decay, beta),  # M (H, T, T)
            values=v,
            finish=partial(gated_head_norm, m.o_norm, gate),
            finish_formula="o_norm(M @ values, x W_ga W_gb): RMSNorm times its gate",
            arrays={"decay": log_decay.mean(-1).exp(), "beta": beta},  # decay: the geometric mean over key dims
            no_scores=("a Kimi Delta Attention layer has no softmax scores: its weights are the exact mixing matrix of "
                       "the delta rule with a decay per key dim (signed, not a probability)"),
        )

