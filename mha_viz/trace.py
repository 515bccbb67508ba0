"""AttentionTrace: every intermediate of one attention layer on one input.

Layout: attention is [head, query, key]; per-head tensors are [head, position, dim].
    queries      [H, T, d_k]      keys     [H, S, d_k]      values [H, S, d_v]
    scores       [H, T, S]        scale * Q K^T (+ score_bias terms, soft-capped), masked entries -inf
    weights      [H, T, S]        softmax(scores) over keys; each row sums to 1 (except with sinks, differential)
    head_outputs [H, T, d_v]      weights @ values
    concat       [T, H*d_v]       head outputs side by side, *before* W_O
    output       [T, d_out]       concat @ W_O^T + b_O, *after* W_O
    W_O          [d_out, H*d_v]   column block h multiplies head h
    W_Q [H, d_model, d_k]  W_K [H, d_context, d_k]  W_V [H, d_context, d_v]   the projections of head h
    b_Q [H, d_k]  b_K [H, d_k]  b_V [H, d_v]  b_O [d_out]                      biases (None: none)
    scale        the factor on Q K^T in scores (1/sqrt(d_k) unless the model says otherwise)
    score_bias   {name: [H, T, S]}  what the model adds to scale * Q K^T: a relative position bias (T5),
                 ALiBi (Bloom), DeBERTa's content->position and position->content terms; empty: none
    softcap      c of logit soft-capping (Gemma2), None: none.  In all:
                 scores = c * tanh((scale * Q K^T + sum(score_bias)) / c) + mask
    sinks        [H] or None: a learned sink logit per head joins each row's softmax and its column is dropped
                 (gpt-oss): weights = softmax([scores | sink_h])[:, :S], so a row sums to 1 - sink_mass
    lambdas, maps, map_scores   differential attention (DiffLlama), else None: head h has two softmax maps
                 maps [2, H, T, S] from the scores map_scores [2, H, T, S] of two query/key heads, and
                 weights = maps[0] - lambdas[h] * maps[1] (signed; rows sum to 1 - lambda); queries, keys and
                 scores are the first map's; values [H, S, 2 d] are the pair's [v_1 | v_2]
    gates        [H, T] or None: head h's output at query t scaled by gates[h, t] before the concat:
                 mixture-of-heads (MoH) router weights (0: the token does not use the head), or a model's own
                 sigmoid gate per head (LFM3); head_outputs are the
                 gated ones, so concat @ W_O^T + b_O is still the output
    kind         what mixes the tokens (mha_viz.mixers.KINDS): "softmax" (attention); "sparse" (softmax over the
                 keys an indexer kept, DeepSeek-V3.2: meta["kept"] [T, S]); or, in MIXING_KINDS, a hybrid model's
                 "linear" (gated delta rule), "ssm" (Mamba-2, Mamba) or "conv" (LFM2): then weights [H, T, T] is
                 the layer's exact mixing matrix (signed, rows not normalised; Mamba's and LFM2's per channel, each
                 a head of width 1), head_outputs what it mixes after the layer's gated norm, and queries, keys and
                 scores are None (meta["unavailable"] says why)
    head_arrays  {name: [H, T]}: per-head, per-token quantities: what a mixing matrix is made of (a decay, a step
                 size, a write strength), or a sparse layer's "dropped mass" (what dense attention would have given
                 the keys it dropped); empty for softmax attention
T counts query tokens, S key tokens (S = T for self-attention). Heads are numbered from 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

MIXING_KINDS = ("linear", "ssm", "conv")  # kinds whose weights are a mixing matrix, not softmax rows (mha_viz.mixers)


@dataclass(frozen=True, eq=False)
class AttentionTrace:
    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    weights: np.ndarray
    # The rest is None only for a model whose architecture mha_viz cannot open up, where the
    # weights come from the model's own output_attentions; meta["unavailable"] then says why.
    queries: np.ndarray | None = None
    keys: np.ndarray | None = None
    values: np.ndarray | None = None
    scores: np.ndarray | None = None
    head_outputs: np.ndarray | None = None
    concat: np.ndarray | None = None
    output: np.ndarray | None = None
    W_O: np.ndarray | None = None
    b_O: np.ndarray | None = None
    W_Q: np.ndarray | None = None
    W_K: np.ndarray | None = None
    W_V: np.ndarray | None = None
    b_Q: np.ndarray | None = None
    b_K: np.ndarray | None = None
    b_V: np.ndarray | None = None
    scale: float | None = None
    score_bias: dict[str, np.ndarray] = field(default_factory=dict)
    softcap: float | None = None
    causal: bool = False
    cross: bool = False
    # kv_heads[h] is the key/value head that query head h reads (grouped-query attention);
    # None means one K/V head per query head.
    kv_heads: tuple[int, ...] | None = None
    sinks: np.ndarray | None = None
    lambdas: np.ndarray | None = None
    maps: np.ndarray | None = None
    map_scores: np.ndarray | None = None
    gates: np.ndarray | None = None
    kind: str = "softmax"
    head_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        H, T, S = self.weights.shape
        d_k = None if self.queries is None else self.queries.shape[-1]
        d_v = next((a.shape[-1] for a in (self.values, self.head_outputs) if a is not None), None)
        d_out = None if self.W_O is None else self.W_O.shape[0]
        expected = {
            "queries": (H, T, d_k),
            "keys": (H, S, d_k),
            "values": (H, S, d_v),
            "scores": (H, T, S),
            "head_outputs": (H, T, d_v),
            "concat": (T, None if d_v is None else H * d_v),
            "output": (T, d_out),
            "W_O": (d_out, None if d_v is None else H * d_v),
            "W_Q": (H, None, d_k),
            "W_K": (H, None, d_k),
            "W_V": (H, None, d_v),
            "b_Q": (H, d_k),
            "b_K": (H, d_k),
            "b_V": (H, d_v),
            "sinks": (H,),
            "lambdas": (H,),
            "maps": (2, H, T, S),
            "map_scores": (2, H, T, S),
            "gates": (H, T),
        }
        for name, shape in expected.items():
            array = getattr(self, name)
            if array is not None and any(e is not None and a != e for a, e in zip(array.shape, shape, strict=True)):
                raise ValueError(f"{name} has shape {array.shape}, expected {shape}")
        for name, array in self.score_bias.items():
            if array.shape != (H, T, S):
                raise ValueError(f"score_bias[{name!r}] has shape {array.shape}, expected {(H, T, S)}")
        for name, array in self.head_arrays.items():
            if array.shape != (H, T):
                raise ValueError(f"head_arrays[{name!r}] has shape {array.shape}, expected {(H, T)}")
        if len(self.query_tokens) != T or len(self.key_tokens) != S:
            raise ValueError(
                f"{len(self.query_tokens)} query / {len(self.key_tokens)} key tokens "
                f"for a {T} x {S} attention matrix"
            )

    @property
    def missing(self) -> tuple[str, ...]:
        """Names of the intermediates this trace does not hold (empty for a full trace)."""
        names = ("queries", "keys", "values", "scores", "head_outputs", "concat", "output", "W_O")
        return tuple(n for n in names if getattr(self, n) is None)

    def lacks(self, *names: str) -> tuple[str, ...]:
        """Which of the named arrays this trace does not hold (empty: a view needing them can be drawn)."""
        return tuple(n for n in names if getattr(self, n) is None)

    @property
    def num_heads(self) -> int:
        return self.weights.shape[0]

    @property
    def d_k(self) -> int:
        return self.require("queries").shape[-1]

    @property
    def d_v(self) -> int:
        """The head width of values and head outputs (a trace without values still has its head outputs)."""
        return (self.values if self.values is not None else self.require("head_outputs")).shape[-1]

    @property
    def d_out(self) -> int:
        return self.require("W_O").shape[0]

    @property
    def sink_mass(self) -> np.ndarray | None:
        """[H, T]: the share of each row's softmax that went to the head's sink logit, 1 - sum_j weights[h, i, j];
        None without sinks."""
        return None if self.sinks is None else 1.0 - self.weights.sum(-1)

    @property
    def score_scale(self) -> float:
        """The factor on Q K^T in the scores: trace.scale, or 1/sqrt(d_k) when the trace does not say."""
        return float(self.scale) if self.scale is not None else self.d_k**-0.5

    @property
    def mixes(self) -> bool:
        """weights are a mixing matrix (a linear-attention or state-space layer), not softmax rows."""
        return self.kind in MIXING_KINDS

    @property
    def signed(self) -> bool:
        """weights can be negative (a mixing matrix, a differential head): drawn on a diverging scale."""
        return self.mixes or self.lambdas is not None

    def read_only(self) -> AttentionTrace:
        """This trace with every array made read-only (safe to share between threads and sessions)."""
        for value in ([getattr(self, f.name) for f in fields(self)] + list(self.score_bias.values())
                      + list(self.head_arrays.values())):
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        return self

    def require(self, name: str) -> np.ndarray:
        array = getattr(self, name)
        if array is None:
            reason = self.meta.get("unavailable", "this trace was built from attention weights alone")
            raise ValueError(f"{name} is not available: {reason}")
        return array

    def W_O_blocks(self) -> np.ndarray:
        """W_O split per head: [H, d_out, d_v]; block h is W_O[:, h*d_v:(h+1)*d_v]."""
        return self.require("W_O").reshape(self.d_out, self.num_heads, self.d_v).transpose(1, 0, 2)

    def head_contributions(self) -> np.ndarray:
        """What each head adds to the output: head_h @ W_O^(h)T, shape [H, T, d_out].

        output = sum_h head_contributions[h] + b_O, because concat @ W_O^T splits into
        one product per head block.
        """
        return np.einsum("htv,hov->hto", self.require("head_outputs"), self.W_O_blocks())  # (H, T, d_out)

    def check_wo_path(self) -> dict[str, float]:
        """Max abs errors of the two identities on the concat -> W_O path."""
        bias = 0.0 if self.b_O is None else self.b_O
        return {
            "concat @ W_O^T + b vs output": float(
                np.abs(self.require("concat") @ self.W_O.T + bias - self.require("output")).max()
            ),
            "sum of head contributions + b vs output": float(
                np.abs(self.head_contributions().sum(0) + bias - self.output).max()
            ),
        }

    def rounding_tolerance(self) -> float:
        """How far two float computations of the W_O path may differ by rounding alone.

        A sum of n = H*d_v products in the output's dtype differs from another order of the same
        sum by about eps * sqrt(n) * |output|; 16x that bounds it with room to spare:
            tol = 16 * eps * sqrt(H*d_v) * max(1, max |output|)
        check_wo_path() errors at or below this mean "equal within float rounding".
        """
        output = self.require("output")
        eps = float(np.finfo(output.dtype if output.dtype.kind == "f" else np.float32).eps)
        n = self.require("concat").shape[-1]
        return 16 * eps * n**0.5 * max(1.0, float(np.abs(output).max(initial=0.0)))
