"""Falcon-H1: every block runs softmax attention and a Mamba-2 mixer side by side on the same normed input and adds
their outputs. mha-viz traces the two halves as two layers: layer 2i is block i's attention, layer 2i + 1 its Mamba-2
mixer (trace.meta["block"], ["half"]).

    x_n = input_layernorm(x)
    attention:  q, k, v = (a_in x_n) W_Q, (a_in x_n) W_K * key_multiplier, (a_in x_n) W_V;  RoPE;  softmax;  o_proj
    Mamba-2:    [z | xBC | dt] = ((s_in x_n) W_in) * mup_vector (a multiplier per section), then Mamba-2's SSD;
                head outputs = RMSNorm_groups(M @ x * SiLU(z)) (config.mamba_rms_norm) or (M @ x) * SiLU(z);  out_proj
    x = x + a_out * attention + s_out * Mamba-2;  then the MLP
a_in, a_out, s_in, s_out are config.attention_in/out_multiplier and ssm_in/out_multiplier (muP). Each trace's output is
its projection's own, before a_out or s_out (trace.meta["multiplier"]).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, per_head, register, rotary_of
from .llama import LlamaAdapter
from .mamba2 import Mamba2Adapter


@register
class FalconH1Adapter(Mamba2Adapter, LlamaAdapter):
    """layers[i].self_attn and layers[i].mamba, both read through layers[i].input_layernorm: traced layers 2i and
    2i + 1."""

    architectures = ("falcon_h1",)
    weights_unavailable = ("Falcon-H1's Mamba-2 heads have no W_Q K^T (their mixing matrix depends on the whole "
                           "sequence), and its attention reads the normed stream scaled by attention_in_multiplier")

    @property
    def blocks(self) -> Sequence[nn.Module]:
        return [block for block in self.base.layers for _ in range(2)]  # (attention, Mamba-2) of each block

    def block_meta(self, layer: int) -> dict[str, Any]:
        cfg = self.model.config
        half, multiplier = (("Mamba-2", cfg.ssm_out_multiplier) if layer % 2
                            else ("attention", cfg.attention_out_multiplier))
        return {"block": layer // 2, "half": half, "multiplier": multiplier}

    def residual_scale(self, layer: int) -> float:
        return float(self.block_meta(layer)["multiplier"])  # a_out on the attention half, s_out on the Mamba-2 half

    def attention_in_scale(self, layer: int) -> float:
        return float(self.model.config.attention_in_multiplier)

    def logit_scale(self) -> float:
        return float(self.model.config.lm_head_multiplier)

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.blocks, self.base.final_layernorm

    def mixer(self, layer: int) -> nn.Module | None:
        return self.base.layers[layer // 2].mamba if layer % 2 else None

    def attention_site(self, layer: int) -> Site:
        return self.attention_site_of(self.base.layers[layer // 2].self_attn)

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        site = super().mixer_site(layer, module)
        return site if module.mamba_rms_norm else replace(site, core=None)  # no norm: the kernel feeds out_proj

    def scale(self, site: Site) -> float:
        return float(site.attention.scaling * site.attention.key_multiplier)  # the key multiplier, moved onto Q K^T

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        return replace(Adapter.variations(self, part, site, rec, q, k), rotary=rotary_of(rec))

    def projected(self, module: nn.Module, x: Tensor) -> Tensor:
        m = module
        return m.in_proj(x * m.ssm_in_multiplier) * m.mup_vector[0, 0]  # (T, .)

    def finish(self, module: nn.Module, z: Tensor) -> Callable[[Tensor], Tensor]:
        if module.mamba_rms_norm:
            return super().finish(module, z)
        return lambda mixed: per_head(mixed.transpose(0, 1).flatten(1) * F.silu(z.float()), mixed.shape[0])

    def finish_formula(self, module: nn.Module) -> str:
        return super().finish_formula(module) if module.mamba_rms_norm else "(M @ x) * SiLU(z), z = x W_z"

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer // 2].input_layernorm
