"""A cache bounded by bytes, shared by every session of a server: the worst case is a number, not a product.

    cache = ByteBudgetCache(max_bytes=1 << 30)
    trace = cache.get(("configurable", text, h), lambda: configurable_trace(text, cfg))

What it holds is measured by the numpy arrays inside (AttentionTraces, tuples of them, dataclasses such
as TrainingRun or Generation, dicts): sizeof() walks the value. When a new value would take the total
over max_bytes, the least recently used values are dropped first; a value larger than the whole budget
is returned but not kept. Two sessions that ask for the same key at once compute it once. Values are
shared, not copied: callers must not modify them (AttentionTrace.read_only() makes traces safe).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def sizeof(value: Any, _seen: set[int] | None = None) -> int:
    """Bytes of the numpy arrays (and bytes/str payloads) inside value, each object counted once."""
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(sizeof(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if isinstance(value, Mapping):
        return sum(sizeof(k, seen) + sizeof(v, seen) for k, v in value.items())
    if isinstance(value, (tuple, list, set, frozenset)):
        return sum(sizeof(v, seen) for v in value)
    return 0


class ByteBudgetCache:
    """A thread-safe LRU cache whose values together hold at most max_bytes of arrays."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._values: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()  # key -> (value, bytes), LRU first
        self._total = 0
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    @property
    def total_bytes(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value for key: cached, or compute()d now (once, however many threads ask), then cached."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key][0]
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:  # the first caller computes; the others wait here, then find the value
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    return self._values[key][0]
            try:
                value = compute()
                self._put(key, value)
                return value
            finally:
                with self._lock:
                    self._computing.pop(key, None)

    def _put(self, key: Hashable, value: Any) -> None:
        size = sizeof(value)
        with self._lock:
            if size > self.max_bytes:
                return  # larger than the whole budget: used once, never kept
            while self._values and self._total + size > self.max_bytes:
                _, (_, dropped) = self._values.popitem(last=False)
                self._total -= dropped
            self._values[key] = (value, size)
            self._total += size

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._total = 0
