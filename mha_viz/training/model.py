"""A one-layer attention model: embeddings, our MultiHeadAttention, a linear readout per relation.

    x = E_tok[tokens] + E_pos[:T]                  (B, T, d_model)
    a = MultiHead(x), causal                        (B, T, d_model)
    logits[:, :, r] = a W_r^T + b_r                 (B, T, R, V)
No residual connection and no MLP: the readout sees only what the heads fetched. The attention layer is the layer
of a LayerVariant (mha_viz.variants; default: multi-head attention), built by variant_layer.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from ..attention import AttentionTensors
from ..config import MHAConfig
from ..trace import AttentionTrace
from ..variants import LayerVariant, variant_layer


class TinyAttentionModel(nn.Module):
    def __init__(
        self, vocab_size: int, seq_len: int, d_model: int, num_heads: int, num_outputs: int, *, seed: int,
        variant: LayerVariant | None = None,
    ) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):  # seeded init that leaves the global RNG alone
            torch.manual_seed(seed)
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(seq_len, d_model)
            self.readout = nn.Linear(d_model, num_outputs * vocab_size)
        self.variant = variant or LayerVariant()
        self.attention = variant_layer(MHAConfig(d_model, num_heads), self.variant, seed=seed)
        self.num_outputs, self.vocab_size = num_outputs, vocab_size

    def embed(self, tokens: Tensor) -> Tensor:
        return self.tok_emb(tokens) + self.pos_emb.weight[: tokens.shape[-1]]  # (B, T, d_model)

    def forward(self, tokens: Tensor) -> tuple[Tensor, AttentionTensors]:
        """tokens (B, T) -> logits (B, T, R, V) and the attention intermediates."""
        att = self.attention.attend(self.embed(tokens), causal=True)
        logits = self.readout(att.output)  # (B, T, R*V)
        return logits.unflatten(-1, (self.num_outputs, self.vocab_size)), att  # (B, T, R, V)

    @torch.no_grad()
    def trace(self, tokens: Tensor, names: tuple[str, ...], meta: dict[str, object]) -> AttentionTrace:
        """The attention layer's AttentionTrace on one sequence tokens (T,), with meta attached.

        The layer's forward copies its weights into the trace, so later optimiser steps leave it alone.
        """
        x = self.embed(tokens)  # (T, d_model)
        trace = self.attention(x, causal=True, query_tokens=names)
        # the layer's own meta wins (MLA's meta["kv_latent"] is the latent itself, not the parameter of that name)
        return replace(trace, meta={**meta, **trace.meta, "model": "trained"})
