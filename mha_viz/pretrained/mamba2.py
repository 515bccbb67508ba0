"""Mamba-2, and hybrids of its mixer with softmax attention (Bamba, Granite 4): state space (SSD) layers traced as
exact mixing matrices.

Per layer (layers[i].mixer), head h of H reading group h // (H / n_groups):
    [z | xBC | dt] = x W_in,  [x_h | B | C] = SiLU(causal_conv1d(xBC))
    dt = clamp(softplus(dt + dt_bias), time_step_limit),  A = -exp(A_log)
    mixed_h = M_h @ x_h    M_h = mha_viz.mixers.ssd_matrix(C, B, dt, A, D)   (D x_h on the diagonal)
    head outputs = RMSNorm_groups(mixed * SiLU(z))     one norm over each group's heads; then out_proj
Bamba and Granite 4 (granitemoehybrid): layers[i].mamba (the same mixer) or layers[i].self_attn (LLaMA's attention,
Granite's scaled by its attention_multiplier, rotary or none), by config.layer_types.
Nemotron-H: one block per mixer, attention (no positions) or MLP (config.layer_types); its layers are the blocks
that mix tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..mixers import StateSpace
from .adapter import Adapter, Recorder, Site, Variations, per_head, register
from .llama import LlamaAdapter
from .mixing import MixerAdapter, Mixing
from .qwen3_next import causal_conv


@register
class Mamba2Adapter(MixerAdapter):
    """layers[i].mixer (Mamba2Mixer) in every layer; the final norm is norm_f."""

    architectures = ("mamba2",)
    kind = "decoder"
    weights_unavailable = ("a Mamba-2 head has no W_Q K^T: its mixing matrix depends on the whole sequence (step "
                           "sizes, decays and C . B), and its output passes a gated norm over its group before W_O")

    def mixer(self, layer: int) -> nn.Module | None:
        return self.base.layers[layer].mixer

    def kind_of(self, module: nn.Module) -> str:
        return "ssm"

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        m = module
        return Site(m, None, None, None, m.out_proj, m.num_heads, m.num_heads, m.head_dim, core=m.norm)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].norm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.norm_f

    def projected(self, module: nn.Module, x: Tensor) -> Tensor:
        """[z | xBC | dt] (T, .) from the mixer's input x (T, d_model): its in_proj."""
        return module.in_proj(x)

    def finish(self, module: nn.Module, z: Tensor) -> Callable[[Tensor], Tensor]:
        """What the mixer does between its kernel and out_proj, given its gate z (T, H*d): the gated group norm."""
        return partial(_gated_group_norm, module.norm, z)

    def finish_formula(self, module: nn.Module) -> str:
        return "RMSNorm over each group(M @ x * SiLU(z)), z = x W_z"

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        m = module
        H, n = m.num_heads, m.n_groups * m.ssm_state_size
        z, xBC, dt = self.projected(m, x).split([m.intermediate_size, m.conv_dim, H], dim=-1)  # (T, .)
        xs, B, C = causal_conv(m.conv1d, xBC, m.activation).split([m.intermediate_size, n, n], dim=-1)
        B, C = (per_head(t.float(), m.n_groups) for t in (B, C))  # (G, T, N): head h reads group h // (H / G)
        dt = torch.clamp(F.softplus(dt.float() + m.dt_bias), *m.time_step_limit).T  # (H, T)
        A = -m.A_log.float().exp()  # (H,)
        return Mixing(
            name="Mamba-2",
            kind="ssm",
            factors=StateSpace(C, B, dt, A, m.D.float()),  # M (H, T, T)
            values=per_head(xs.float(), H),  # (H, T, d_head)
            finish=self.finish(m, z),
            finish_formula=self.finish_formula(m),
            arrays={"decay": (A[:, None] * dt).exp(), "dt": dt},
            no_scores=("a Mamba-2 head has no softmax scores: its weights are the exact mixing matrix of its state "
                       "space, (C_t . B_s) times the decay from s to t times dt_s, plus D on the diagonal (signed)"),
        )


@register
class MambaHybridAdapter(Mamba2Adapter, LlamaAdapter):
    """Bamba and Granite 4: Mamba-2 mixers (layers[i].mamba) between LLaMA-style attention layers (layers[i].self_attn);
    input_layernorm before either."""

    architectures = ("bamba", "granitemoehybrid")

    def residual_scale(self, layer: int) -> float:
        return float(getattr(self.model.config, "residual_multiplier", 1.0) or 1.0)  # Granite 4's; Bamba has none

    def logit_scale(self) -> float:
        return 1.0 / float(getattr(self.model.config, "logits_scaling", 1.0) or 1.0)

    def mixer(self, layer: int) -> nn.Module | None:
        return getattr(self.base.layers[layer], "mamba", None)

    def attention_site(self, layer: int) -> Site:
        return LlamaAdapter.site(self, "decoder", layer)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].input_layernorm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, getattr(self.base, "final_layernorm", None) or self.base.norm


@register
class NemotronHAdapter(Mamba2Adapter, LlamaAdapter):
    """Nemotron-H: blocks of one kind each (config.layer_types): Mamba-2 mixers, softmax attention without positions,
    MLPs, mixtures of experts; each reads the residual stream through its own norm. mha-viz's layers are the blocks that
    mix tokens (the MLP and MoE blocks between them are not layers of their own here)."""

    architectures = ("nemotron_h",)
    mixes = ("linear_attention", "full_attention")  # the block types that mix tokens: Mamba-2, attention

    @property
    def blocks(self) -> Sequence[nn.Module]:
        return [b for b in self.base.layers if b.block_type in self.mixes]

    @property
    def attribution_unavailable(self) -> str | None:  # type: ignore[override]
        if self.base.layers[0].block_type in self.mixes:
            return None  # each MLP or expert block joins the MLP term of the layer before it
        return ("this Nemotron-H starts with an MLP block, before any layer mha-viz traces: its embeddings term would "
                "hold that block's output")

    def mixer(self, layer: int) -> nn.Module | None:
        block = self.blocks[layer]
        return block.mixer if block.block_type == "linear_attention" else None

    def attention_site(self, layer: int) -> Site:
        return self.attention_site_of(self.blocks[layer].mixer)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        return Adapter.variations(self, part, site, rec, q, k)  # no positions and no window

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.blocks[layer].norm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.blocks, self.base.norm_f  # the MLP and expert blocks after a layer join its MLP term


def _gated_group_norm(norm: nn.Module, z: Tensor, mixed: Tensor) -> Tensor:
    """Mamba-2's gated norm over all heads at once: mixed (H, T, d), z (T, H*d) -> (H, T, d)."""
    H = mixed.shape[0]
    return per_head(norm(mixed.transpose(0, 1).flatten(1), z).float(), H)
