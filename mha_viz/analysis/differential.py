"""Differential attention cancels common-mode attention: how much of each head's two maps is the same.

A differential head's weights are map_1 - lambda map_2 (mha_viz.variants.differential; real DiffLlama traces alike).
Where both maps put mass on the same key, the subtraction removes it, as a differential amplifier removes the signal
common to its two inputs. Per query row t:

    common_t    = sum_j min(map_1[t, j], lambda map_2[t, j])     the mass both maps give the same keys (cancelled)
    kept_t      = sum_j max(weights[t, j], 0) = 1 - common_t     what map_1 keeps after the subtraction
    negative_t  = sum_j max(-weights[t, j], 0) = lambda - common_t     where lambda map_2 is larger
(lambda <= 0 subtracts nothing: common = 0.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..config import MHAConfig
from ..trace import AttentionTrace


@dataclass(frozen=True)
class CommonMode:
    """Per differential head h (means over query rows), and per key (the mean over rows of what cancels there)."""

    lambdas: np.ndarray  # [H]
    common: np.ndarray  # [H] mass both maps give the same keys: removed by the subtraction
    kept: np.ndarray  # [H] positive weight left (1 - common)
    negative: np.ndarray  # [H] negative weight (lambda - common)
    common_keys: np.ndarray  # [H, S] per key: mean over query rows of min(map_1, lambda map_2)
    map1_keys: np.ndarray  # [H, S] per key: mean over query rows of map_1
    weight_keys: np.ndarray  # [H, S] per key: mean over query rows of map_1 - lambda map_2


def common_mode(trace: AttentionTrace) -> CommonMode:
    """What the subtraction cancels in each differential head of a trace (ValueError for one without two maps)."""
    if trace.maps is None or trace.lambdas is None:
        raise ValueError("this trace is not differential attention: it has no second softmax map to subtract")
    m1, m2 = (np.nan_to_num(m.astype(np.float64)) for m in trace.maps)  # (H, T, S) each
    lam = trace.lambdas.astype(np.float64)[:, None, None]  # (H, 1, 1)
    both = np.minimum(m1, np.maximum(lam, 0.0) * m2)  # (H, T, S)
    weights = m1 - lam * m2  # (H, T, S)
    return CommonMode(
        lambdas=trace.lambdas.astype(np.float64),
        common=both.sum(-1).mean(-1),
        kept=np.clip(weights, 0, None).sum(-1).mean(-1),
        negative=np.clip(-weights, 0, None).sum(-1).mean(-1),
        common_keys=both.mean(1),
        map1_keys=m1.mean(1),
        weight_keys=weights.mean(1),
    )


def first_token_demo(tokens: int = 6, lam: float = 0.8, sink: float = 0.8) -> AttentionTrace:
    """A one-head differential layer (h = 2) whose two maps share a component: every query puts `sink` of map 1 on
    the first token and the rest on the last token (the "signal"); map 2 puts all of it on the first token. With
    lambda = `lam` = `sink`, map_1 - lambda map_2 leaves the signal and removes the first token's share.

    Built by hand (one-hot embeddings: first token, last token, a constant) and computed by the variant's layer."""
    from ..variants import LayerVariant, variant_layer

    if tokens < 3:
        raise ValueError(f"the demonstration needs at least 3 tokens (first, middle, last), got {tokens}")
    if not 0 < sink < 1 or not 0 < lam < 1.5:
        raise ValueError(f"sink must be in (0, 1) and lambda in (0, 1.5), got {sink}, {lam}")
    cfg = MHAConfig(4, 2, d_k=2, d_v=2, bias=False)
    layer = variant_layer(cfg, LayerVariant("diff"), seed=0)
    big = 40.0  # the first token's score: the other keys' exp(0) are negligible beside it
    x = torch.zeros(tokens, 4)
    x[:, 2] = 1.0  # a constant: every query is the same
    x[0, 0] = x[-1, 1] = 1.0  # the first token, the last token
    with torch.no_grad():
        for p in (layer.W_Q, layer.W_K, layer.W_V, layer.W_O, layer.lambda_q2, layer.lambda_k2, layer.lambda_q1,
                  layer.lambda_k1):
            p.zero_()
        s = math.sqrt(cfg.d_k)  # undo 1 / sqrt(d_k)
        layer.W_Q[:, 2, 0] = 1.0  # both heads' queries: (1, 0)
        layer.W_K[0, 0, 0] = big * s  # map 1: the first token scores big, the last big + log(rest / sink)
        layer.W_K[0, 1, 0] = (big + math.log((1 - sink) / sink)) * s
        layer.W_K[1, 0, 0] = big * s  # map 2: only the first token
        layer.W_V[:, 3, 0] = 1.0
        layer.W_O.copy_(torch.eye(4))
        # lambda = exp(a) - exp(0) + lambda_init = lam: a = log(1 + lam - lambda_init)
        layer.lambda_q1[0] = layer.lambda_k1[0] = math.sqrt(math.log(1.0 + lam - layer.lambda_init))
    names = ["first"] + [f"t{i}" for i in range(1, tokens - 1)] + ["signal"]
    return layer(x, query_tokens=names)
