"""Synthetic tasks where every target is the token at one relation's key position.

A relation maps each query position t to one key position j_r(t), or -1 where it is undefined:
    previous   j = t - 1                                           (t >= 1)
    two back   j = t - 2                                           (t >= 2)
    first      j = 0                                               (t >= 1)
    match      j = max{s < t : letter(x_s) = letter(x_t)}          (content: depends on the tokens)
The model must report y_r(t) = x_{j_r(t)} for every relation r at once, at every query t.
Sequences are uniform random tokens; attention is causal (a query sees itself and earlier keys).

Measured (bench/RESULTS-training.md: d_model 64, 600 steps, seeds 0-2; mean accuracy over relations):
    prev-first        h=1 0.886, its head split about evenly; h=2 1.000, one head per relation (1.00 each)
    prev-2back-first  h=1 0.583; h=2 0.823 (one head shares two relations); h=4 1.000
    prev-match        h=1 0.674: its head takes "previous" and leaves "same letter"; h=2 0.996
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from string import ascii_lowercase

import torch
from torch import Tensor

from ..names import TASK_NAMES
from .scores import relation_masks

IGNORE = -100  # target where a relation is undefined (skipped by the loss)
PROBE_SEED = 20_240
PROBE_CANDIDATES = 64
LETTERS = tuple(ascii_lowercase)  # 26 tokens a..z
TAGGED = tuple(f"{letter}{digit}" for letter in "abcd" for digit in range(6))  # 24 tokens a0..d5
DIGITS = 6  # TAGGED[i] has letter i // DIGITS and digit i % DIGITS


def _query_positions(tokens: Tensor) -> Tensor:
    return torch.arange(tokens.shape[-1]).expand_as(tokens)  # (B, T)


def previous(tokens: Tensor) -> Tensor:
    return _query_positions(tokens) - 1  # (B, T)  -1 at t = 0


def two_back(tokens: Tensor) -> Tensor:
    return (_query_positions(tokens) - 2).clamp(min=-1)  # (B, T)


def first(tokens: Tensor) -> Tensor:
    return torch.where(_query_positions(tokens) > 0, 0, -1)  # (B, T)


def match(tokens: Tensor) -> Tensor:
    """The latest earlier key whose letter equals the query's (TAGGED tokens), else -1."""
    T = tokens.shape[-1]
    letters = tokens // DIGITS  # (B, T)
    earlier = torch.ones(T, T, dtype=torch.bool).tril(-1)  # (T, S)  s < t
    same = (letters[:, :, None] == letters[:, None, :]) & earlier  # (B, T, S)
    return torch.where(same, torch.arange(T), -1).amax(-1)  # (B, T)


@dataclass(frozen=True)
class Relation:
    name: str
    positions: Callable[[Tensor], Tensor]  # tokens (B, T) -> key position (B, T), -1 where undefined


@dataclass(frozen=True)
class Task:
    name: str
    title: str
    description: str
    vocab: tuple[str, ...]
    seq_len: int
    relations: tuple[Relation, ...]

    @property
    def relation_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.relations)

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        """Uniform random token ids (batch, seq_len)."""
        return torch.randint(len(self.vocab), (batch, self.seq_len), generator=generator)  # (B, T)

    def positions(self, tokens: Tensor) -> Tensor:
        """Key position of every relation at every query: (B, R, T), -1 where undefined."""
        return torch.stack([r.positions(tokens) for r in self.relations], dim=1)  # (B, R, T)

    def targets(self, tokens: Tensor) -> Tensor:
        """y[b, t, r] = tokens[b, j_r(t)], IGNORE where relation r is undefined: (B, T, R)."""
        j = self.positions(tokens).transpose(1, 2)  # (B, T, R)
        picked = tokens.gather(1, j.clamp(min=0).flatten(1)).view_as(j)  # (B, T, R)
        return torch.where(j >= 0, picked, IGNORE)  # (B, T, R)

    def probe(self) -> Tensor:
        """The fixed input whose attention the snapshots record: (seq_len,).

        Of PROBE_CANDIDATES fixed random sequences, the first with the most queries where a relation
        is defined and its key differs from the other relations' keys (so the heatmaps tell them apart).
        """
        candidates = self.sample(PROBE_CANDIDATES, torch.Generator().manual_seed(PROBE_SEED))  # (N, T)
        masks = relation_masks(self.positions(candidates).numpy(), self.seq_len)  # (N, R, T, S)
        return candidates[int(masks.sum((1, 2, 3)).argmax())]  # (T,)

    def token_names(self, tokens: Tensor) -> tuple[str, ...]:
        return tuple(self.vocab[i] for i in tokens.tolist())


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            TASK_NAMES[0],
            "Previous + first token",
            "At every position, report two tokens at once: the previous token and the first token "
            "of the sequence. Two positional relations.",
            LETTERS,
            10,
            (Relation("previous", previous), Relation("first", first)),
        ),
        Task(
            TASK_NAMES[1],
            "Previous + two back + first",
            "At every position, report three tokens at once: the previous token, the one two back, "
            "and the first token of the sequence. Three positional relations.",
            LETTERS,
            10,
            (Relation("previous", previous), Relation("two back", two_back), Relation("first", first)),
        ),
        Task(
            TASK_NAMES[2],
            "Previous + same letter",
            "Tokens are a letter with a digit (a0 … d5). At every position, report the previous token and "
            "the latest earlier token with the same letter as this one (so its digit). "
            "One positional and one content-based relation: the second depends on what the tokens are.",
            TAGGED,
            10,
            (Relation("previous", previous), Relation("same letter", match)),
        ),
    )
}
DEFAULT_TASK = TASK_NAMES[0]


def get_task(name: str) -> Task:
    """The task called name ("" is the default task)."""
    try:
        return TASKS[name or DEFAULT_TASK]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None
