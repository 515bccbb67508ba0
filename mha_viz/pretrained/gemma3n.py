"""Gemma 3n (text): Gemma 3's attention with a norm on the values too, and keys and values shared across layers.

    q = RMSNorm(x W_Q) per head, rotated;  k = RMSNorm(x W_K) per head, rotated;  v = RMS(x W_V) per head (no weight)
    scores = q k^T (scale 1: the norms set the size);  sliding windows on the local layers (config.layer_types)
    KV sharing: the last config.num_kv_shared_layers layers have no W_K or W_V. Each reads the keys and values of the
    last earlier layer of its own type (sliding or full), as that layer stored them (shared_kv_states: normed and
    rotated). The trace's keys are those, rotated back by the layer's own positions so attend() rotates them again;
    trace.meta["kv_from"] names the layer they come from.
The residual stream is AltUp's several streams, with LAuReL blocks beside attention and per-layer inputs: the
model's logits do not split into one term per head, and the final norm is not the only thing before the LM head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from torch import Tensor, nn

from ..attention import apply_rotary
from .adapter import Recorder, Site, Variations, per_head, register, rotary_of
from .llama import Gemma2Adapter, Gemma3Adapter


@register
class Gemma3nAdapter(Gemma3Adapter):
    """layers[i].self_attn: q_norm, k_norm, v_norm; a KV-shared layer (is_kv_shared_layer) has no k_proj or v_proj."""

    architectures = ("gemma3n_text",)
    norm_weight_offset = 0.0  # Gemma3nRMSNorm multiplies by its weight itself, unlike Gemma 3's (1 + weight)
    attribution_unavailable = ("Gemma 3n's residual stream is several AltUp streams mixed by learned coefficients, "
                               "with LAuReL blocks and per-layer inputs beside attention, and each attention output is "
                               "normalised before it is added: its logits do not split into one term per head")
    scores_unavailable = None  # score attribution carries every AltUp stream (analysis.score_streams_altup)
    weights_unavailable = ("Gemma 3n's values pass an RMS norm after W_V, and its last layers read keys and values "
                           "that an earlier layer computed: no W_K or W_V of their own")

    def site(self, part: str, layer: int) -> Site:
        a = self.base.layers[layer].self_attn
        H, KV = self.model.config.num_attention_heads, self.model.config.num_key_value_heads
        shared = a.is_kv_shared_layer
        return Site(a, a.q_proj, None if shared else a.k_proj, None if shared else a.v_proj, a.o_proj, H, KV,
                    a.head_dim)

    def kv_source(self, layer: int) -> int | None:
        """The layer whose keys and values this KV-shared layer reads (the last earlier one of its type), else None."""
        a = self.base.layers[layer].self_attn
        if not a.is_kv_shared_layer:
            return None
        types = self.model.config.layer_types
        first_shared = len(types) - self.model.config.num_kv_shared_layers
        return max(i for i in range(first_shared) if types[i] == types[layer])

    def block_meta(self, layer: int) -> dict[str, Any]:
        source = self.kv_source(layer)
        return {} if source is None else {"kv_from": source}

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        a = site.attention
        q = per_head(rec.first(site.q), site.num_heads)  # (H, T, d)
        if not a.is_kv_shared_layer:
            k, v = per_head(rec.first(site.k), site.num_kv_heads), per_head(rec.first(site.v), site.num_kv_heads)
            return q, k, a.v_norm(v)  # (KV, S, d) each: the values normed here, the keys by variations()
        shared = rec.arguments["shared_kv_states"]  # what the source layer stored: (1, KV, S, d) each, normed, rotated
        key = getattr(a, "kv_shared_layer_index", None)  # transformers < 5.2x keyed them by layer, later by type
        k, v = (x[0] for x in shared[a.layer_type if key is None else key])
        cos, sin = rotary_of(rec)  # (T, d) each
        back = apply_rotary(k.float(), cos.float(), -sin.float())  # the rotation by -angle undoes the model's
        return q, back, v  # attend() rotates k again (no second norm)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        a = site.attention  # a KV-shared layer has no k_norm: its keys come normed
        return replace(Gemma2Adapter.variations(self, part, site, rec, q, k), q_norm=a.q_norm,
                       k_norm=None if a.is_kv_shared_layer else a.k_norm)

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        """None each (weights_unavailable): the values' norm sits between W_V and attention, and a KV-shared layer
        has no W_K or W_V; W_Q is left out with them."""
        return dict.fromkeys(("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V"))

    def altup(self) -> nn.Module:
        return self.base

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module] | None:
        return None  # AltUp's streams, not one residual stream (attribution_unavailable)
