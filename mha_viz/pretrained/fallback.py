"""Architectures without an adapter: only the weights the model itself reports (output_attentions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from ..trace import AttentionTrace
from .adapter import Adapter, to_numpy


class FallbackAdapter(Adapter):
    """Weights-only traces; the kind is read off the config, or else off the weights themselves."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.unavailable = (
            f"mha-viz has no adapter for the '{model.config.model_type}' architecture, so it shows only the "
            "attention weights the model reports itself; queries, keys, values, scores, head outputs, the "
            "concat and W_O need an adapter that knows where this architecture keeps its projections."
        )
        self.kind = "encoder-decoder" if model.config.is_encoder_decoder else self._probe_kind()

    def _probe_kind(self) -> str:
        """'decoder' if no token ever attends to a later one (a causal model), else 'encoder'."""
        self.kind = "encoder"  # run the probe as a single stack
        attentions = self.model_attentions(self.forward(range(1, 6)), "encoder")
        causal = all(bool((a[0].triu(1) == 0).all()) for a in attentions)
        return "decoder" if causal else "encoder"

    def traces(
        self,
        part: str,
        layers: Sequence[int],
        *,
        ids: Sequence[int],
        decoder_ids: Sequence[int] | None,
        query_tokens: Sequence[str],
        key_tokens: Sequence[str],
        head_mask: Tensor | None,
        meta: dict[str, Any],
    ) -> list[AttentionTrace]:
        if head_mask is not None:
            raise ValueError(f"head_mask cannot be applied: {self.unavailable}")
        attentions = self.model_attentions(self.forward(ids, decoder_ids), part)  # one (1, H, T, S) per layer
        return [
            AttentionTrace(
                query_tokens=tuple(query_tokens),
                key_tokens=tuple(key_tokens),
                weights=to_numpy(attentions[layer][0]),
                causal=self.causal(part),
                cross=part == "cross",
                meta={**meta, "layer": layer, "unavailable": self.unavailable},
            )
            for layer in layers
        ]
