"""The configurable layer's attention variants: one module each, each registering its VariantSpec (spec.py).

    mha     multi-head attention (plain.py)                     gqa     kv_heads < h key/value heads, 1: MQA (plain.py)
    mla     multi-head latent attention (latent.py)             window  sliding window, sink logits or tokens (window.py)
    diff    differential attention (differential.py)            moh     mixture-of-heads (mixture.py)

A variant layer is built from the layer's MHAConfig and a LayerVariant (its kind and parameters) by variant_layer().
Every layer has .config, .attend(x, context=None, *, causal=False, head_mask=None) -> AttentionTensors
(differentiable, as training uses it) and __call__(x, context=None, *, causal=False, query_tokens=None,
key_tokens=None) -> AttentionTrace. Every one computes its heads with the one attention core,
mha_viz.attention.attend.

Adding a variant is one module that defines its layer and ends with `register(VariantSpec(...))` (CONTRIBUTING.md,
"Add an attention variant"), and its name in the import line below, which sets the menus' order.
"""

# Importing a variant's module registers its spec: add a variant's module name here.
from . import plain, latent, window, differential, mixture  # noqa: F401, I001
from .base import (
    COLOURS,
    KINDS,
    LAYERS,
    LEGENDS,
    NAMES,
    PARAMETERS,
    SINK_TOKENS,
    LayerVariant,
    describe,
    variant_layer,
)
from ..names import SINK_KINDS as SINKS  # no sink; a learned sink logit per head (gpt-oss); the first SINK_TOKENS
from .spec import VARIANTS, Control, Training, VariantSpec, register, spec_of, unregister

__all__ = ["COLOURS", "KINDS", "LAYERS", "LEGENDS", "NAMES", "PARAMETERS", "SINKS", "SINK_TOKENS", "VARIANTS",
           "Control", "LayerVariant", "Training", "VariantSpec", "describe", "register", "spec_of", "unregister",
           "variant_layer"]
