"""T5: encoder-decoder with a learned relative position bias and no 1/sqrt(d_k) scaling.

    scores = Q K^T + position_bias + mask        position_bias (H, T, S) from bucketed distances j - i,
                                                 computed by layer 0 and shared by all layers
Cross-attention: Q from the decoder, K and V from the encoder output; it has no position bias.
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, register
from .stacks import StackLayout, Sublayer


@register
class T5Adapter(Adapter):
    """{encoder,decoder}.block[i].layer[0].SelfAttention and decoder.block[i].layer[1].EncDecAttention."""

    architectures = ("t5",)
    kind = "encoder-decoder"
    mask_argument = "mask"

    def site(self, part: str, layer: int) -> Site:
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        block = stack.block[layer]
        a = block.layer[1].EncDecAttention if part == "cross" else block.layer[0].SelfAttention
        return Site(a, a.q, a.k, a.v, a.o, a.n_heads, a.n_heads, a.key_value_proj_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        return stack.block[layer].layer[1 if part == "cross" else 0].layer_norm

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        if part == "cross":
            return variations
        bias = rec.result[1][0]  # the module returns the position bias it used: (H, T, S)
        return replace(variations, bias={"relative position bias": bias})

    def stack_layout(self, part: str) -> StackLayout:
        """Pre-norm: block[i].layer[j] adds its sublayer's output to the stream it receives (its layer_norm inside);
        the token embedding alone enters block 0 (no positions: the relative bias is in the scores); the stack's
        output goes through final_layer_norm."""
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        names = ("self", "MLP") if part == "encoder" else ("self", "cross", "MLP")
        layers = tuple(tuple(
            Sublayer(name, None if name == "MLP" else self.site("cross" if name == "cross" else part, i),
                     (sub, "in"), (sub, "out")) for name, sub in zip(names, block.layer, strict=True))
            for i, block in enumerate(stack.block))
        return StackLayout(stack.embed_tokens, (stack.block[0], "in"), None, layers, stack.final_layer_norm)
