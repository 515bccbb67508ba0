"""Head-diversity regularisation: the disagreement regulariser of Li et al. 2018 ("Multi-Head Attention with
Disagreement Regularization", EMNLP), added to the task loss as a penalty on how alike the heads are.

    outputs  S = mean over pairs i < j, batch and positions t of  cos(o_i[t], o_j[t])      (head outputs, d_v wide)
    maps     S = mean over pairs i < j, batch and queries t of  sum_s A_i[t, s] A_j[t, s]  (attention maps' overlap)
    loss     = task loss + diversity * S
Li et al. maximise the disagreement D = -S; with one head there is no pair and S = 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention import AttentionTensors

DIVERSITY_KINDS = ("outputs", "maps")


def _pairs(H: int) -> tuple[Tensor, Tensor]:
    return torch.triu_indices(H, H, offset=1).unbind(0)  # (P,), (P,) with i < j


def output_similarity(head_outputs: Tensor) -> Tensor:
    """head_outputs (..., H, T, d_v) -> mean pairwise cosine similarity of the heads' outputs at each position."""
    H = head_outputs.shape[-3]
    if H < 2:
        return head_outputs.new_zeros(())
    o = F.normalize(head_outputs, dim=-1, eps=1e-8)  # (..., H, T, d_v); a zero output (a head switched off) stays 0
    i, j = _pairs(H)
    return (o[..., i, :, :] * o[..., j, :, :]).sum(-1).mean()  # over pairs, batch and positions


def map_overlap(weights: Tensor) -> Tensor:
    """weights (..., H, T, S) -> mean pairwise overlap sum_s A_i[t, s] A_j[t, s] of the heads' attention maps."""
    H = weights.shape[-3]
    if H < 2:
        return weights.new_zeros(())
    i, j = _pairs(H)
    return (weights[..., i, :, :] * weights[..., j, :, :]).sum(-1).mean()


def head_similarity(att: AttentionTensors, kind: str = "outputs") -> Tensor:
    """The similarity the regulariser penalises, of one kind (DIVERSITY_KINDS), from a layer's attention tensors."""
    if kind == "outputs":
        return output_similarity(att.head_outputs)
    if kind == "maps":
        return map_overlap(att.weights)
    raise ValueError(f"diversity kind must be one of {', '.join(DIVERSITY_KINDS)}, got {kind!r}")
