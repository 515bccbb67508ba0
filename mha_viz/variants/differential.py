"""Differential attention (DIFF Transformer, Ye et al. 2024; transformers' DiffLlamaAttention), kind "diff".

h query/key heads of width d_k pair into h/2 differential heads (i, i + h/2). Head i subtracts the second map:

    map_1 = softmax(Q_i K_i^T / sqrt(d_k)),   map_2 = softmax(Q_(i+h/2) K_(i+h/2)^T / sqrt(d_k))
    weights_i = map_1 - lambda map_2            signed; each row sums to 1 - lambda
    head_i = (1 - lambda_init) RMSNorm(weights_i [V_i | V_(i+h/2)])     width 2 d_v, as DiffLlama groups values
    lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init,
    lambda_init = 0.8 - 0.6 exp(-0.3 depth)     (depth 0, one layer: 0.2)

The concat [head_0 | ... | head_(h/2-1)] has width h d_v, as MHA's, and W_O is unchanged. No rotary positions: the
configurable layer's tokens carry their positions in their embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import AttentionTensors, MultiHeadAttention, Variations, check_one_input
from ..config import MHAConfig
from ..trace import AttentionTrace
from ..variants_cost import VariantShape
from .base import LayerVariant
from .spec import Control, Training, VariantSpec, register

LAMBDA_STD = 0.1  # DiffLlama's lambda_std_dev: the lambda vectors start normal(0, 0.1)
NORM_EPS = 1e-5  # DiffLlama's rms_norm_eps
HEAD_NORM = "(1 - lambda_init) RMSNorm(weights @ values)"


def lambda_init(depth: int) -> float:
    """DiffLlama's (and the DIFF Transformer's) starting lambda for the layer at this depth (0 first)."""
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


def paired_heads(W: np.ndarray, values: bool) -> np.ndarray:
    """A per-query-head projection [h, ..., d] as the h/2 differential heads' a trace holds: the first map's
    (W_Q, W_K, their biases), or the pair's [W_V_i | W_V_(i+h/2)] of width 2 d_v (values)."""
    first, second = np.split(W, 2)  # (h/2, ..., d) each
    return np.concatenate((first, second), axis=-1) if values else first


class DifferentialAttention(MultiHeadAttention):
    """The configurable layer with differential heads: h query/key/value heads (h even), h/2 differential heads.

    Parameters as MultiHeadAttention's (W_Q [h, d_model, d_k], ..., W_O [d_out, h d_v]) plus DiffLlama's four lambda
    vectors of width d_k. A trace has h/2 heads: weights [h/2, T, S] signed, maps and map_scores [2, h/2, T, S],
    lambdas [h/2] (one lambda per layer, repeated), queries/keys/scores the first map's, values [h/2, S, 2 d_v].
    """

    def __init__(self, cfg: MHAConfig, variant: LayerVariant | None = None, *, seed: int | None = None,
                 dtype: torch.dtype = torch.float32, depth: int = 0) -> None:
        if cfg.num_heads % 2:
            raise ValueError(f"differential attention pairs heads (two softmax maps a head): h must be even, "
                             f"got {cfg.num_heads}")
        if cfg.group_size != 1:
            raise ValueError("differential attention here has one key/value head per query head (kv_heads = h)")
        super().__init__(cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out,
                         d_context=cfg.d_context, bias=cfg.bias, seed=seed, dtype=dtype)
        self.lambda_init = lambda_init(depth)
        gen = torch.Generator().manual_seed(seed + 1) if seed is not None else None  # apart from W's stream
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            start = torch.randn(cfg.d_k, generator=gen, dtype=dtype) * LAMBDA_STD
            setattr(self, name, nn.Parameter(start))
        self.groupnorm = nn.RMSNorm(2 * cfg.d_v, eps=NORM_EPS, elementwise_affine=False)

    def lambda_full(self) -> Tensor:
        """lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init: one scalar for the layer."""
        return (torch.exp((self.lambda_q1 * self.lambda_k1).sum()) - torch.exp((self.lambda_q2 * self.lambda_k2).sum())
                + self.lambda_init)

    def head_norm(self, mixed: Tensor) -> Tensor:
        """(1 - lambda_init) RMSNorm over each differential head's 2 d_v dims (DiffLlama's groupnorm)."""
        return (1.0 - self.lambda_init) * self.groupnorm(mixed)

    def variations(self, x: Tensor, T: int, S: int, causal: bool) -> Variations:
        """MHA's, with the h maps paired into h/2 differential heads and each head's output normalised."""
        return replace(super().variations(x, T, S, causal), differential=self.lambda_full(), head_norm=self.head_norm)

    def attend(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
               head_mask: Tensor | None = None) -> AttentionTensors:
        """Differentiable forward pass; head_mask (h/2,) scales each differential head. queries, keys, scores hold
        all h query heads (both maps' inputs: heads i and i + h/2 of a pair); values, weights, head_outputs the h/2
        differential heads'."""
        _, _, _, a, output = self.attended(x, context, causal=causal, head_mask=head_mask)
        return AttentionTensors(a.queries, a.keys, a.values, a.scores, a.weights, a.head_outputs, a.concat, output)

    @torch.no_grad()
    def forward(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                head_mask: Tensor | None = None) -> AttentionTrace:
        """Trace one input x (T, d_model) as a real DiffLlama layer's trace is laid out (mha_viz.trace)."""
        check_one_input(x, context)
        _, _, _, a, output = self.attended(x, context, causal=causal, head_mask=head_mask)
        n, T, S = a.weights.shape
        qt, kt = _tokens(T, S, query_tokens, key_tokens, context is None)
        projections = {name: None if p is None else paired_heads(_numpy(p), values=name[-1] == "V")
                       for name, p in (("W_Q", self.W_Q), ("W_K", self.W_K), ("W_V", self.W_V), ("b_Q", self.b_Q),
                                       ("b_K", self.b_K), ("b_V", self.b_V))}
        lam = float(self.lambda_full())
        return AttentionTrace(
            query_tokens=qt,
            key_tokens=kt,
            weights=_numpy(a.weights),
            queries=_numpy(a.queries[:n]),
            keys=_numpy(a.keys[:n]),
            values=_numpy(a.values),
            scores=_numpy(a.scores[:n]),
            head_outputs=_numpy(a.head_outputs),
            concat=_numpy(a.concat),
            output=_numpy(output),
            W_O=_numpy(self.W_O),
            b_O=None if self.b_O is None else _numpy(self.b_O),
            **projections,
            scale=1.0 / math.sqrt(self.config.d_k),
            causal=causal,
            cross=context is not None,
            lambdas=np.full(n, lam, dtype=np.float32),
            maps=_numpy(a.maps.unflatten(0, (2, n))),
            map_scores=_numpy(a.scores.unflatten(0, (2, n))),
            meta={"model": "configurable", "head_norm": HEAD_NORM, "lambda_init": self.lambda_init},
        )

    @torch.no_grad()
    def map_trace(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                  query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None) -> AttentionTrace:
        """The layer's h softmax maps as h heads of a plain softmax trace, as a real DiffLlama layer's query heads:
        head i is differential head i's first map, head i + h/2 its second. weights [h, T, S] = the maps (each row
        sums to 1), queries, keys, scores, W_Q, W_K, b_Q, b_K of all h query/key heads; no values or outputs (the
        differential heads' are the layer's own trace, forward()). What score attribution splits map by map."""
        check_one_input(x, context)
        _, _, _, a, _ = self.attended(x, context, causal=causal)
        H, T, S = a.maps.shape
        qt, kt = _tokens(T, S, query_tokens, key_tokens, context is None)
        return AttentionTrace(
            query_tokens=qt, key_tokens=kt, weights=_numpy(a.maps), queries=_numpy(a.queries), keys=_numpy(a.keys),
            scores=_numpy(a.scores), W_Q=_numpy(self.W_Q), W_K=_numpy(self.W_K),
            b_Q=None if self.b_Q is None else _numpy(self.b_Q), b_K=None if self.b_K is None else _numpy(self.b_K),
            scale=1.0 / math.sqrt(self.config.d_k), causal=causal, cross=context is not None,
            meta={"model": "configurable", "unavailable": f"the {H} softmax maps of a differential layer, each a "
                  f"head (head i + {H // 2}: differential head i's second map): values and outputs are the "
                  "differential heads' (the layer's own trace)"},
        )


def _numpy(t: Tensor) -> np.ndarray:
    """A detached copy of t as a numpy array."""
    return t.detach().cpu().numpy().copy()


def _tokens(T: int, S: int, query_tokens: Sequence[str] | None, key_tokens: Sequence[str] | None, self_attention: bool
            ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The query and key tokens of a trace, by default their positions; self-attention: the keys are the queries."""
    qt = tuple(query_tokens) if query_tokens is not None else tuple(str(i) for i in range(T))
    kt = tuple(key_tokens) if key_tokens is not None else (qt if self_attention else tuple(str(j) for j in range(S)))
    return qt, kt


def _describe(cfg: MHAConfig, variant: LayerVariant) -> str:
    h, n = cfg.num_heads, cfg.num_heads // 2
    return (f"Differential attention (DIFF Transformer, DiffLlama): the {h} query/key heads pair into {n} differential "
            f"heads (head i with head i + {n}); each head's weights are softmax map₁ − λ·softmax map₂, signed, so "
            f"attention both maps give the same keys cancels. Head i reads the values [V_i | V_(i+{n})] "
            f"({2 * cfg.d_v} wide), its output passes (1 − λ_init)·RMSNorm, and Concat → W_O is unchanged "
            f"({h}·d_v = {h * cfg.d_v} wide). λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, λ_init = 0.2.")


def _check(cfg: MHAConfig, variant: LayerVariant) -> None:
    if cfg.num_heads % 2:
        raise ValueError(f"differential attention pairs heads (two softmax maps a head): h must be even, "
                         f"got {cfg.num_heads}")


def _formulas(cfg: MHAConfig, T: int, S: int | None = None, *, causal: bool = False) -> list[str]:
    H, d_k, d_v = cfg.num_heads, cfg.d_k, cfg.d_v
    half = H // 2
    heads = "0" if half == 1 else rf"0, \dots, {half - 1}"
    return [
        (rf"A^{{(1)}}_i = \mathrm{{softmax}}\!\left(\frac{{Q_i K_i^\top}}{{\sqrt{{{d_k}}}}}\right), \quad "
         rf"A^{{(2)}}_i = \mathrm{{softmax}}\!\left(\frac{{Q_{{i+{half}}} K_{{i+{half}}}^\top}}{{\sqrt{{{d_k}}}}}"
         rf"\right), \quad i = {heads}"),
        (rf"\mathrm{{head}}_i = (1 - \lambda_{{init}})\, \mathrm{{RMSNorm}}\!\left((A^{{(1)}}_i - \lambda A^{{(2)}}_i)"
         rf"\,[\,V_i \,|\, V_{{i+{half}}}\,]\right) \in \mathbb{{R}}^{{{T} \times {2 * d_v}}}"),
        (r"\lambda = e^{\lambda_{q1} \cdot \lambda_{k1}} - e^{\lambda_{q2} \cdot \lambda_{k2}} + \lambda_{init}, "
         r"\quad \lambda_{init} = 0.8 - 0.6\, e^{-0.3 \cdot 0} = 0.2"),
    ]


register(VariantSpec(
    "diff", "Diff", DifferentialAttention, _describe,
    lambda cfg, v: VariantShape("diff", cfg.d_model, cfg.num_heads, head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias),
    Training(lambda v, h: "Diff", grid=lambda h: (LayerVariant("diff"),), signed=True, colour="#8c564b",
             step_cost=(1.4, 1.0),  # the pairs' second maps
             unsplit="each head is the difference of two softmax maps of two query/key heads, and reads two value "
             "heads"),
    check=_check, formulas=_formulas, flag="differential",
    controls=(Control("", "Each head subtracts a second softmax map, scaled by λ, from its first: h counts the maps, so "
                      "h must be even and the layer has h / 2 differential heads.", "caption"),),
    help="Diff (DIFF Transformer, DiffLlama): each head is the difference of two softmax maps."))
