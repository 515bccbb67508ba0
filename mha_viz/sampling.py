"""How a causal language model picks each next token: one value for every generation setting.

    greedy   (temperature 0): the most likely token; top_k, top_p and seed are unused
    sampling: softmax(logits / temperature), then the top_k most likely tokens, then the smallest set of the
              most likely whose probabilities reach top_p (each renormalised), drawn with a generator seeded by seed
The app's URL and widgets spell "off" as top_k 0 and top_p 1: Sampling.from_settings reads that spelling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Sampling:
    """Generation settings (see the module docstring). ValueError for a value that makes no sense; numpy
    numbers are kept as the equal Python numbers, so equal settings are equal values (a cache key)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not _is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {self.temperature!r}")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and (not _is_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be None or a number in (0, 1], got {self.top_p!r}")
        if not _is_int(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_k", None if self.top_k is None else int(self.top_k))
        object.__setattr__(self, "top_p", None if self.top_p is None else float(self.top_p))
        object.__setattr__(self, "seed", int(self.seed))

    @classmethod
    def from_settings(cls, temperature: float, top_k: int, top_p: float, seed: int) -> Sampling:
        """The app's spelling: top_k 0 and top_p 1 are off, and a greedy setting (temperature 0) keeps no filter."""
        sampled = temperature > 0
        return cls(temperature, top_k or None if sampled else None, top_p if sampled and top_p < 1 else None, seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        """In words: "greedy: the most likely token", or the temperature and the filters in use, and the seed."""
        if self.greedy:
            return "greedy: the most likely token"
        return (f"sampled at temperature {self.temperature:g}" + (f", top-k {self.top_k}" if self.top_k else "")
                + (f", top-p {self.top_p:g}" if self.top_p else "") + f", seed {self.seed}")


GREEDY = Sampling()  # the default: always the most likely token
