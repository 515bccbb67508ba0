"""Which adapter opens up which architecture (config.model_type); any other text model goes the generic way."""

from __future__ import annotations

from torch import nn

from .adapter import Adapter
from .bart import BartAdapter, OPTAdapter
from .bert import AlbertAdapter, BertAdapter, DistilBertAdapter, RobertaAdapter
from .bloom import BloomAdapter, FalconAdapter
from .deberta import DebertaV2Adapter
from .fallback import FallbackAdapter
from .generic import GenericAdapter
from .gpt2 import GPT2Adapter, GPTNeoAdapter
from .llama import Gemma2Adapter, GemmaAdapter, LlamaAdapter, Phi3Adapter, PhiAdapter, Qwen3Adapter
from .modernbert import ModernBertAdapter
from .neox import GPTNeoXAdapter
from .t5 import T5Adapter

ADAPTERS: dict[str, type[Adapter]] = {
    model_type: cls
    for cls in (
        BertAdapter, RobertaAdapter, DistilBertAdapter, AlbertAdapter, DebertaV2Adapter, ModernBertAdapter,
        GPT2Adapter, GPTNeoAdapter, GPTNeoXAdapter, OPTAdapter, BloomAdapter, FalconAdapter,
        LlamaAdapter, Qwen3Adapter, GemmaAdapter, Gemma2Adapter, PhiAdapter, Phi3Adapter,
        T5Adapter, BartAdapter,
    )
    for model_type in cls.architectures
}  # fmt: skip


def adapter_for(model: nn.Module) -> Adapter:
    """The adapter for this model's architecture; else the generic one (concat, head outputs, W_O, output) where
    the output projections can be found, else weights only."""
    cls = ADAPTERS.get(model.config.model_type)
    if cls is not None:
        return cls(model)
    generic = GenericAdapter.probe(model)
    return FallbackAdapter(model, generic) if isinstance(generic, str) else generic
