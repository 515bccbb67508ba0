"""The shared, byte-bounded cache of every session's traces (mha_viz.cache.ByteBudgetCache), importable by the
app's modules: what a session keeps between runs (a download's callable, a fragment's arguments) is a key into
it or a cheap function that reads it again, never the data."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import TypeVar

import streamlit as st

from ..cache import ByteBudgetCache
from ..serve.hosting import cache_bytes
from . import fair
from .loaders import secret

T = TypeVar("T")


@st.cache_resource(show_spinner=False)
def shared_cache() -> ByteBudgetCache:
    """Every session's traces, generations, detector scores and training runs, together at most MHA_VIZ_CACHE_MB."""
    return ByteBudgetCache(cache_bytes(secret=secret))


def cached(key: tuple[Hashable, ...], compute: Callable[[], T], spinner: str | None = None, heavy: bool = False) -> T:
    """The shared cache's value for key, computed when it holds none: under a spinner (if given), and as heavy
    work (one request at a time across sessions, fair.heavy) when heavy."""
    cache = shared_cache()
    if key in cache:
        return cache.get(key, compute)
    with fair.heavy(spinner or "A long computation") if heavy else contextlib.nullcontext():
        if spinner is None:
            return cache.get(key, compute)
        with st.spinner(spinner):
            return cache.get(key, compute)
