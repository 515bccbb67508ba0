"""What generation and logit attribution read of a pretrained model: a public interface (PretrainedModel has it).

Those modules take any object with these members, so they never import model.py (which imports them).
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import nn

from .adapter import Adapter
from .encoded import Encoded


class TextModel(Protocol):
    """A tokenizer and a Hugging Face model opened up by an adapter (PretrainedModel)."""

    name: str
    architecture: str  # config.model_type
    tokenizer: Any
    model: nn.Module  # the whole model (with its LM head where it has one)
    adapter: Adapter
    max_tokens: int
    num_layers: dict[str, int]

    @property
    def next_token_unavailable(self) -> str | None: ...

    def encode(self, text: str, *, decoder: bool = False) -> Encoded: ...
