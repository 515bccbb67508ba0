"""Text architectures without an adapter whose output projection cannot be found: the model's own weights only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from ..trace import AttentionTrace
from .adapter import Adapter, to_numpy
from .generic import probe_kind


class FallbackAdapter(Adapter):
    """Weights-only traces (output_attentions); the kind is read off the config, or else off the weights themselves."""

    knockout = False

    def __init__(self, model: nn.Module, reason: str) -> None:
        super().__init__(model)
        self.unavailable = (
            f"mha-viz has no adapter for the '{model.config.model_type}' architecture and {reason}, so it shows only "
            "the attention weights the model reports itself; queries, keys, values, scores, head outputs, the "
            "concat and W_O need an adapter that knows where this architecture keeps its projections."
        )
        self.kind = probe_kind(self)

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
