"""What a model's norm does to one vector, as weights: norm(x) = gamma * centre(x) / s + beta.

    LayerNorm  centre(x) = x - mean(x)   s = sqrt(var(x) + eps)     gamma = weight, beta = bias
    RMSNorm    centre(x) = x             s = sqrt(mean(x^2) + eps)  gamma = offset + weight (Gemma: 1 + weight)
RMSNorm here means LlamaRMSNorm and its copies (Mistral, Qwen, Phi-3, Gemma) and T5's LayerNorm, which is one too;
Cohere's LayerNorm (Cohere, Cohere 2) is a LayerNorm without bias.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn


class NormAffine(NamedTuple):
    kind: str  # "LayerNorm" or "RMSNorm"
    gamma: Tensor  # (d,) float64
    beta: Tensor | None  # (d,) float64, None for RMSNorm or a LayerNorm without bias
    eps: float


def norm_affine(norm: nn.Module, d: int, offset: float = 0.0) -> NormAffine:
    """The kind, gamma, beta and eps of a norm over d features. ValueError for a module that is not a known norm."""
    weight = getattr(norm, "weight", None)
    gamma = torch.ones(d, dtype=torch.float64) if weight is None else offset + weight.detach().double().cpu()  # (d,)
    if isinstance(norm, nn.LayerNorm):
        beta = None if norm.bias is None else norm.bias.detach().double().cpu()  # (d,)
        return NormAffine("LayerNorm", gamma, beta, norm.eps)
    name = type(norm).__name__
    if name in ("CohereLayerNorm", "Cohere2LayerNorm"):
        return NormAffine("LayerNorm", gamma, None, norm.variance_epsilon)
    if name.endswith("RMSNorm") or name in ("T5LayerNorm", "Llama4TextL2Norm"):  # Llama 4's: an RMSNorm, no weight
        return NormAffine("RMSNorm", gamma, None, getattr(norm, "variance_epsilon", None) or norm.eps)
    raise ValueError(f"{name} is not a norm mha-viz knows (LayerNorm or RMSNorm)")
