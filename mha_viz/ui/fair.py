"""Fair sharing of the server: heavy work (training, model passes over long texts, generation, knockout
rankings, head detectors) runs one request at a time, so a light page of another session never competes
with more than one heavy request for the CPU and the interpreter; the others wait their turn, and say so.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from .pandas_guard import import_pandas

_HEAVY = threading.Semaphore(1)  # one per server process: this module is imported once
_waiting = 0  # heavy requests waiting now (for the message)
_lock = threading.Lock()
_held = threading.local()  # this thread already holds the turn (heavy work inside heavy work)


@contextmanager
def heavy(what: str) -> Iterator[None]:
    """Run the block as heavy work: at once if no other session's heavy work runs, else after it (with a message).

    Nested heavy blocks of one thread share its turn. The turn is released however the block ends, even
    when Streamlit stops the run (the user changed something) while it waits or works.
    """
    global _waiting
    import_pandas()  # a long run must not keep others from importing it (pandas_guard)
    if getattr(_held, "turn", False):
        yield
        return
    acquired = _HEAVY.acquire(blocking=False)
    try:
        if not acquired:
            with _lock:
                _waiting += 1
                ahead = _waiting
            try:
                with st.spinner(f"{what}: waiting for another session's heavy request to finish "
                                f"({ahead} waiting, one runs at a time so that every page stays quick)…"):
                    acquired = _HEAVY.acquire()
            finally:
                with _lock:
                    _waiting -= 1
        _held.turn = True
        yield
    finally:
        _held.turn = False
        if acquired:
            _HEAVY.release()


def leave_a_core_free() -> None:
    """On a public demo, torch computes on one thread: heavy work then takes one core, not all of them, and
    the other stays free for every other session's light pages (small matrices gain little from more)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
