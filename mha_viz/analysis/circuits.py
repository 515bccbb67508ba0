"""Circuits of one head, read from its weights alone (Elhage et al. 2021, "A Mathematical Framework for Transformer
Circuits"): where it looks (QK) and what it writes (OV), as matrices, as tables over tokens, and as a copying score.

Layout (mha_viz.weights, row vectors): a head reads x [d_model] and computes q = x W_Q, k = x W_K, v = x W_V, and
writes z W_O; so
    W_QK = W_Q W_K^T [d_model, d_model]   x_i W_QK x_j^T: query i's score for key j (bilinear part)
    W_OV = W_V W_O   [d_model, d_model]   x_j W_OV: what attending to x_j with weight 1 adds to the stream
Their rank is at most d_k (resp. d_v): at most d_k (d_v) singular values are nonzero.

Token-level circuits, where the weights have embeddings (W_E [V, d_model], W_pos [P, d_model], W_U [d_model, V]):
    full QK circuit         W_E W_QK W_E^T     [V, V]   row: the query token, column: the key token
    positional QK circuit   W_pos W_QK W_pos^T [P, P]   row: the query position, column: the key position
    full OV circuit         W_E W_OV W_U       [V, V]   row: the attended (source) token, column: the output token's
                                                        logit its copy raises
Without an unembedding (encoders, the trained layers) the OV circuit is read back in the embedding's basis,
W_E W_OV W_E^T (row: the source token, column: how much its write points along each token's embedding). Conventions:
the bilinear part only, unscaled (the model divides scores by its attention scale, 1/sqrt(d_k) for most models), biases
left out, norms folded as HeadWeights.folded says (the norm's input-dependent 1/s left out). A vocabulary of more
than FULL_VOCAB tokens is never turned into a [V, V] matrix: rows are sampled (seeded, said in the result) and each
keeps its top_k columns, computed in chunks of columns from [V, d_head]-sized factors.

Copying score (Elhage et al. 2021): a head copies when its full OV circuit raises the logit of the token it attends to,
i.e. when the circuit's eigenvalues are positive. The score is the share of its nonzero eigenvalues with positive real
part (0 to 1); `positivity` is the paper's summary sum(λ) / sum(|λ|) (-1 to 1). The [V, V] circuit W_E W_V W_O W_U is
A B with A = W_E W_V [V, d_v] and B = W_O W_U [d_v, V], and A B and B A = W_O W_U W_E W_V [d_v, d_v] have the same
nonzero eigenvalues (with multiplicities): the small matrix is what is computed, for any vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..weights import HeadWeights, head_weights

FULL_VOCAB = 512  # the most rows and columns a token table is computed whole for
DEFAULT_TOP_K = 10  # columns kept per row of a large table
DEFAULT_SAMPLE = 64  # rows sampled from a large vocabulary
CHUNK = 4096  # columns computed at a time
ZERO = 1e-6  # an eigenvalue below this times the largest |eigenvalue| counts as zero
CONVENTION = ("bilinear part only, unscaled (the model divides scores by its attention scale, 1/sqrt(d_k) for most), "
              "biases left out")


def _weights(source: Any, part: str | None) -> HeadWeights:
    return source if isinstance(source, HeadWeights) else head_weights(source, part)


def _check_head(w: HeadWeights, layer: int, head: int) -> None:
    if not (0 <= layer < w.num_layers and 0 <= head < w.num_heads):
        raise IndexError(f"no head {head} in layer {layer}: {w.name or 'these weights'} has {w.num_layers} layer(s) "
                         f"of {w.num_heads} heads")


@dataclass(frozen=True, eq=False)
class HeadSingularValues:
    """The singular values of one head's W_QK and W_OV, descending (float64). At most d_k (d_v) are nonzero."""

    layer: int
    head: int
    qk: np.ndarray  # [min(d_model, d_k)]
    ov: np.ndarray  # [min(d_model, d_v)]
    d_model: int
    d_k: int
    d_v: int


def _product_singular_values(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Singular values of A B^T (A [d, k], B [d, k]) from the small factors: A = Qa Ra, B = Qb Rb (reduced QR), so
    A B^T = Qa (Ra Rb^T) Qb^T with orthonormal Qa, Qb, and its singular values are those of Ra Rb^T."""
    _, Ra = np.linalg.qr(A.astype(np.float64))
    _, Rb = np.linalg.qr(B.astype(np.float64))
    return np.linalg.svd(Ra @ Rb.T, compute_uv=False)


def singular_values(source: Any, layer: int, head: int, *, part: str | None = None) -> HeadSingularValues:
    """Singular values of W_QK = W_Q W_K^T and W_OV = W_V W_O of one head (source: anything mha_viz.weights.head_weights
    takes, or a HeadWeights), computed from the [d_model, d_head] factors without forming the products."""
    w = _weights(source, part)
    _check_head(w, layer, head)
    return HeadSingularValues(
        layer, head,
        qk=_product_singular_values(w.W_Q[layer, head], w.W_K[layer, head]),
        ov=_product_singular_values(w.W_V[layer, head], w.W_O[layer, head].T),
        d_model=w.d_model, d_k=w.W_Q.shape[-1], d_v=w.W_V.shape[-1],
    )


class PeakOffset(NamedTuple):
    """Where a table's rows peak relative to themselves (column id - row id; for positions, key - query)."""

    offset: int  # the commonest offset of a row's largest column: -1 the previous position, 0 its own
    share: float  # of the rows that have a column at that offset, the share whose largest column is there
    rows: int  # how many rows have a column at that offset

    @property
    def where(self) -> str:
        """The offset in words: "their own position", "the previous position", "3 positions back", ..."""
        if self.offset == 0:
            return "their own position"
        if abs(self.offset) == 1:
            return "the previous position" if self.offset < 0 else "the next position"
        return f"{abs(self.offset)} positions {'back' if self.offset < 0 else 'ahead'}"


@dataclass(frozen=True, eq=False)
class TokenCircuit:
    """A head's circuit as a table over tokens (or positions).

    full: values [R, C] is every column of the rows (columns = arange(C)); else values [R, k] holds each row's top_k
    columns, largest first, and columns [R, k] their ids. rows [R]: the row ids (all of them, or a sample: `sampling`
    says how). Labels: row_vocab[id], column_vocab[id].
    """

    kind: str  # "QK", "QK positions" or "OV"
    layer: int
    head: int
    formula: str  # e.g. "W_E W_QK W_E^T"
    values: np.ndarray  # float32
    rows: np.ndarray  # int64 [R]
    columns: np.ndarray  # int64 [C] (full) or [R, k]
    full: bool
    row_vocab: tuple[str, ...]
    column_vocab: tuple[str, ...]
    row_axis: str  # what a row is, e.g. "query token"
    column_axis: str
    sampling: str  # which rows, in a sentence
    convention: str  # scale, biases and norms, in a sentence

    @property
    def row_labels(self) -> tuple[str, ...]:
        return tuple(self.row_vocab[i] for i in self.rows)

    @property
    def top_columns(self) -> np.ndarray:
        """[R] the id of each row's largest column (masked columns, NaN, never)."""
        return self.columns[np.argmax(np.nan_to_num(self.values, nan=-np.inf), axis=1)] if self.full else self.columns[:, 0]

    @property
    def top_is_self(self) -> float:
        """The share of rows whose largest column is the row's own id (a copying OV circuit: the token raises its own
        logit; a QK circuit: a token attends most to itself). NaN when rows and columns are different kinds of thing."""
        if self.row_vocab is not self.column_vocab and self.row_vocab != self.column_vocab:
            return float("nan")
        return float(np.mean(self.top_columns == self.rows))

    def peak_offset(self) -> PeakOffset:
        """The commonest offset (column id - row id) of the rows' largest entries, and the share of the rows that
        have a (not masked) column at that offset whose largest entry is there (a previous-token head's positional
        QK circuit: offset -1, row 0 not counted). ValueError when rows and columns are different kinds of thing."""
        if self.row_vocab is not self.column_vocab and self.row_vocab != self.column_vocab:
            raise ValueError("rows and columns are different kinds of thing: no offset between them")
        offsets = self.top_columns - self.rows  # [R]
        values, counts = np.unique(offsets, return_counts=True)
        offset = int(values[np.argmax(counts)])
        target = self.rows + offset
        reachable = (target >= 0) & (target < len(self.column_vocab))
        if self.full:  # a masked column (a causal model's later keys) is not there to peak at
            reachable[reachable] = ~np.isnan(self.values[np.flatnonzero(reachable), target[reachable]])
        return PeakOffset(offset, float(np.mean(offsets[reachable] == offset)), int(reachable.sum()))


def _vocab(w: HeadWeights, n: int) -> tuple[str, ...]:
    if w.vocab is not None and len(w.vocab) == n:
        return w.vocab
    return tuple(str(i) for i in range(n))


def _pick_rows(n: int, rows: Sequence[int] | None, sample: int | None, seed: int, what: str
               ) -> tuple[np.ndarray, str]:
    """The row ids and how they were chosen: the ones asked for, all of them (n <= FULL_VOCAB, no sample asked) or a
    seeded sample."""
    if rows is not None:
        picked = np.asarray(rows, dtype=np.int64).reshape(-1)
        if picked.size == 0 or picked.min() < 0 or picked.max() >= n:
            raise ValueError(f"rows must be {what} ids from 0 to {n - 1}")
        return picked, f"the {picked.size} {what}s asked for"
    if sample is None and n <= FULL_VOCAB:
        return np.arange(n), f"every {what} ({n})"
    k = min(DEFAULT_SAMPLE if sample is None else sample, n)
    if k < 1:
        raise ValueError("sample must be at least 1")
    picked = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    return picked, (f"{k} of {n} {what}s drawn uniformly without replacement (numpy default_rng, seed {seed}), "
                    "in id order")


def _table(left: np.ndarray, right: Callable[[int, int], np.ndarray], n_cols: int, top_k: int | None,
           after: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """left [R, r] @ right(0, n_cols)^T, computed CHUNK columns at a time: the whole [R, n_cols] table (top_k None)
    or each row's top_k columns, largest first: (values [R, k], ids [R, k]). after [R]: columns after a row's id are
    masked (a causal model's later keys): NaN in the table, never among the top."""
    left = left.astype(np.float32)

    def chunk(s: int, e: int) -> np.ndarray:
        values = left @ right(s, e).astype(np.float32).T
        if after is not None:
            values[np.arange(s, e)[None] > after[:, None]] = -np.inf
        return values

    if top_k is None:
        table = np.concatenate([chunk(s, min(s + CHUNK, n_cols)) for s in range(0, n_cols, CHUNK)], axis=1)
        return np.where(np.isneginf(table), np.nan, table), np.arange(n_cols)
    k = min(top_k, n_cols)
    best = np.full((left.shape[0], 0), -np.inf, dtype=np.float32)
    ids = np.zeros((left.shape[0], 0), dtype=np.int64)
    for s in range(0, n_cols, CHUNK):
        e = min(s + CHUNK, n_cols)
        values = np.concatenate([best, chunk(s, e)], axis=1)
        cols = np.concatenate([ids, np.broadcast_to(np.arange(s, e), (left.shape[0], e - s))], axis=1)
        if values.shape[1] > k:
            keep = np.argpartition(-values, k - 1, axis=1)[:, :k]
            values, cols = np.take_along_axis(values, keep, 1), np.take_along_axis(cols, keep, 1)
        best, ids = values, cols
    order = np.argsort(-best, axis=1, kind="stable")
    best = np.take_along_axis(best, order, 1)
    return np.where(np.isneginf(best), np.nan, best), np.take_along_axis(ids, order, 1)


def _top_k(n_cols: int, top_k: int | None, sampled: bool) -> int | None:
    """None (the whole table) for a small table asked whole; else the columns kept per row."""
    if top_k is not None:
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        return top_k
    return DEFAULT_TOP_K if sampled or n_cols > FULL_VOCAB else None


def _convention(w: HeadWeights) -> str:
    return f"{CONVENTION}; norms: {w.folded}"


def qk_circuit(source: Any, layer: int, head: int, *, positional: bool = False, top_k: int | None = None,
               sample: int | None = None, rows: Sequence[int] | None = None, seed: int = 0,
               positions: int | None = None, causal: bool = False, part: str | None = None) -> TokenCircuit:
    """The full QK circuit W_E W_QK W_E^T of one head (query token x key token), or with positional=True its
    positional part W_pos W_QK W_pos^T (query position x key position; the first `positions` positions if given;
    causal=True: keys after the query are masked, NaN, as a causal model never sees them).

    A small table (at most FULL_VOCAB rows and columns, no top_k or sample asked) comes whole; otherwise rows are the
    given ids or `sample` ids drawn with `seed`, each with its top_k columns. ValueError where the weights have no
    token embeddings (or no learned position table)."""
    w = _weights(source, part)
    _check_head(w, layer, head)
    if positional:
        if w.W_pos is None:
            raise ValueError(f"{w.name or 'this model'} has no learned position table (rotary positions, a relative "
                             "bias, or none): the positional QK circuit does not exist")
        table, what, formula = w.W_pos[:positions] if positions else w.W_pos, "position", "W_pos W_QK W_pos^T"
    else:
        if w.W_E is None:
            raise ValueError(f"{w.name or 'this layer'} has no token embeddings (W_E): its QK circuit exists only in "
                             "the residual stream's basis (see singular_values)")
        table, what, formula = w.W_E, "token", "W_E W_QK W_E^T"
    n = table.shape[0]
    picked, sampling = _pick_rows(n, rows, sample, seed, what)
    k = _top_k(n, top_k, sampled=len(picked) < n)
    W_Q, W_K = w.W_Q[layer, head], w.W_K[layer, head]
    values, columns = _table(table[picked] @ W_Q, lambda s, e: table[s:e] @ W_K, n, k,
                             after=picked if positional and causal else None)
    vocab = _vocab(w, n) if what == "token" else tuple(str(i) for i in range(n))
    return TokenCircuit("QK positions" if positional else "QK", layer, head, formula, values, picked, columns,
                        k is None, vocab, vocab, f"query {what}", f"key {what}", sampling, _convention(w))


def ov_circuit(source: Any, layer: int, head: int, *, top_k: int | None = None, sample: int | None = None,
               rows: Sequence[int] | None = None, seed: int = 0, part: str | None = None) -> TokenCircuit:
    """The full OV circuit W_E W_OV W_U of one head (source token x output token: the logits its copy raises); without
    an unembedding, W_E W_OV W_E^T (formula and column_axis say which). Rows, sampling and top_k as qk_circuit.
    ValueError where the weights have no token embeddings."""
    w = _weights(source, part)
    _check_head(w, layer, head)
    if w.W_E is None:
        raise ValueError(f"{w.name or 'this layer'} has no token embeddings (W_E): its OV circuit exists only in the "
                         "residual stream's basis (see singular_values and copying_scores)")
    n = w.W_E.shape[0]
    picked, sampling = _pick_rows(n, rows, sample, seed, "token")
    left = w.W_E[picked] @ w.W_V[layer, head] @ w.W_O[layer, head]  # [R, d_model]
    if w.W_U is not None:
        n_cols, formula, axis = w.W_U.shape[1], "W_E W_OV W_U", "output token (logit)"
        right = lambda s, e: w.W_U[:, s:e].T
    else:
        n_cols, formula, axis = n, "W_E W_OV W_E^T", "token embedding it points along"
        right = lambda s, e: w.W_E[s:e]
    k = _top_k(n_cols, top_k, sampled=len(picked) < n)
    values, columns = _table(left, right, n_cols, k)
    convention = _convention(w) + ("" if w.W_U is not None else
                                   "; no unembedding: the write is read back against the token embeddings")
    return TokenCircuit("OV", layer, head, formula, values, picked, columns, k is None, _vocab(w, n),
                        _vocab(w, n_cols), "source token", axis, sampling, convention)


@dataclass(frozen=True, eq=False)
class CopyingScores:
    """Every head's copying score [layers, heads] (module docstring): `scores` the share of the full OV circuit's
    nonzero eigenvalues with positive real part, `positivity` sum(λ) / sum(|λ|), `eigenvalues` [L, H, d_v] those of
    the small matrix (zeros included). NaN for a head whose circuit is zero."""

    scores: np.ndarray  # [L, H] float64, 0 to 1
    positivity: np.ndarray  # [L, H] float64, -1 to 1
    eigenvalues: np.ndarray  # [L, H, d_v] complex128
    circuit: str  # the full circuit whose eigenvalues these are, e.g. "W_E W_OV W_U"
    small: str  # the [d_v, d_v] matrix computed, e.g. "W_O W_U W_E W_V"
    note: str  # what the circuit means here, in a sentence
    name: str = ""

    def most_copying(self) -> tuple[int, int]:
        """(layer, head) of the head that copies most: the highest score, ties broken by the highest positivity
        (then the first in layer-major order). ValueError when every head's circuit is zero."""
        if np.isnan(self.scores).all():
            raise ValueError("no head has a nonzero OV circuit")
        order = np.lexsort((-np.nan_to_num(self.positivity, nan=-2).ravel(),
                            -np.nan_to_num(self.scores, nan=-1).ravel()))  # score first, then positivity
        layer, head = np.unravel_index(int(order[0]), self.scores.shape)
        return int(layer), int(head)


def _gram(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A^T B in float64, over chunks of their shared first axis (A [n, p], B [n, q]: a vocabulary's rows)."""
    out = np.zeros((A.shape[1], B.shape[1]))
    for s in range(0, A.shape[0], CHUNK):
        out += A[s:s + CHUNK].astype(np.float64).T @ B[s:s + CHUNK].astype(np.float64)
    return out


def copying_scores(source: Any, *, part: str | None = None) -> CopyingScores:
    """Copying scores of every head (module docstring), from the eigenvalues of the [d_v, d_v] matrix W_O G W_V with
    G = W_U W_E (the full OV circuit W_E W_OV W_U), W_E^T W_E without an unembedding (W_E W_OV W_E^T), or the identity
    without embeddings (W_OV itself, in the residual stream's basis)."""
    w = _weights(source, part)
    if w.W_E is not None and w.W_U is not None:
        n = min(w.W_E.shape[0], w.W_U.shape[1])  # an LM head padded past the tokenizer: the shared tokens
        G = _gram(w.W_U[:, :n].T, w.W_E[:n])  # W_U W_E [d_model, d_model]
        circuit, small = "W_E W_OV W_U", "W_O W_U W_E W_V"
        note = "the full OV circuit: which output logits a source token's copy raises"
    elif w.W_E is not None:
        G = _gram(w.W_E, w.W_E)  # W_E^T W_E
        circuit, small = "W_E W_OV W_E^T", "W_O W_E^T W_E W_V"
        note = ("no unembedding: the OV circuit read back against the token embeddings (does a token's write point "
                "along its own embedding?)")
    else:
        G = np.eye(w.d_model)
        circuit, small = "W_OV", "W_O W_V"
        note = "no embeddings: W_OV in the residual stream's basis (does a head write back the direction it reads?)"
    L, H, _, d_v = w.W_V.shape
    eig = np.zeros((L, H, d_v), dtype=np.complex128)
    for layer in range(L):
        for head in range(H):
            M = w.W_O[layer, head].astype(np.float64) @ G @ w.W_V[layer, head].astype(np.float64)
            eig[layer, head] = np.linalg.eigvals(M)
    size = np.abs(eig)
    nonzero = size > ZERO * size.max(axis=-1, keepdims=True)
    count = nonzero.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(count > 0, ((eig.real > 0) & nonzero).sum(-1) / np.maximum(count, 1), np.nan)
        positivity = np.where(count > 0, eig.sum(-1).real / size.sum(-1), np.nan)
    return CopyingScores(scores, positivity, eig, circuit, small, note, w.name)
