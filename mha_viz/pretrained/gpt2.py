"""GPT-2 and GPT-Neo: causal self-attention with learned absolute positions.

GPT-2:
    [Q | K | V] = x W_attn + b_attn        c_attn, a Conv1D: weight (d_model, 3*d_model), split by the default
    scores = Q K^T / sqrt(d_k) + causal mask   (also / (layer + 1) with scale_attn_by_inverse_layer_idx)
    output = concat W_proj + b_proj        c_proj, a Conv1D: weight (H*d_v, d_model) = W_O^T
GPT-Neo:
    scores = Q K^T + causal mask           no 1/sqrt(d_k) scaling; separate q/k/v_proj, out_proj
    local layers: a causal sliding window of window_size keys (the query and the window_size - 1 before it)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, register


@register
class GPT2Adapter(Adapter):
    """h[i].attn.c_attn (q, k, v side by side) and h[i].attn.c_proj."""

    architectures = ("gpt2",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].attn
        return Site(a, a.c_attn, a.c_attn, a.c_attn, a.c_proj, a.num_heads, a.num_heads, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.h[layer].ln_1

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f


@register
class GPTNeoAdapter(Adapter):
    """h[i].attn.attention.{q_proj,k_proj,v_proj,out_proj}; attention_type "global" or "local"."""

    architectures = ("gpt_neo",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].attn.attention
        return Site(a, a.q_proj, a.k_proj, a.v_proj, a.out_proj, a.num_heads, a.num_heads, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.h[layer].ln_1

    def scale(self, site: Site) -> float:
        return 1.0  # GPT-Neo does not scale its scores

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        local = site.attention.attention_type == "local"
        return replace(super().variations(part, site, rec, q, k), window=self.model.config.window_size if local else None)

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f
