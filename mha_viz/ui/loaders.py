"""The server's loaded models, shared by every session (st.cache_resource), and the warm-up at server start.

page.py loads models through get_model; app.py's warm-up thread calls warm_up() when the server starts, so
that a session that opens a bundled model finds it loaded. A public demo's models are keyed by its token budget.
"""

from __future__ import annotations

import os
import sys
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


def log_timing(message: str) -> None:
    """With MHA_VIZ_TIMING=1, one line to stderr (start-up and page.py's runs: bench/bench_speed.py reads them)."""
    if os.environ.get("MHA_VIZ_TIMING") == "1":
        print(f"mha_viz timing: {message}", file=sys.stderr, flush=True)


def warm_up(wait: float = 0.0, after: float = 0.0, wanted: threading.Event | None = None) -> None:
    """Load both bundled models into get_model's cache, with the keys page.py will ask for (it runs at server start).

    wait: seconds to let a first page be drawn (page_drawn) and `after` seconds more for its browser to paint it,
    before the loads (~2.5 s of imports mostly, which would share the CPU with them), unless `wanted` is set
    meanwhile: a page that needs a model is on its way. A public demo then calibrates its training estimate on this
    machine and starts its training worker process."""
    _until_drawn(wait, after, wanted)
    import_model_code()
    for name in ("", INDUCTION_MODEL) if bundled_model_installed() else (INDUCTION_MODEL,):
        bundled_model(name)
    if is_public(secret=secret):
        calibrate()  # this machine's training step (serve.training_budget), measured before a training page needs it
        start_worker()  # a public demo trains there (mha_viz.training.isolated): its start is not in a page's turn


def _until_drawn(wait: float, after: float, wanted: threading.Event | None) -> None:
    """Wait at most `wait` seconds for a first page drawn (page_drawn), then `after` seconds; or until `wanted`."""
    deadline = time.monotonic() + wait
    drawn: float | None = None  # when page_drawn was seen set
    while not (wanted is not None and wanted.is_set()) and time.monotonic() < deadline:
        if drawn is None and page_drawn.is_set():
            drawn = time.monotonic()
        if drawn is not None and time.monotonic() >= drawn + after:
            return
        time.sleep(0.05)
