"""BART and OPT: learned absolute positions (added to the embeddings), plain scaled dot-product attention.

    scores = Q K^T / sqrt(d_k) + mask      BART encoder: bidirectional; decoder: causal;
                                           cross: Q from the decoder, K and V from the encoder output
OPT is a decoder-only model with the same attention module (OPT scales Q before Q K^T: the same scores).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .adapter import Adapter, Site, register
from .stacks import StackLayout, Sublayer


@register
class BartAdapter(Adapter):
    """{encoder,decoder}.layers[i].self_attn and decoder.layers[i].encoder_attn, each {q,k,v,out}_proj."""

    architectures = ("bart",)
    kind = "encoder-decoder"

    def site(self, part: str, layer: int) -> Site:
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        a = stack.layers[layer].encoder_attn if part == "cross" else stack.layers[layer].self_attn
        return Site(a, a.q_proj, a.k_proj, a.v_proj, a.out_proj, a.num_heads, a.num_heads, a.head_dim)

    def stack_layout(self, part: str) -> StackLayout:
        """Post-norm: each layer's self-attention (the decoder's: then its cross-attention) and MLP (fc1 ... fc2) add
        to the stream, each followed by its LayerNorm; the embeddings (tokens times embed_scale plus learned positions)
        by layernorm_embedding; no norm on the stack's output."""
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        layers = []
        for i, layer in enumerate(stack.layers):
            norm = layer.self_attn_layer_norm
            steps = [Sublayer("self", self.site(part, i), (layer, "in"), (norm, "in"), norm)]
            if part == "decoder":
                norm = layer.encoder_attn_layer_norm
                steps.append(Sublayer("cross", self.site("cross", i), (layer.encoder_attn, "in"), (norm, "in"), norm))
            norm = layer.final_layer_norm
            steps.append(Sublayer("MLP", None, (layer.fc1, "in"), (norm, "in"), norm))
            layers.append(tuple(steps))
        norm = stack.layernorm_embedding
        return StackLayout(stack.embed_tokens, (norm, "in"), norm, tuple(layers), None)


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
