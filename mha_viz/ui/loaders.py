"""The server's loaded models, shared by every session (st.cache_resource), and the warm-up at server start.

page.py loads models through get_model; app.py's warm-up thread calls warm_up() when the server starts, so
that a session that opens a bundled model finds it loaded. A public demo's models are keyed by its token budget.
"""

from __future__ import annotations

import threading
import time

import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

from ..pretrained import (
    INDUCTION_MODEL,
    InvalidModelNameError,
    ModelDownloadError,
    PretrainedModel,
    bundled_model_installed,
    load_model,
)
from ..pretrained.loading import import_model_code
from ..serve.hosting import ModelRefusedError, budget, hub_model_bytes, is_public
from ..serve.training_budget import calibrate
from ..training.isolated import start_worker
from .pandas_guard import import_pandas


def secret(key: str) -> str | None:
    """A Streamlit secret, or None when the deployment has no secrets file."""
    try:
        value = st.secrets.get(key)
    except (FileNotFoundError, KeyError, ValueError, StreamlitSecretNotFoundError):
        return None
    return None if value is None else str(value)


@st.cache_resource(max_entries=2, show_spinner=False)
def get_model(name: str, folders: bool, max_tokens: int | None) -> PretrainedModel:
    """One loaded model shared by every session ("" is the bundled MiniLM; folders: may name a local folder)."""
    return load_model(name or None, folders=folders, max_tokens=max_tokens)


def bundled_model(name: str) -> PretrainedModel:
    """A bundled model ("" is MiniLM, else mha-viz/induction-2l) as every session shares it: loaded once, within a
    public demo's token budget."""
    return get_model(name, False, budget(secret=secret).max_tokens if is_public(secret=secret) else None)


@st.cache_data(ttl=300, max_entries=32, show_spinner=False)
def download_error(name: str, folders: bool, max_tokens: int | None) -> str | None:
    """Why name cannot be found or downloaded, or None: remembered for 5 minutes, not asked of the hub again
    on every rerun. Other failures are raised, never remembered: the next try may work."""
    try:
        get_model(name, folders, max_tokens)
    except (ModelDownloadError, InvalidModelNameError) as err:
        return str(err)
    return None


@st.cache_data(ttl=300, max_entries=64, show_spinner=False)
def model_bytes(name: str) -> int | str:
    """hosting.hub_model_bytes(name), or why it cannot be learnt: remembered for 5 minutes, so that the hub is
    not asked again on every rerun (nor waited for, when it does not answer)."""
    try:
        return hub_model_bytes(name)
    except ValueError as err:  # ModelRefusedError, or a name that is no hub id
        return str(err)


def model_size(name: str) -> int:
    """model_bytes(name); ModelRefusedError when its size cannot be learnt."""
    size = model_bytes(name)
    if isinstance(size, str):
        raise ModelRefusedError(size)
    return size


page_drawn = threading.Event()  # set by page.py at the end of each run: a first page has been drawn


def warm_up(wait: float = 0.0, wanted: threading.Event | None = None, painted: threading.Event | None = None) -> None:
    """Load both bundled models into get_model's cache, with the keys page.py will ask for (it runs at server start),
    then import pandas.

    wait: seconds to let a first page be drawn, and then painted in its browser (`painted`: set when a browser says
    it has painted a chart, app.py), before the loads (~2.5 s of imports mostly, which would share the CPU with
    them), unless `wanted` is set meanwhile: a page that needs a model is on its way; and again before pandas. A public
    demo then calibrates its training estimate on this machine and starts its training worker process."""
    _until_painted(wait, wanted, painted)
    import_model_code()
    for name in ("", INDUCTION_MODEL) if bundled_model_installed() else (INDUCTION_MODEL,):
        bundled_model(name)
    _until_painted(wait, None, painted)  # a page that wanted a model may still be drawing: pandas can wait
    import_pandas()  # for tables; a first page goes without it (pandas_guard)
    if is_public(secret=secret):
        calibrate()  # this machine's training step (serve.training_budget), measured before a training page needs it
        start_worker()  # a public demo trains there (mha_viz.training.isolated): its start is not in a page's turn


def _until_painted(wait: float, wanted: threading.Event | None, painted: threading.Event | None) -> None:
    """Wait at most `wait` seconds for a first page drawn (page_drawn) and painted (painted), or for `wanted`."""
    deadline = time.monotonic() + wait
    for event in (page_drawn, painted):
        while (event is not None and not event.is_set() and not (wanted is not None and wanted.is_set())
               and time.monotonic() < deadline):
            event.wait(0.05)
