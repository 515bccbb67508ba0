"""Composition between heads: how much a later head reads what an earlier head writes (Elhage et al. 2021, "A
Mathematical Framework for Transformer Circuits").

Row-vector layout (mha_viz.weights): a head reads the residual stream x and writes x W, so head a = (l1, h1) writes
x W_OV^a with W_OV^a = W_V^a W_O^a [d_model, d_model], and a later head b = (l2, h2) reads that output through

    Q-composition  W_B = W_QK^b   = W_Q^b W_K^b^T   (a's output in b's queries)
    K-composition  W_B = W_QK^b^T = W_K^b W_Q^b^T   (a's output in b's keys)
    V-composition  W_B = W_OV^b   = W_V^b W_O^b     (a's output in b's values)

    score[l1, h1, l2, h2] = ||W_OV^a W_B||_F / (||W_OV^a||_F ||W_B||_F)     (0 where l2 <= l1)

between 0 (b reads nothing a writes) and 1 (rank one, a's output space is exactly what b reads most). These are
TransformerLens's HookedTransformer.all_composition_scores ("Q", "K", "V") on the same folded weights.

Factored: every product has rank at most d_head, so no [d_model, d_model] matrix is built. With W_OV^a = V O
and W_B = P R (P [d_model, k], R [k, d_model]), write V = Q_V T_V and R^T = Q_R T_R (QR; Q_V, Q_R have orthonormal
columns, which the Frobenius norm does not see). Then ||V O P R||_F = ||(T_V O)(P T_R^T)||_F: a [d_v, k] matrix
from one [d_v, d_model] and one [d_model, k] factor per head.

The baseline (Elhage et al. 2021 compare scores with "the empirical expected amount for random matrices of the same
shapes"): the same score for V, O, P, R with independent standard normal entries of these heads' shapes, averaged
over `draws` seeded draws. A score far above it is a composition the weights chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..names import COMPOSITION_KINDS
from ..weights import HeadWeights, head_weights

KINDS = COMPOSITION_KINDS
KIND_NAMES = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}
_CHUNK = 1 << 22  # the most float64 entries of one block of products (32 MB)


@dataclass(frozen=True, eq=False)
class CompositionScores:
    """Composition scores of every pair of heads of a stack, with the random baseline (module docstring).

    scores [L, H, L, H] float32: scores[l1, h1, l2, h2], earlier head (l1, h1) writing, later head (l2, h2) reading,
    0 where l2 <= l1. baseline, baseline_std: mean and standard deviation of the score of random matrices of the
    same shapes over `draws` draws (seed `seed`). labels: "layer.head" of the L*H heads, layer-major.
    """

    scores: np.ndarray
    baseline: float
    baseline_std: float
    kind: str
    labels: tuple[str, ...]
    draws: int
    seed: int
    name: str = ""
    folded: str = ""  # how the norms were folded into the weights (HeadWeights.folded)

    @property
    def title(self) -> str:
        return KIND_NAMES[self.kind]

    def strongest_pair(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The pair with the highest score, ((writer layer, head), (reader layer, head)): the reader in a later
        layer than the writer (the first such pair in layer-major order on a tie)."""
        L, _H = self.scores.shape[:2]
        later = np.arange(L)[None, None, :, None] > np.arange(L)[:, None, None, None]  # [L, 1, L, 1]
        scores = np.where(np.broadcast_to(later, self.scores.shape), np.nan_to_num(self.scores, nan=-np.inf), -np.inf)
        l1, h1, l2, h2 = (int(i) for i in np.unravel_index(int(np.argmax(scores)), scores.shape))
        return (l1, h1), (l2, h2)

    def strongest_writer(self, layer: int, head: int) -> tuple[int, int] | None:
        """The earlier head whose output the head (layer, head) reads most; None for a layer-0 head."""
        if layer < 1:
            return None
        column = np.nan_to_num(self.scores[:layer, :, layer, head], nan=-np.inf)  # [layer, H]
        l1, h1 = np.unravel_index(int(np.argmax(column)), column.shape)
        return int(l1), int(h1)

    def pairs(self) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
        """The part of the scores with a later reader: [(L-1)*H, (L-1)*H], rows the writing heads of layers
        0..L-2, columns the reading heads of layers 1..L-1 (0 where the column's layer is not after the row's),
        with the row and column labels."""
        L, H = self.scores.shape[:2]
        grid = self.scores[:-1, :, 1:, :].reshape((L - 1) * H, (L - 1) * H)
        return grid, self.labels[: (L - 1) * H], self.labels[H:]


def _check_kind(kind: str) -> str:
    k = str(kind).lower()
    if k not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)} (Q-, K- or V-composition), not {kind!r}")
    return k


def _triangular(M: np.ndarray) -> np.ndarray:
    """T of M = Q T (reduced QR): ||M X||_F = ||T X||_F for any X. M [..., n, r] -> [..., min(n, r), r]."""
    return np.linalg.qr(M, mode="r")


def writer_factors(V: np.ndarray, O: np.ndarray) -> np.ndarray:
    """[..., r, d_model] factors F with ||F X||_F = ||V O X||_F for every X: T_V O (module docstring)."""
    return _triangular(V) @ O


def reader_factors(P: np.ndarray, R_T: np.ndarray) -> np.ndarray:
    """[..., d_model, r] factors G with ||X G||_F = ||X P R||_F for every X (R_T = R^T): P T_R^T."""
    return P @ np.swapaxes(_triangular(R_T), -1, -2)


def _readers(w: HeadWeights, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(P, R^T) of every head's W_B = P R, each [L, H, d_model, k]."""
    if kind == "q":
        return w.W_Q, w.W_K
    if kind == "k":
        return w.W_K, w.W_Q
    return w.W_V, np.swapaxes(w.W_O, -1, -2)


def pair_scores(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """||F_a G_b||_F / (||F_a||_F ||G_b||_F) for every writer factor F_a [A, r, d] and reader factor G_b [B, d, k]:
    [A, B] (0 where a factor is zero). Products in blocks of at most _CHUNK entries."""
    A, r, d = left.shape
    B, _, k = right.shape
    flat_left = left.reshape(A * r, d)
    out = np.empty((A, B))
    step = max(1, _CHUNK // max(1, A * r * k))
    for start in range(0, B, step):
        block = right[start:start + step]  # [b, d, k]
        products = flat_left @ np.moveaxis(block, 1, 0).reshape(d, -1)  # [A*r, b*k]
        out[:, start:start + len(block)] = np.sqrt(
            np.square(products.reshape(A, r, len(block), k)).sum(axis=(1, 3)))
    norms = np.sqrt(np.square(left).sum(axis=(1, 2)))[:, None] * np.sqrt(np.square(right).sum(axis=(1, 2)))[None]
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def _scores(w: HeadWeights, kind: str) -> np.ndarray:
    L, H = w.num_layers, w.num_heads
    left = writer_factors(w.W_V.astype(np.float64), w.W_O.astype(np.float64))  # [L, H, r, d]
    P, R_T = _readers(w, kind)
    right = reader_factors(P.astype(np.float64), R_T.astype(np.float64))  # [L, H, d, k]
    scores = np.zeros((L, H, L, H))
    for l1 in range(L - 1):
        later = right[l1 + 1:].reshape(-1, *right.shape[2:])
        scores[l1, :, l1 + 1:, :] = pair_scores(left[l1], later).reshape(H, L - l1 - 1, H)
    return scores.astype(np.float32)


def random_baseline(d_model: int, d_v: int, k: int, kind: str, *, draws: int = 64, seed: int = 0
                    ) -> tuple[float, float]:
    """Mean and standard deviation over draws of the score of random W_OV = V O (V [d_model, d_v], O [d_v,
    d_model]) and W_B = P R (P [d_model, k], R [k, d_model]; for V-composition k = d_v), entries independent
    standard normal, generator seeded with seed."""
    _check_kind(kind)
    rng = np.random.default_rng(seed)
    values = np.empty(draws)
    for i in range(draws):
        V, O = rng.standard_normal((d_model, d_v)), rng.standard_normal((d_v, d_model))
        P, R_T = rng.standard_normal((d_model, k)), rng.standard_normal((d_model, k))
        values[i] = pair_scores(writer_factors(V, O)[None], reader_factors(P, R_T)[None])[0, 0]
    return float(values.mean()), float(values.std())


def composition(model: Any, kind: str, *, part: str | None = None, draws: int = 64, seed: int = 0
                ) -> CompositionScores:
    """Q-, K- or V-composition scores (kind "q", "k", "v") of every pair of heads of model, with the random
    baseline (module docstring). model: anything mha_viz.weights.head_weights accepts (a PretrainedModel and
    part, a source, a HeadWeights). ValueError for an unknown kind or a model of one layer."""
    kind = _check_kind(kind)
    w = head_weights(model, part)
    if w.num_layers < 2:
        raise ValueError("composition needs two or more attention layers: this model has one")
    d_v, d_k = w.W_V.shape[-1], w.W_Q.shape[-1]
    mean, std = random_baseline(w.d_model, d_v, d_v if kind == "v" else d_k, kind, draws=draws, seed=seed)
    labels = tuple(f"{layer}.{head}" for layer in range(w.num_layers) for head in range(w.num_heads))
    return CompositionScores(_scores(w, kind), mean, std, kind, labels, draws, seed, w.name, w.folded)


def composition_scores(model: Any, kind: str, *, part: str | None = None) -> np.ndarray:
    """[layers, heads, layers, heads] float32 Q-, K- or V-composition scores (kind "q", "k" or "v"):
    score[l1, h1, l2, h2] = ||W_OV^(l1,h1) W_B||_F / (||W_OV^(l1,h1)||_F ||W_B||_F), W_B the later head's W_QK (q),
    W_QK^T (k) or W_OV (v), in mha-viz's row-vector layout (x W); 0 where l2 <= l1. The module docstring has the
    details; `composition` adds the random baseline."""
    kind = _check_kind(kind)
    w = head_weights(model, part)
    if w.num_layers < 2:
        raise ValueError("composition needs two or more attention layers: this model has one")
    return _scores(w, kind)
