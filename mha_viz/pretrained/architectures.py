"""Which adapter opens up which architecture (config.model_type)."""

from __future__ import annotations

from torch import nn

from .adapter import Adapter
from .bart import BartAdapter
from .bert import BertAdapter, DistilBertAdapter, RobertaAdapter
from .fallback import FallbackAdapter
from .gpt2 import GPT2Adapter
from .llama import LlamaAdapter
from .t5 import T5Adapter

ADAPTERS: dict[str, type[Adapter]] = {
    model_type: cls
    for cls in (BertAdapter, RobertaAdapter, DistilBertAdapter, GPT2Adapter, LlamaAdapter, T5Adapter, BartAdapter)
    for model_type in cls.architectures
}


def adapter_for(model: nn.Module) -> Adapter:
    """The adapter for this model's architecture, or the weights-only fallback."""
    cls = ADAPTERS.get(model.config.model_type)
    return FallbackAdapter(model) if cls is None else cls(model)
