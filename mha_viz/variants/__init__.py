"""The configurable layer's attention variants: one module each, registered here by kind.

    mha     multi-head attention: MultiHeadAttention            gqa     kv_heads < h key/value heads, 1: MQA
    mla     multi-head latent attention (latent.py)             window  sliding window, sink logits or tokens (window.py)
    diff    differential attention (differential.py)            moh     mixture-of-heads (mixture.py)

A variant layer is built from the layer's MHAConfig and a LayerVariant (its own parameters) by variant_layer(). Every
layer has .config, .attend(x, context=None, *, causal=False, head_mask=None) -> AttentionTensors (differentiable, as
training uses it) and __call__(x, context=None, *, causal=False, query_tokens=None, key_tokens=None) -> AttentionTrace
(meta["variant"] names its kind). Every one computes its heads with the one attention core, mha_viz.attention.attend.

Adding a variant is one module that defines its layer and one line `register_layer("kind", Class, describe)` in it
(mha_viz.variants.base holds LayerVariant and the registry), and its name in the import line below.
"""

# Importing a variant's module registers its layer: add a variant's module name here.
from . import differential, latent, mixture, window  # noqa: F401
from .base import (
    DESCRIPTIONS,
    KINDS,
    LAYERS,
    MAX_WIDTH,
    NAMES,
    PARAMETERS,
    SINK_TOKENS,
    SINKS,
    LayerVariant,
    describe,
    register_layer,
    variant_layer,
)

__all__ = ["DESCRIPTIONS", "KINDS", "LAYERS", "MAX_WIDTH", "NAMES", "PARAMETERS", "SINKS", "SINK_TOKENS", "LayerVariant",
           "describe", "register_layer", "variant_layer"]
