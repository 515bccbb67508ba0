"""Rotary decoders: LLaMA, Mistral, Qwen2, Qwen3, SmolLM3, Gemma, Gemma2, Gemma 3, Phi, Phi-3.

    Q = x W_Q (H heads), K = x W_K, V = x W_V (KV heads; KV < H shares each K/V head among H/KV)
    Qwen3, Phi (qk_layernorm): q, k = norm(q), norm(k) per head, before the rotation
    SmolLM3: no rotation at all on its NoPE layers (config.no_rope_layers[i] == 0)
    RoPE: x' = x * cos + rotate_half(x) * sin on the first r dims of Q and K (Phi: r < d_k, partial)
    scores = scale * Q' K'^T + mask     causal; a sliding window on Mistral's, Qwen's and Gemma2's local layers
    Gemma2: scale = query_pre_attn_scalar^-1/2, scores soft-capped: c * tanh(scores / c) before the mask
    Gemma 3: Gemma2's layout with q/k norms (as Qwen3's) instead of soft-capping (transformers' Gemma3Attention
        ignores attn_logit_softcapping even when its config sets it); sliding windows on local layers
    Phi-3: one fused qkv_proj, [Q | K | V] side by side
    gpt-oss: a learned sink logit per head joins each softmax and is dropped; sliding and full layers alternate
    DiffLlama: query heads i and i + H/2 pair into one differential head, weights = softmax_i - lambda softmax_(i+H/2)
        on values [v_i | v_(i+H/2)], lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init; each head's output
        is then (1 - lambda_init) RMSNorm(head) before o_proj
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, register, rotary_of


@register
class LlamaAdapter(Adapter):
    """layers[i].self_attn.{q_proj,k_proj,v_proj,o_proj}; rotary cos/sin come in as position_embeddings."""

    architectures = ("llama", "mistral", "qwen2")
    kind = "decoder"
    projections = ("q_proj", "k_proj", "v_proj", "o_proj")  # names of q, k, v and W_O in self_attn

    def site(self, part: str, layer: int) -> Site:
        return self.attention_site_of(self.base.layers[layer].self_attn)

    def attention_site_of(self, a: nn.Module) -> Site:
        """The Site of a LLaMA-style attention module a (its projections named by self.projections), wherever the
        block keeps it (Nemotron-H's mixer, Falcon-H1's self_attn beside its Mamba-2 mixer)."""
        H, KV = self.model.config.num_attention_heads, self.model.config.num_key_value_heads
        return Site(a, *(getattr(a, name) for name in self.projections), H, KV, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].input_layernorm

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        rotary = None if rec.arguments.get("position_embeddings") is None else rotary_of(rec)  # None: no positions
        return replace(super().variations(part, site, rec, q, k), rotary=rotary, window=self.window(site))

    def window(self, site: Site) -> int | None:
        """The sliding window of this layer: the module's own (None on global layers), else the config's (Mistral)."""
        if hasattr(site.attention, "sliding_window"):
            return site.attention.sliding_window
        return getattr(self.model.config, "sliding_window", None)

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.norm


@register
class Qwen3Adapter(LlamaAdapter):
    """LLaMA's layout with an RMSNorm on each query and key head (q_norm, k_norm) before the rotation."""

    architectures = ("qwen3",)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        return replace(super().variations(part, site, rec, q, k), q_norm=a.q_norm, k_norm=a.k_norm)


@register
class SmolLM3Adapter(LlamaAdapter):
    """SmolLM3: LLaMA's layout; a layer whose config.no_rope_layers entry is 0 (every fourth, by default) uses no
    positions at all (NoPE): its queries and keys are not rotated (self_attn.use_rope); sliding windows on the layers
    config.layer_types calls sliding, when config.use_sliding_window."""

    architectures = ("smollm3",)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        return variations if site.attention.use_rope else replace(variations, rotary=None)


@register
class GemmaAdapter(LlamaAdapter):
    """LLaMA's attention; the embeddings are scaled by sqrt(d_model) and RMSNorms multiply by (1 + weight)."""

    architectures = ("gemma",)
    norm_weight_offset = 1.0


@register
class Gemma2Adapter(LlamaAdapter):
    """Gemma2: soft-capped scores, sliding windows on alternate layers, norms after attention and MLP."""

    architectures = ("gemma2",)
    norm_weight_offset = 1.0  # its RMSNorms multiply by (1 + weight), as Gemma's do
    attribution_unavailable = (
        "Gemma2 normalises each attention output (post_attention_layernorm) before adding it to the residual "
        "stream and soft-caps the final logits, so its logits do not split into one term per head"
    )

    caps_scores = True  # transformers' Gemma2Attention passes its attn_logit_softcapping to the attention function
    scores_unavailable = None  # score attribution freezes the post-attention norm and adds the cap as a term

    def post_attention_norm(self, layer: int) -> nn.Module:
        return self.base.layers[layer].post_attention_layernorm

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        softcap = site.attention.attn_logit_softcapping if self.caps_scores else None
        return replace(super().variations(part, site, rec, q, k), softcap=softcap)


@register
class Gemma3Adapter(Gemma2Adapter):
    """Gemma 3 (text): Gemma2's scale, windows and norms, with an RMSNorm on each query and key head (q_norm, k_norm)
    before the rotation; local and global layers get rotary tables of their own (each module's position_embeddings)."""

    architectures = ("gemma3_text",)
    # Gemma3Attention keeps config.attn_logit_softcapping as an attribute but never passes it to its attention
    # function (transformers 5.x): its scores are not capped, whatever the config says, and neither are the trace's.
    caps_scores = False
    attribution_unavailable = (
        "Gemma 3 normalises each attention output (post_attention_layernorm) before adding it to the residual "
        "stream, so its logits do not split into one term per head"
    )

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        return replace(super().variations(part, site, rec, q, k), q_norm=a.q_norm, k_norm=a.k_norm)


@register
class PhiAdapter(LlamaAdapter):
    """Phi: partial rotary (the first partial_rotary_factor * d_k dims of each head), W_O is self_attn.dense,
    optional LayerNorms on the query and key heads (qk_layernorm); attention and MLP in parallel."""

    architectures = ("phi",)
    projections = ("q_proj", "k_proj", "v_proj", "dense")

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        a = site.attention
        return replace(variations, q_norm=a.q_layernorm, k_norm=a.k_layernorm) if a.qk_layernorm else variations

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.final_layernorm


@register
class Phi3Adapter(LlamaAdapter):
    """Phi-3: one fused qkv_proj, [Q | K | V] side by side (the default split), and o_proj."""

    architectures = ("phi3",)
    projections = ("qkv_proj", "qkv_proj", "qkv_proj", "o_proj")


@register
class GptOssAdapter(LlamaAdapter):
    """gpt-oss: LLaMA's layout with a sink logit per head (self_attn.sinks) in every softmax, sliding windows on the
    layers config.layer_types calls sliding; its rotary cos/sin come as (T, d/2), one angle per pair (x_i, x_(i+d/2))."""

    architectures = ("gpt_oss",)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        cos, sin = rotary_of(rec)  # (T, d/2) each: the same angle turns x_i and x_(i+d/2)
        rotary = (torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1))  # (T, d) each, rotate_half's layout
        return replace(super().variations(part, site, rec, q, k), rotary=rotary, sinks=site.attention.sinks.detach())


@dataclass(frozen=True)
class GroupNorm:
    """DiffLlama's norm on each differential head's output: (1 - lambda_init) RMSNorm(head) over its 2 d dims."""

    norm: nn.Module
    factor: float
    formula = "(1 - lambda_init) RMSNorm(weights @ values)"

    def __call__(self, x: Tensor) -> Tensor:
        return self.factor * self.norm(x)


@torch.no_grad()
def differential_lambda(attention: nn.Module) -> Tensor:
    """DiffLlama's lambda_full of one layer: exp(lambda_q1 · lambda_k1) - exp(lambda_q2 · lambda_k2) + lambda_init."""
    a = attention
    return (torch.exp((a.lambda_q1 * a.lambda_k1).float().sum()) - torch.exp((a.lambda_q2 * a.lambda_k2).float().sum())
            + a.lambda_init)


@register
class DiffLlamaAdapter(LlamaAdapter):
    """DiffLlama: H query heads pair into H/2 differential heads (i, i + H/2); output_attentions holds the H softmax
    maps, a trace's weights their signed difference map_i - lambda map_(i+H/2) (attention.attend, differential)."""

    architectures = ("diffllama",)
    weights_unavailable = (
        "a differential head subtracts two softmax maps, each from its own query and key heads, and its output passes "
        "a norm before W_O: one head has two W_QK and no single W_OV"
    )

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        norm = GroupNorm(a.groupnorm, 1.0 - a.lambda_init)
        return replace(super().variations(part, site, rec, q, k), differential=differential_lambda(a), head_norm=norm)

    def head_attentions(self, attentions: Sequence[Tensor], part: str) -> tuple[Tensor, ...]:
        out = []
        for layer, maps in enumerate(attentions):  # (B, 2H, T, S): head i pairs maps i and i + H
            first, second = maps.float().chunk(2, dim=1)
            out.append(first - differential_lambda(self.site(part, layer).attention) * second)  # (B, H, T, S)
        return tuple(out)

    def trace_heads(self, maps: int) -> int:
        return maps // 2
