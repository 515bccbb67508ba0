"""Qwen3-Next and Qwen3.5 (text): three Gated DeltaNet (linear attention) layers for each gated softmax attention layer.

Softmax layers (self_attn), LLaMA's layout with two changes:
    [q | gate] = x W_Q'    per head: d_k query dims, then d_k gate dims          q_proj is 2 H d_k wide
    q, k = RMSNorm(q), RMSNorm(k) per head (weights 1 + w); partial RoPE on the first r dims
    head_h = sigmoid(gate_h) * (weights_h @ v_h)                                 the output gate, per dim
Gated DeltaNet layers (linear_attn), per value head h reading query/key head h // (H_v / H_k):
    [q k v] = SiLU(causal_conv1d(x W_qkv)),  q, k = L2norm(q) / sqrt(d_k), L2norm(k)
    b = sigmoid(x W_b),  log decay g = -exp(A_log) softplus(x W_a + dt_bias)
    mixed_h = M_h @ v_h    M_h = mha_viz.mixers.gated_delta_matrix(q, k, g, b)
    head_h = RMSNorm(mixed_h) * SiLU(z_h)      z from in_proj_qkvz; then out_proj
Qwen3.5 computes the same from four plain projections: in_proj_qkv ([q | k | v] side by side), in_proj_z, in_proj_b
and in_proj_a.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..mixers import DeltaRule
from .adapter import Recorder, Site, Variations, in_out, per_head, register
from .llama import LlamaAdapter
from .mixing import MixerAdapter, Mixing


@dataclass(frozen=True)
class OutputGate:
    """Qwen3-Next's output gate on each softmax head: sigmoid(gate) * head, per dim; gate (H, T, d_v)."""

    gate: Tensor
    formula = "sigmoid(x W_G) * (weights @ values), per dim"

    def __call__(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.gate) * x


def causal_conv(module: nn.Conv1d, x: Tensor, activation: str) -> Tensor:
    """A depthwise causal convolution then the activation, as transformers' causal_conv1d_fn: x (T, C) -> (T, C)."""
    from transformers.activations import ACT2FN

    T = x.shape[0]
    y = F.conv1d(x.T[None], module.weight, module.bias, padding=module.weight.shape[-1] - 1, groups=x.shape[1])
    return ACT2FN[activation](y[0, :, :T]).T  # (T, C)


def l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(|x|^2 + eps) over the last dim, as Qwen3-Next's (and flash-linear-attention's) kernels."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedDeltaNetMixer(MixerAdapter):
    """Gated DeltaNet layers at layers[i].linear_attn; subclasses say how the module projects (projected()), where its
    gated norm and output projection are (norm_name, out_name) and the softmax layers' site."""

    norm_name, out_name = "norm", "out_proj"

    def mixer(self, layer: int) -> nn.Module | None:
        return getattr(self.base.layers[layer], "linear_attn", None)

    def kind_of(self, module: nn.Module) -> str:
        return "linear"

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        m = module
        out, norm = getattr(m, self.out_name), getattr(m, self.norm_name)
        return Site(m, None, None, None, out, m.num_v_heads, m.num_v_heads, m.head_v_dim, core=norm)

    def projected(self, module: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """A Gated DeltaNet's projections of x (T, d_model): [q | k | v] (T, 2 H_k d_k + H_v d_v) before the
        convolution, z (T, H_v, d_v), b and a (T, H_v)."""
        raise NotImplementedError

    def beta(self, module: nn.Module, b: Tensor) -> Tensor:
        """The write strength of each head and token from b (T, H_v): sigmoid(b)."""
        return b.float().sigmoid()

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        m = module
        qkv, z, b, a = self.projected(m, x)
        mixed = causal_conv(m.conv1d, qkv, m.activation)
        q, k, v = mixed.split([m.key_dim, m.key_dim, m.value_dim], dim=-1)  # (T, H_k d_k), (T, H_k d_k), (T, H_v d_v)
        group = m.num_v_heads // m.num_k_heads
        q, k = (l2norm(per_head(t.float(), m.num_k_heads)).repeat_interleave(group, 0) for t in (q, k))  # (H_v, T, d_k)
        log_decay = (-m.A_log.float().exp() * F.softplus(a.float() + m.dt_bias)).T  # (H_v, T)
        beta = self.beta(m, b).T  # (H_v, T)
        return Mixing(
            name="Gated DeltaNet",
            kind="linear",
            factors=DeltaRule(q * m.head_k_dim**-0.5, k, log_decay, beta),  # M (H_v, T, T)
            values=per_head(v.float(), m.num_v_heads),  # (H_v, T, d_v)
            finish=partial(gated_head_norm, getattr(m, self.norm_name), z),
            finish_formula="RMSNorm(M @ values) * SiLU(z), z = x W_z",
            arrays={"decay": log_decay.exp(), "beta": beta},
            no_scores=("a Gated DeltaNet layer has no softmax scores: its weights are the exact mixing matrix of the "
                       "delta rule (signed, not a probability), drawn from its queries, keys, decays and betas"),
        )


@register
class Qwen3NextAdapter(GatedDeltaNetMixer, LlamaAdapter):
    """layers[i].linear_attn (Gated DeltaNet) or layers[i].self_attn (gated softmax attention), by
    config.layer_types."""

    architectures = ("qwen3_next",)
    norm_weight_offset = 1.0  # Qwen3NextRMSNorm multiplies by (1 + weight)
    weights_unavailable = (
        "Qwen3-Next's linear layers have no W_Q K^T: their mixing matrix depends on the whole sequence (decays and "
        "the delta rule), and its softmax heads gate their outputs by the input before W_O"
    )

    def attention_site(self, layer: int) -> Site:
        return LlamaAdapter.site(self, "decoder", layer)

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().heads(site, rec)  # q (H, T, 2 d): each head's query dims, then its gate dims
        return q[..., : site.head_dim], k, v

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention
        gate = per_head(rec.first(site.q), site.num_heads)[..., site.head_dim :].float()  # (H, T, d)
        return replace(super().variations(part, site, rec, q, k), q_norm=a.q_norm, k_norm=a.k_norm,
                       head_norm=OutputGate(gate))

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        out = super().projection_weights(site)
        d = site.head_dim
        W, b = in_out(site.q)  # (d_in, H*2d): [q_h | gate_h] per head
        out["W_Q"] = per_head(W, site.num_heads)[..., :d]  # (H, d_in, d)
        out["b_Q"] = None if b is None else per_head(b, site.num_heads)[..., :d]
        return out

    def projected(self, module: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Qwen3-Next: two fused projections, split per key head (the module's own fix_query_key_value_ordering)."""
        m = module
        query, key, value, z, b, a = (t[0] for t in m.fix_query_key_value_ordering(m.in_proj_qkvz(x[None]),
                                                                                   m.in_proj_ba(x[None])))
        T = x.shape[0]
        return torch.cat([t.reshape(T, -1) for t in (query, key, value)], -1), z.reshape(T, m.num_v_heads, -1), b, a


def gated_head_norm(norm: nn.Module, z: Tensor, mixed: Tensor) -> Tensor:
    """A gated RMSNorm on each head's output (Gated DeltaNet's norm(mixed, z), KDA's o_norm(mixed, gate)):
    mixed (H, T, d), z (T, H, d) -> (H, T, d)."""
    return norm(mixed.transpose(0, 1), z).transpose(0, 1).float()


@register
class Qwen3_5Adapter(Qwen3NextAdapter):
    """Qwen3.5's text model: Qwen3-Next's layers, its Gated DeltaNet projected by in_proj_qkv, in_proj_z, in_proj_b and
    in_proj_a."""

    architectures = ("qwen3_5_text",)

    def projected(self, module: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        m = module
        return m.in_proj_qkv(x), m.in_proj_z(x).unflatten(-1, (m.num_v_heads, -1)), m.in_proj_b(x), m.in_proj_a(x)
