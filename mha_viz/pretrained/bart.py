"""BART: encoder-decoder with learned absolute positions (added to the embeddings).

    scores = Q K^T / sqrt(d_k) + mask      encoder: bidirectional; decoder: causal;
                                           cross: Q from the decoder, K and V from the encoder output
"""

from __future__ import annotations

from .adapter import Adapter, Site


class BartAdapter(Adapter):
    """{encoder,decoder}.layers[i].self_attn and decoder.layers[i].encoder_attn, each {q,k,v,out}_proj."""

    architectures = ("bart",)
    kind = "encoder-decoder"

    def site(self, part: str, layer: int) -> Site:
        stack = self.base.encoder if part == "encoder" else self.base.decoder
        a = stack.layers[layer].encoder_attn if part == "cross" else stack.layers[layer].self_attn
        return Site(a, a.q_proj, a.k_proj, a.v_proj, a.out_proj, a.num_heads, a.num_heads, a.head_dim)
