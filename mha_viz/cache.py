"""A thread-safe cache bounded by bytes, for values many threads share: the worst case is a number, not a product.

    cache = ByteBudgetCache(max_bytes=1 << 30)
    trace = cache.get(("configurable", text, h), lambda: configurable_trace(text, cfg))

What it holds is measured by the numpy arrays and torch tensors inside (AttentionTraces, long traces, tuples of
them, dataclasses such as TrainingRun or Generation, dicts): sizeof() walks the value. When a new value would take the total
over max_bytes, the least recently used values are dropped first; a value larger than the whole budget
is returned but not kept. Two threads that ask for the same key at once compute it once. Values are
shared, not copied: callers must not modify them (AttentionTrace.read_only() makes traces safe).

RSS follows the budget because freed memory is handed back: computing a value of n bytes allocates
and frees more than n (a 512-token, 12-head trace of 44 MB leaves 10-20 MB of freed heap that glibc
keeps for reuse, so RSS grew ~1.4x the pickle size); after computing a value of TRIM_BYTES or more,
and after dropping values, release_freed_memory() (glibc's malloc_trim) returns it to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
TRIM_BYTES = 8 << 20  # computing a value this large frees enough heap to be worth handing back


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Give the heap memory Python and torch have freed back to the system (a few ms; no-op without glibc)."""
    if _TRIM is not None:
        _TRIM(0)


def sizeof(value: Any, _seen: set[int] | None = None) -> int:
    """Bytes of the numpy arrays (and bytes/str payloads) inside value, each object counted once."""
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if type(value).__module__.startswith("torch") and hasattr(value, "element_size"):  # a tensor (a long trace's)
        return int(value.nelement() * value.element_size())
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
                if self._put(key, value) >= TRIM_BYTES:
                    release_freed_memory()
                return value
            finally:
                with self._lock:
                    self._computing.pop(key, None)

    def peek(self, key: Hashable) -> Any | None:
        """The value for key if the cache holds it (counting as a use), else None; never computes."""
        with self._lock:
            if key not in self._values:
                return None
            self._values.move_to_end(key)
            return self._values[key][0]

    def put(self, key: Hashable, value: Any) -> None:
        """Keep value under key, replacing what key held (e.g. the latest figures of one user's report)."""
        with self._lock:
            if key in self._values:
                _, size = self._values.pop(key)
                self._total -= size
        if self._put(key, value) >= TRIM_BYTES:
            release_freed_memory()

    def _put(self, key: Hashable, value: Any) -> int:
        """Keep value (dropping the least recently used ones to make room); return its size plus what was dropped."""
        size = sizeof(value)
        with self._lock:
            if size > self.max_bytes:
                return size  # larger than the whole budget: used once, never kept
            freed = 0
            while self._values and self._total + size > self.max_bytes:
                _, (_, dropped) = self._values.popitem(last=False)
                self._total -= dropped
                freed += dropped
            self._values[key] = (value, size)
            self._total += size
            return size + freed

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._total = 0
