"""Figures are built beside a complete pandas, or beside none that anyone is importing.

Plotly's validators and JSON encoder read pandas from sys.modules without the import lock
(`get_module("pandas", should_load=False)`), so a figure built while another thread was importing pandas
(Streamlit imports it for tables and dataframes) met a half-initialised module and failed ("partially initialized
module 'pandas' has no attribute 'Series'", found by bench/bench_heavy.py). Importing pandas before any figure
would fix it, but costs a cold server's first page ~0.3 s, and that page needs no pandas. So:
- every script run and fragment run builds its figures inside `figures_allowed()`;
- until pandas is imported in full, one run at a time may go on without it: that run holds _GATE, and pandas is
  imported by others only through `import_pandas()`, which takes _GATE, so nobody imports it beside that run
  (the run may import it itself, e.g. for a table: one thread, finished before its next figure);
- any other run imports pandas through `import_pandas()` first (waiting for the gate's run to end, or for pandas
  to be imported in full); heavy work (fair.heavy) and the warm-up thread import it too, so a long first run does
  not keep others waiting.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_GATE = threading.RLock()  # held by the one run that builds figures without pandas, and by a pandas import
_imported = threading.Event()  # pandas is imported in full: nothing to guard any more


def import_pandas() -> None:
    """Import pandas in full, never beside another thread's run that builds figures without it."""
    while not _imported.is_set():
        if _GATE.acquire(timeout=0.05):  # re-entrant: the gate's own run imports at once
            try:
                import pandas  # noqa: F401 - blocks until a pandas import begun elsewhere is complete

                _imported.set()
            finally:
                _GATE.release()


@contextmanager
def figures_allowed() -> Iterator[None]:
    """A block that builds figures: pandas is imported in full, or absent and imported by no other thread."""
    if not _imported.is_set() and _GATE.acquire(blocking=False):
        try:
            if "pandas" in sys.modules:  # imported (or being imported) by someone already: wait until complete
                import_pandas()
            yield
        finally:
            _GATE.release()
        return
    import_pandas()
    yield


def guarded(fragment: Callable[P, R]) -> Callable[P, R]:
    """A fragment's function that builds its figures inside figures_allowed() (a fragment rerun skips page.py's)."""
    @wraps(fragment)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with figures_allowed():
            return fragment(*args, **kwargs)

    return run
