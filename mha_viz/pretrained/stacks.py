"""Where one stack of an encoder-decoder (T5, BART) keeps its residual stream: the steps that add to it, for score
attribution (mha_viz.analysis.score_streams_seq2seq).

    pre-norm (T5):    x <- x + sublayer(norm(x))          the norm inside the sublayer, before the attention
    post-norm (BART): x <- norm(x + sublayer(x))          the norm after each sublayer, and after the embeddings
A tap is (module, "in" or "out"): the stream as that module receives it (its first argument, or hidden_states) or
returns it (its output, or the output's first element).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .adapter import Site

Tap = tuple[nn.Module, str]


@dataclass(frozen=True)
class Sublayer:
    """One step of a stack: self-attention, cross-attention or the MLP."""

    name: str  # "self", "cross" or "MLP"
    site: Site | None  # the attention's modules; None for the MLP
    before: Tap  # the stream before the step
    after: Tap  # the stream with the step's output added (a post-norm stack: its norm's input)
    norm: nn.Module | None = None  # post-norm: the norm after the step; None in a pre-norm stack


@dataclass(frozen=True)
class StackLayout:
    """One stack's residual stream: its token embedding, the embeddings' sum, and each layer's steps in order."""

    embed: nn.Module  # token ids -> (1, T, d), scaled as the stack scales them (BART's embed_scale)
    embeddings: Tap  # the embeddings' sum (token + learned positions), before any norm
    embeddings_norm: nn.Module | None  # post-norm: the norm after the embeddings (BART's layernorm_embedding)
    layers: tuple[tuple[Sublayer, ...], ...]  # each layer's steps: self-attention, (cross-attention,) MLP
    final_norm: nn.Module | None  # the norm on the stack's output (T5's final_layer_norm), else None

    def step(self, layer: int, name: str) -> Sublayer:
        """The step called name ("self", "cross", "MLP") of layer."""
        return next(s for s in self.layers[layer] if s.name == name)
