"""Which adapter opens up which architecture (config.model_type); any other text model goes the generic way.

Each adapter module registers its adapters with @register (mha_viz.pretrained.adapter); a module is registered by
being imported on the line below: a new architecture's module is one more name there (CONTRIBUTING.md).
"""

from __future__ import annotations

from torch import nn

# Importing a module registers its adapters (@register): a new architecture's module is one more name here.
from . import (  # noqa: F401
    bart,
    bert,
    bloom,
    cohere,
    deberta,
    deepseek,
    falcon_h1,
    gemma3n,
    gpt2,
    gpt_bigcode,
    kimi_linear,
    lfm2,
    llama,
    llama4,
    mamba,
    mamba2,
    minimax,
    modernbert,
    neox,
    olmo,
    olmo_hybrid,
    qwen3_next,
    t5,
)
from .adapter import ADAPTERS, Adapter
from .fallback import FallbackAdapter
from .generic import GenericAdapter

__all__ = ["ADAPTERS", "adapter_for"]


def adapter_for(model: nn.Module) -> Adapter:
    """The adapter for this model's architecture; else the generic one (concat, head outputs, W_O, output) where
    the output projections can be found, else weights only."""
    cls = ADAPTERS.get(model.config.model_type)
    if cls is not None:
        return cls(model)
    generic = GenericAdapter.probe(model)
    return FallbackAdapter(model, generic) if isinstance(generic, str) else generic
