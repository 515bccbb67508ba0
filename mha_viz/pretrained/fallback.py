"""Text architectures without an adapter whose output projection cannot be found: the model's own weights only."""

from __future__ import annotations

from torch import nn

from ..trace import AttentionTrace
from .adapter import Adapter, TraceRequest, to_numpy
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

    def traces(self, request: TraceRequest) -> list[AttentionTrace]:
        if request.head_mask is not None:
            raise ValueError(f"head_mask cannot be applied: {self.unavailable}")
        attentions = self.recorded(request, [])  # one (1, H, T, S) per layer
        return [
            AttentionTrace(
                query_tokens=request.query_tokens,
                key_tokens=request.key_tokens,
                weights=to_numpy(attentions[layer][0]),
                causal=self.causal(request.part),
                cross=request.part == "cross",
                meta={**request.layer_meta(layer), "unavailable": self.unavailable},
            )
            for layer in request.layers
        ]
