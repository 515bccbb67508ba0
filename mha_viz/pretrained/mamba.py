"""Mamba-1 (Mamba, Falcon Mamba) and Jamba, which puts its mixer between LLaMA-style attention layers: selective
state space layers traced as exact mixing matrices, one per channel.

Per layer, channel c of the mixer's d_inner (a 'head' of width 1: Mamba-1 has no heads):
    [x | z] = x W_in,   x = SiLU(causal_conv1d(x))                                    (T, d_inner) each
    [dt | B | C] = x W_x;   Falcon Mamba and Jamba: dt, B, C = RMSNorm(dt), RMSNorm(B), RMSNorm(C)
    dt = softplus(dt W_dt + b_dt) (T, d_inner),   A = -exp(A_log) (d_inner, N)
    mixed_c = M_c @ x_c    M_c = mha_viz.mixers.SelectiveScan(C, B, dt, A, D)          (D x_c on the diagonal)
    head outputs = mixed * SiLU(z);  then out_proj
Jamba: layers[i].mamba (the same mixer) or layers[i].self_attn (LLaMA's projections, no positions), by
config.layers_block_type; input_layernorm before either.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from ..mixers import SelectiveScan
from .adapter import Site, register
from .llama import LlamaAdapter
from .mixing import MixerAdapter, Mixing
from .qwen3_next import causal_conv


@register
class MambaAdapter(MixerAdapter):
    """layers[i].mixer (MambaMixer, FalconMambaMixer) in every layer; the final norm is norm_f."""

    architectures = ("mamba", "falcon_mamba")
    kind = "decoder"
    weights_unavailable = ("a Mamba channel has no W_Q K^T: its mixing matrix depends on the whole sequence (step "
                           "sizes, decays and C . B), and each channel is a 'head' of width 1 gated by SiLU(z)")

    def mixer(self, layer: int) -> nn.Module | None:
        return self.base.layers[layer].mixer

    def kind_of(self, module: nn.Module) -> str:
        return "ssm"

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        channels = module.intermediate_size
        return Site(module, None, None, None, module.out_proj, channels, channels, 1)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].norm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.norm_f

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        m, N = module, module.ssm_state_size
        xs, z = m.in_proj(x).float().chunk(2, dim=-1)  # (T, d_inner) each
        xs = causal_conv(m.conv1d, xs, m.activation)  # (T, d_inner)
        dt, B, C = m.x_proj(xs).split([m.time_step_rank, N, N], dim=-1)  # (T, r), (T, N), (T, N)
        if hasattr(m, "dt_layernorm"):  # Falcon Mamba, Jamba
            dt, B, C = m.dt_layernorm(dt), m.b_layernorm(B), m.c_layernorm(C)
        dt = F.softplus(dt.float() @ m.dt_proj.weight.float().T + m.dt_proj.bias.float()).T  # (d_inner, T)
        A = -m.A_log.float().exp()  # (d_inner, N)
        gate = F.silu(z).T[..., None]  # (d_inner, T, 1)
        return Mixing(
            name="Mamba",
            kind="ssm",
            factors=SelectiveScan(C.float(), B.float(), dt, A, m.D.float()),  # M (d_inner, T, T)
            values=xs.T[..., None],  # (d_inner, T, 1): each channel's x
            finish=lambda mixed: mixed * gate,
            finish_formula="(M @ x) * SiLU(z), per channel, z = x W_z",
            arrays={"decay": (A.amax(-1, keepdim=True) * dt).exp(), "dt": dt},  # the slowest state dim's decay
            no_scores=("a Mamba channel has no softmax scores: its weights are the exact mixing matrix of its state "
                       "space, the sum over state dims of C_t[n] B_s[n] times that dim's decay from s to t, times "
                       "dt_s, plus D on the diagonal (signed); one matrix per channel"),
        )


@register
class JambaAdapter(MambaAdapter, LlamaAdapter):
    """Jamba: Mamba mixers (layers[i].mamba) between attention layers without positions (layers[i].self_attn);
    input_layernorm before either, final_layernorm at the end."""

    architectures = ("jamba",)

    def mixer(self, layer: int) -> nn.Module | None:
        return getattr(self.base.layers[layer], "mamba", None)

    def attention_site(self, layer: int) -> Site:
        return LlamaAdapter.site(self, "decoder", layer)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].input_layernorm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.final_layernorm
