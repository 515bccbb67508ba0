"""LFM2 (Liquid): gated short convolutions in most layers, softmax attention with QK-norm in the others
(config.layer_types).

Convolution layers (layers[i].conv), channel c of d_model (a 'head' of width 1: the layer has no heads):
    [B | C | x] = x W_in   (T, d_model) each
    mixed_c = M_c @ x_c    M_c[t, s] = C_t w_c[t - s] B_s  for 0 <= t - s < L_cache   (mha_viz.mixers.ShortConv)
    head outputs = mixed (+ C * conv bias, where the convolution has one);  then out_proj
Attention layers: LLaMA's (rotary, grouped K/V heads) with an RMSNorm on each query and key head (q_layernorm,
k_layernorm) and out_proj as W_O. operator_norm before either; the final norm is embedding_norm.
LFM3: the same convolutions (7 taps by default); attention with q_norm, k_norm, o_proj, sliding windows on the layers
config.layer_types calls sliding, and a sigmoid gate per head and token, sigmoid(x W_g) (use_attention_gate); with
use_sandwich_norm, each layer's output is normalised again before the residual stream (post_operator_norm).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor, nn

from ..mixers import ShortConv
from .adapter import Recorder, Site, Variations, register
from .llama import LlamaAdapter
from .mixing import MixerAdapter, Mixing


@register
class Lfm2Adapter(MixerAdapter, LlamaAdapter):
    """layers[i].conv (a gated short convolution) or layers[i].self_attn (LLaMA-style, QK-norm, out_proj)."""

    architectures = ("lfm2", "lfm2_moe")
    projections = ("q_proj", "k_proj", "v_proj", "out_proj")
    weights_unavailable = ("a convolution channel has no W_Q K^T: its matrix is a band of the kernel's taps, gated "
                           "by C and B that depend on the input, and each channel is a 'head' of width 1")

    def mixer(self, layer: int) -> nn.Module | None:
        return getattr(self.base.layers[layer], "conv", None)

    def kind_of(self, module: nn.Module) -> str:
        return "conv"

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        channels = module.out_proj.in_features
        return Site(module, None, None, None, module.out_proj, channels, channels, 1)

    def attention_site(self, layer: int) -> Site:
        return LlamaAdapter.site(self, "decoder", layer)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        return replace(super().variations(part, site, rec, q, k), q_norm=a.q_layernorm, k_norm=a.k_layernorm)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].operator_norm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.embedding_norm

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        m = module
        B, C, xs = (t.float().T for t in m.in_proj(x).chunk(3, dim=-1))  # (d_model, T) each
        bias = None if m.conv.bias is None else m.conv.bias.float()[:, None] * C  # (d_model, T): C times the bias
        w = m.conv.weight.float()[:, 0]  # (d_model, L_cache)
        return Mixing(
            name="short convolution",
            kind="conv",
            factors=ShortConv(C, B, w),  # M (d_model, T, T), a band
            values=xs[..., None],  # (d_model, T, 1): each channel's x
            finish=(lambda mixed: mixed) if bias is None else (lambda mixed: mixed + bias[..., None]),
            finish_formula="M @ x, per channel" if bias is None else "M @ x + C * conv bias, per channel",
            arrays={"gate in (B)": B, "gate out (C)": C},
            no_scores=("a short convolution has no softmax scores: its weights are the exact mixing matrix of each "
                       "channel, C_t times the kernel's tap for t - s times B_s, nonzero only for the last "
                       f"{w.shape[-1]} tokens (signed); one matrix per channel"),
        )


@register
class Lfm3Adapter(Lfm2Adapter):
    """LFM3: LFM2's convolutions; attention with q_norm, k_norm, o_proj, windows and a sigmoid gate per head."""

    architectures = ("lfm3",)
    projections = ("q_proj", "k_proj", "v_proj", "o_proj")

    @property
    def attribution_unavailable(self) -> str | None:  # type: ignore[override]
        if not self.model.config.use_sandwich_norm:
            return None
        return ("LFM3 normalises each layer's output (post_operator_norm, its sandwich norm) before adding it to the "
                "residual stream, so its logits do not split into one term per head")

    scores_unavailable = None  # score attribution freezes the sandwich norm on each layer's output

    def post_attention_norm(self, layer: int) -> nn.Module | None:
        norm = self.base.layers[layer].post_operator_norm
        return None if isinstance(norm, nn.Identity) else norm  # nn.Identity without use_sandwich_norm

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        variations = replace(LlamaAdapter.variations(self, part, site, rec, q, k), q_norm=a.q_norm, k_norm=a.k_norm)
        if a.g_proj is None:
            return variations
        x = rec.arguments["hidden_states"][0]  # (T, d_model): what the layer read
        return replace(variations, gates=torch.sigmoid(a.g_proj(x)).float().T)  # (H, T)
