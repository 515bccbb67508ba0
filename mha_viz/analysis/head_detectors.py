"""Head detectors: previous-token, duplicate-token and induction heads, found on repeated random tokens.

The idea of TransformerLens's detect_head, in our own code. The probe is `batch` sequences
    [start] + A + A,   A = n distinct tokens drawn at random (seeded) from the model's vocabulary
with special tokens excluded; start is the tokenizer's BOS token (else its CLS token, else nothing), so
A begins at position o = len(start). With a[i, j] the weight of query i on key j in one layer and head:
    previous   mean over i = o+1 .. o+2n-1 of a[i, i-1]      the token just before (both in A + A)
    duplicate  mean over i = o+n .. o+2n-1 of a[i, i-n]      the same token's earlier occurrence
    induction  mean over i = o+n .. o+2n-1 of a[i, i-n+1]    the token after that earlier occurrence
averaged over the sequences: one score in [0, 1] per head, 1 for a head that does exactly that.
A's tokens are distinct, so every token of the second A has exactly one earlier occurrence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..names import DETECTOR_KINDS

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel

KINDS = DETECTOR_KINDS
DEFAULT_LENGTH = 32  # n, the length of A (shorter if the model's positions or vocabulary are too few)
DEFAULT_BATCH = 8


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


def detector_scores(attentions: np.ndarray, kind: str, *, n: int, start: int = 0) -> np.ndarray:
    """Scores [...] of attentions [..., T, T] (any leading axes) on [start tokens] + A + A with len(A) = n.

    The mean of a[i, key(i)] over the queries i of kind (module docstring); T may exceed start + 2n.
    """
    _kind(kind)
    a = np.asarray(attentions, dtype=np.float64)  # (..., T, T)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attentions must be [..., T, T] self-attention, got shape {a.shape}")
    if n < 2 or start < 0 or start + 2 * n > a.shape[-1]:
        raise ValueError(f"need n >= 2, start >= 0 and start + 2n <= T = {a.shape[-1]}, got n={n}, start={start}")
    if kind == "previous":
        queries = np.arange(start + 1, start + 2 * n)  # (2n-1,)
        keys = queries - 1
    else:
        queries = np.arange(start + n, start + 2 * n)  # (n,)
        keys = queries - n if kind == "duplicate" else queries - n + 1
    return a[..., queries, keys].mean(-1)  # (...)


def repeated_tokens(
    model: PretrainedModel, *, seed: int = 0, length: int = DEFAULT_LENGTH, batch: int = DEFAULT_BATCH
) -> tuple[np.ndarray, int, int]:
    """The probe: ids [batch, start + 2n] of [start] + A + A, start (0 or 1) and n (length, or fewer where the
    model's positions or vocabulary are too few)."""
    tokenizer = model.tokenizer
    first = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    prefix = [] if first is None else [first]
    vocab_size = min(len(tokenizer), model.vocab_size)
    candidates = np.setdiff1d(np.arange(vocab_size), tokenizer.all_special_ids)  # (V',)
    n = min(length, (model.max_tokens - len(prefix)) // 2, len(candidates))
    if n < 2 or batch < 1:
        raise ValueError(f"{model.name} leaves room for A of {n} tokens and batch must be >= 1; need n >= 2")
    rng = np.random.default_rng(seed)
    A = np.stack([rng.choice(candidates, size=n, replace=False) for _ in range(batch)])  # (B, n)
    ids = np.concatenate([np.full((batch, len(prefix)), prefix, dtype=np.int64), A, A], axis=1)  # (B, o + 2n)
    return ids, len(prefix), n


class DetectorScores(dict):
    """{kind: [layers, heads]} scores, and how many of the probe's sequences they average (sequences of asked:
    fewer when should_stop ended the probe early)."""

    def __init__(self, scores: dict[str, np.ndarray], sequences: int, asked: int) -> None:
        super().__init__(scores)
        self.sequences, self.asked = sequences, asked


def detect_heads(
    model: PretrainedModel, *, seed: int = 0, length: int = DEFAULT_LENGTH, batch: int = DEFAULT_BATCH,
    should_stop: Callable[[], bool] | None = None,
) -> DetectorScores:
    """Every kind's scores {kind: [layers, heads]} from one probe (one forward pass per sequence). should_stop: asked
    before every sequence after the first; True ends the probe there, and the scores average the sequences run
    (DetectorScores.sequences)."""
    ids, start, n = repeated_tokens(model, seed=seed, length=length, batch=batch)
    runs = []
    for row in ids:
        if runs and should_stop is not None and should_stop():
            break
        runs.append(model.attentions_for_ids(row.tolist()))  # (L, H, T, T)
    attentions = np.stack(runs)  # (B', L, H, T, T), B' <= batch
    scores = {kind: detector_scores(attentions, kind, n=n, start=start).mean(0) for kind in KINDS}  # (L, H) each
    return DetectorScores(scores, len(runs), len(ids))


def head_scores(
    model: PretrainedModel, kind: str, *, seed: int = 0, length: int = DEFAULT_LENGTH, batch: int = DEFAULT_BATCH
) -> np.ndarray:
    """[layers, heads]: how much each head behaves as a `kind` head ("previous", "duplicate" or "induction"),
    measured on repeated random tokens in the model's own vocabulary; see the module docstring."""
    return detect_heads(model, seed=seed, length=length, batch=batch)[_kind(kind)]
