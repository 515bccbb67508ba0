"""BART and OPT: learned absolute positions (added to the embeddings), plain scaled dot-product attention.

    scores = Q K^T / sqrt(d_k) + mask      BART encoder: bidirectional; decoder: causal;
                                           cross: Q from the decoder, K and V from the encoder output
OPT is a decoder-only model with the same attention module (OPT scales Q before Q K^T: the same scores).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .adapter import Adapter, Site, register


@register
class BartAdapter(Adapter):
    """{encoder,decoder}.layers[i].self_attn and decoder.layers[i].encoder_attn, each {q,k,v,out}_proj."""

    architectures = ("bart",)
    kind = "encoder-decoder"

    def site(self, part: str, layer: int) -> Site:
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        a = stack.layers[layer].encoder_attn if part == "cross" else stack.layers[layer].self_attn
        return Site(a, a.q_proj, a.k_proj, a.v_proj, a.out_proj, a.num_heads, a.num_heads, a.head_dim)


@register
class OPTAdapter(Adapter):
    """decoder.layers[i].self_attn.{q,k,v,out}_proj."""

    architectures = ("opt",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.decoder.layers[layer].self_attn
        return Site(a, a.q_proj, a.k_proj, a.v_proj, a.out_proj, a.num_heads, a.num_heads, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module | None:
        """self_attn_layer_norm, before the attention where do_layer_norm_before (OPT-350m normalises after)."""
        return self.base.decoder.layers[layer].self_attn_layer_norm if self.model.config.do_layer_norm_before else None

    @property
    def attribution_unavailable(self) -> str | None:
        cfg = self.model.config
        if not cfg.do_layer_norm_before:
            return "this OPT normalises after each block (do_layer_norm_before=False), so no final norm is linear"
        if self.base.decoder.project_out is not None:
            return "this OPT projects the final hidden state (project_out) before its LM head"
        return None

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.decoder.layers, self.base.decoder.final_layer_norm
