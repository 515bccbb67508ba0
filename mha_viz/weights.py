"""HeadWeights: every attention head's weights of one stack of layers, with the norms folded in.

Layout (row vectors, as the model computes them: a head reads x and writes x W):
    W_Q [L, H, d_model, d_k]   q = x W_Q[l, h] + b_Q[l, h]
    W_K [L, H, d_model, d_k]   k = x W_K[l, h] + b_K[l, h]   (grouped-query: K/V heads repeated per query head)
    W_V [L, H, d_model, d_v]   v = x W_V[l, h] + b_V[l, h]
    W_O [L, H, d_v, d_model]   head h writes z_h W_O[l, h]: its block of the output projection, transposed
    b_O [L, d_model]           the output projection's bias (written once per layer, not per head)
    W_E [V, d_model]  W_pos [P, d_model]  W_U [d_model, V]  b_U [V]   embeddings and unembedding, None if absent
Two products of one head say what it does (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"):
    W_QK = W_Q W_K^T  [d_model, d_model]   score(i, j) ∝ x_i W_QK x_j^T: where the head looks
    W_OV = W_V W_O    [d_model, d_model]   a key token x_j, attended with weight 1, adds x_j W_OV: what it writes
Their rank is at most d_k (resp. d_v), however large d_model is.

Folded norms. A pre-norm model reads the residual stream x through a norm, norm(x) = gamma * centre(x) / s + beta
(LayerNorm: centre(x) = x - mean(x), s = sqrt(var(x) + eps); RMSNorm: centre(x) = x, no beta, s = rms(x)). So
    norm(x) W = (x C diag(gamma) W) / s + beta W,    C = I - 1 1^T / d  (LayerNorm),  I (RMSNorm)
and the folded weights are W' = C diag(gamma) W, b' = b + beta W: what the head does to x, up to the positive,
input-dependent 1/s, which no weight can hold. Under LayerNorm a direction of all ones is invisible to every reader,
so weights that write into the stream (W_O, b_O, W_E, W_pos) are centred too (their mean over d_model removed), as
TransformerLens does. The final norm is folded into W_U the same way. Post-norm models (BERT, BART) read the
normalised stream itself: nothing to fold. `folded` says what was done, `notes` where the weights and the model's
computation still differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .trace import AttentionTrace


@dataclass(frozen=True, eq=False)
class HeadWeights:
    """Every head's weights of one stack of attention layers, float32, norms folded (module docstring)."""

    W_Q: np.ndarray  # [L, H, d_model, d_k]
    W_K: np.ndarray  # [L, H, d_model, d_k]
    W_V: np.ndarray  # [L, H, d_model, d_v]
    W_O: np.ndarray  # [L, H, d_v, d_model]
    b_Q: np.ndarray | None = None  # [L, H, d_k]
    b_K: np.ndarray | None = None  # [L, H, d_k]
    b_V: np.ndarray | None = None  # [L, H, d_v]
    b_O: np.ndarray | None = None  # [L, d_model]
    W_E: np.ndarray | None = None  # [V, d_model] token embeddings
    W_pos: np.ndarray | None = None  # [P, d_model] learned position embeddings (None: none, or rotary)
    W_U: np.ndarray | None = None  # [d_model, V] unembedding (the LM head), final norm folded
    b_U: np.ndarray | None = None  # [V]
    vocab: tuple[str, ...] | None = None  # vocab[i]: token i as a string, for labelling W_E's and W_U's rows
    norm: str | None = None  # "LayerNorm", "RMSNorm" or None: what was folded
    folded: str = "nothing to fold"  # how the norms were folded, in a sentence for the page
    notes: tuple[str, ...] = ()  # where these weights and the model's computation differ
    name: str = ""

    def __post_init__(self) -> None:
        L, H, d, d_k = self.W_Q.shape
        d_v = self.W_V.shape[-1]
        expected = {"W_K": (L, H, None, d_k), "W_V": (L, H, None, d_v), "W_O": (L, H, d_v, d),
                    "b_Q": (L, H, d_k), "b_K": (L, H, d_k), "b_V": (L, H, d_v), "b_O": (L, d),
                    "W_E": (None, d), "W_pos": (None, d), "W_U": (d, None)}
        for name, shape in expected.items():
            array = getattr(self, name)
            if array is None:
                continue
            if array.ndim != len(shape) or any(s is not None and a != s for a, s in zip(array.shape, shape, strict=True)):
                raise ValueError(f"{name} has shape {array.shape}, expected {shape} (None: any size)")
        if self.vocab is not None and self.W_E is not None and len(self.vocab) != self.W_E.shape[0]:
            raise ValueError(f"vocab has {len(self.vocab)} tokens but W_E has {self.W_E.shape[0]} rows")

    @property
    def num_layers(self) -> int:
        return self.W_Q.shape[0]

    @property
    def num_heads(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d_model(self) -> int:
        return self.W_Q.shape[2]

    def W_QK(self, layer: int, head: int) -> np.ndarray:
        """[d_model, d_model] W_Q W_K^T of one head (float64): x_i W_QK x_j^T is query i's score for key j, up to
        the scale, biases and positions."""
        return self.W_Q[layer, head].astype(np.float64) @ self.W_K[layer, head].T.astype(np.float64)

    def W_OV(self, layer: int, head: int) -> np.ndarray:
        """[d_model, d_model] W_V W_O of one head (float64): what attending to x writes, x W_OV (plus biases)."""
        return self.W_V[layer, head].astype(np.float64) @ self.W_O[layer, head].astype(np.float64)


def per_head_out(W_O: np.ndarray, num_heads: int) -> np.ndarray:
    """An output projection in torch layout [d_out, H*d_v] -> [H, d_v, d_out]: head h's block, transposed."""
    d_out = W_O.shape[0]
    return np.ascontiguousarray(W_O.T.reshape(num_heads, -1, d_out))


FOLD_COLUMNS = 4096  # columns folded at a time: an unembedding of 50k tokens never exists twice in float64


def fold_reader(W: np.ndarray, b: np.ndarray | None, gamma: np.ndarray, beta: np.ndarray | None,
                centre: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Fold a norm into weights that read the stream through it: W [..., d, n] -> C diag(gamma) W and
    b [..., n] -> b + beta W (module docstring). Computed in float64, FOLD_COLUMNS columns at a time, returned as
    float32."""
    out = np.empty(W.shape, dtype=np.float32)
    shift = None if beta is None else np.empty(W.shape[:-2] + W.shape[-1:], dtype=np.float64)  # beta W
    g = gamma.astype(np.float64)[:, None]  # (d, 1)
    for start in range(0, W.shape[-1], FOLD_COLUMNS):
        cols = np.asarray(W[..., start : start + FOLD_COLUMNS], dtype=np.float64)  # [..., d, c] as the model holds it
        if shift is not None:
            shift[..., start : start + cols.shape[-1]] = np.einsum("d,...dc->...c", beta.astype(np.float64), cols)
        folded = g * cols  # diag(gamma) W
        if centre:
            folded -= folded.mean(axis=-2, keepdims=True)  # C diag(gamma) W: the all-ones direction removed
        out[..., start : start + cols.shape[-1]] = folded
    if shift is not None:
        b = shift if b is None else b + shift
    return out, None if b is None else np.asarray(b, dtype=np.float32)


def centre_writer(W: np.ndarray | None) -> np.ndarray | None:
    """Weights that write into a LayerNorm-read stream, their mean over the last axis (d_model) removed."""
    return None if W is None else (W - W.mean(axis=-1, keepdims=True)).astype(np.float32)


def from_trace(trace: AttentionTrace) -> HeadWeights:
    """One layer's HeadWeights from its trace (the configurable layer: no norms, no embeddings). ValueError if the
    trace lacks the projections."""
    lacking = trace.lacks("W_Q", "W_K", "W_V", "W_O")
    if lacking:
        raise ValueError(f"the trace lacks {', '.join(lacking)}: its layer's weights are unknown")
    if trace.cross:
        raise ValueError("cross-attention reads another stream for its keys and values: W_QK and W_OV mix two "
                         "spaces; HeadWeights holds self-attention layers")
    H = trace.num_heads

    def stacked(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.asarray(a, dtype=np.float32)[None]

    return HeadWeights(
        W_Q=stacked(trace.W_Q), W_K=stacked(trace.W_K), W_V=stacked(trace.W_V),
        W_O=per_head_out(np.asarray(trace.W_O, dtype=np.float32), H)[None],
        b_Q=stacked(trace.b_Q), b_K=stacked(trace.b_K), b_V=stacked(trace.b_V), b_O=stacked(trace.b_O),
        name=str(trace.meta.get("model", "this layer")),
    )


def head_weights(source: Any, part: str | None = None) -> HeadWeights:
    """The HeadWeights of a model, a trained layer, a source or one layer's trace:
    a HeadWeights -> itself; an AttentionTrace -> from_trace; anything with a head_weights(part) method
    (PretrainedModel, TrainedLayer) -> that; a source (mha_viz.sources) -> its model's, its trained layer's, or its
    layer's trace's. TypeError for anything else."""
    from .trace import AttentionTrace

    if isinstance(source, HeadWeights):
        return source
    if isinstance(source, AttentionTrace):
        return from_trace(source)
    if hasattr(source, "head_weights"):
        return source.head_weights(part)
    model = getattr(source, "model", None)
    if model is not None and hasattr(model, "head_weights"):
        return model.head_weights(part if part is not None else getattr(source, "part", None))
    trained = getattr(source, "layer", None)  # a TrainedSource: its layer's weights keep the task's embeddings
    if trained is not None and hasattr(trained, "head_weights"):
        return trained.head_weights(part)
    if hasattr(source, "trace") and getattr(source, "num_layers", None) == 1:
        return from_trace(source.trace(0))
    raise TypeError(f"no head weights for a {type(source).__name__}: give a PretrainedModel, a TrainedLayer, a "
                    "source or an AttentionTrace")
