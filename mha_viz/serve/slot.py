"""One large export at a time per server process: N people asking for a 170 MB JSON at once cost the memory of one
export, not N (bench/RESULTS-export.md). The library's export_bytes builds a file; build_export builds it inside
export_slot."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..export import export_bytes, export_size
from ..trace import AttentionTrace

LARGE_EXPORT_BYTES = 16_000_000  # build_export builds an export at least this large only inside export_slot
EXPORT_WAIT_SECONDS = 60.0  # how long build_export waits for the slot before raising ExportBusy
_LARGE_EXPORTS = threading.BoundedSemaphore(1)


class ExportBusy(RuntimeError):
    """Another large export is being built in this process and the wait ran out; try again shortly."""


@contextmanager
def export_slot(nbytes: int, timeout: float | None = EXPORT_WAIT_SECONDS) -> Iterator[None]:
    """Hold this process's one slot for large exports while building an export of about nbytes.

    Below LARGE_EXPORT_BYTES: no wait. Otherwise waits up to timeout seconds (None: for as long as it
    takes) for a large export in another thread to finish, else raises ExportBusy.
    """
    if nbytes < LARGE_EXPORT_BYTES:
        yield
        return
    if not _LARGE_EXPORTS.acquire(timeout=timeout):
        raise ExportBusy(f"another large export is being built; try again in a minute (this one: {nbytes / 1e6:.0f} MB)")
    try:
        yield
    finally:
        _LARGE_EXPORTS.release()


def build_export(
    trace: AttentionTrace,
    fmt: str,
    *,
    compress: bool = True,
    array_format: str = "lists",
    dtype: str | None = None,
    timeout: float | None = EXPORT_WAIT_SECONDS,
) -> bytes:
    """export_bytes(trace, fmt, ...) built inside export_slot (its size known first, export_size): ExportBusy after
    timeout seconds of waiting for another large export."""
    size = export_size(trace, fmt, array_format=array_format, dtype=dtype)
    with export_slot(size, timeout):
        return export_bytes(trace, fmt, compress=compress, array_format=array_format, dtype=dtype)
