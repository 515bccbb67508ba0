"""The server's loaded models, shared by every session (st.cache_resource), and the warm-up at server start.

page.py loads models through get_model; app.py's warm-up thread calls warm_up() when the server starts, so
that a session that opens a bundled model finds it loaded. A public demo's models are keyed by its token budget.
"""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

from ..hosting import budget, is_public
from ..pretrained import INDUCTION_MODEL, InvalidModelNameError, ModelDownloadError, PretrainedModel, load_model


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


@st.cache_data(ttl=300, max_entries=32, show_spinner=False)
def download_error(name: str, folders: bool, max_tokens: int | None) -> str | None:
    """Why name cannot be found or downloaded, or None: remembered for 5 minutes, not asked of the hub again
    on every rerun. Other failures are raised, never remembered: the next try may work."""
    try:
        get_model(name, folders, max_tokens)
    except (ModelDownloadError, InvalidModelNameError) as err:
        return str(err)
    return None


def warm_up() -> None:
    """Load both bundled models into get_model's cache, with the keys page.py will ask for (it runs at server start)."""
    max_tokens = budget(secret=secret).max_tokens if is_public(secret=secret) else None
    for name in ("", INDUCTION_MODEL):
        get_model(name, False, max_tokens)
