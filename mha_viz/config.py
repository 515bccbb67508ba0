"""The shape of one multi-head attention layer, validated once.

Conventions (used everywhere in mha_viz):
    H       number of heads            d_model  width of the query-side input
    G       kv_heads: key/value heads  (G = H: multi-head; G < H, a divisor of H: grouped-query; G = 1: multi-query)
    d_k     query/key width per head   d_v      value width per head
    d_out   output width after W_O     d_context width of the key/value-side input
Defaults follow "Attention Is All You Need": d_k = d_v = d_model / H, d_out = d_model, G = H.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass


def valid_head_counts(d_model: int, max_heads: int | None = None) -> list[int]:
    """Every h that divides d_model (so d_k = d_model / h is a whole number)."""
    top = d_model if max_heads is None else min(d_model, max_heads)
    return [h for h in range(1, top + 1) if d_model % h == 0]


def divisors(n: int) -> list[int]:
    """Every whole number that divides n: the valid kv_heads for n query heads."""
    return [g for g in range(1, n + 1) if n % g == 0]


def nearest_divisor(n: int, value: int) -> int:
    """The divisor of n closest to value (the larger one on a tie)."""
    return min(divisors(n), key=lambda g: (abs(g - value), -g))


def nearest_valid_heads(d_model: int, num_heads: int, max_heads: int | None = None) -> list[int]:
    """The divisors of d_model closest to num_heads (one, or two on a tie)."""
    choices = valid_head_counts(d_model, max_heads)
    if not choices:
        raise ValueError(f"no valid head count for d_model={d_model} with max_heads={max_heads}")
    best = min(abs(h - num_heads) for h in choices)
    return [h for h in choices if abs(h - num_heads) == best]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class MHAConfig:
    """Dimensions of one attention layer; unset widths take the standard defaults."""

    d_model: int
    num_heads: int
    d_k: int | None = None
    d_v: int | None = None
    d_out: int | None = None
    d_context: int | None = None
    bias: bool = True
    kv_heads: int | None = None  # key/value heads, a divisor of num_heads; query head h reads K/V head h // (H / G)

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "d_k", "d_v", "d_out", "d_context", "kv_heads"):
            if name in ("d_model", "num_heads") or getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        if self.d_model % self.num_heads and (self.d_k is None or self.d_v is None):
            near = " or ".join(str(h) for h in nearest_valid_heads(self.d_model, self.num_heads))
            raise ValueError(
                f"h={self.num_heads} does not divide d_model={self.d_model}: each head would get "
                f"{self.d_model / self.num_heads:.3g} dimensions (d_k = d_model / h must be a whole "
                f"number). Nearest valid h: {near}. Or set d_k and d_v explicitly."
            )
        if self.kv_heads is not None and self.num_heads % self.kv_heads:
            raise ValueError(
                f"kv_heads={self.kv_heads} does not divide num_heads={self.num_heads}: each key/value head must serve "
                f"the same number of query heads. Valid kv_heads: {', '.join(map(str, divisors(self.num_heads)))}."
            )
        default = self.d_model // self.num_heads
        object.__setattr__(self, "d_k", self.d_k or default)
        object.__setattr__(self, "d_v", self.d_v or default)
        object.__setattr__(self, "d_out", self.d_out or self.d_model)
        object.__setattr__(self, "d_context", self.d_context or self.d_model)
        object.__setattr__(self, "kv_heads", self.kv_heads or self.num_heads)

    @property
    def group_size(self) -> int:
        """How many query heads share one key/value head: num_heads / kv_heads (1: multi-head attention)."""
        return self.num_heads // self.kv_heads

    def kv_head(self, head: int) -> int:
        """The key/value head that query head `head` reads: head // group_size."""
        return head // self.group_size

    @property
    def concat_width(self) -> int:
        """H * d_v, the width of the concatenated head outputs fed to W_O."""
        return self.num_heads * self.d_v

    @property
    def is_standard(self) -> bool:
        """True for d_k = d_v = d_model / H and d_out = d_context = d_model."""
        return (
            self.d_model % self.num_heads == 0
            and self.d_k == self.d_v == self.d_model // self.num_heads
            and self.d_out == self.d_context == self.d_model
            and self.kv_heads == self.num_heads
        )
