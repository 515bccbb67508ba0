"""The sidebar: the mode, then that mode's controls (a pretrained model is loaded here, for its layer controls)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from ..params import MODES
from ..pretrained import PretrainedModel
from ..serve.hosting import allowed_models
from . import controls, lessons, pretrained
from .loaders import secret
from .text import plain
from .training import training_controls


@dataclass(frozen=True)
class Sidebar:
    """What the sidebar set: the mode, the model it loaded (pretrained mode), why it could not, and its notices."""

    mode: str
    model: PretrainedModel | None = None
    load_failure: str | None = None
    notices: tuple[str, ...] = ()


def sidebar(load: Callable[[str], PretrainedModel]) -> Sidebar:
    """Draw the sidebar (call inside `with st.sidebar`); load: the model loader (ValueError saying why not)."""
    st.title("mha-viz")
    st.caption("Multi-head attention, head by head: Q, K, V, softmax, concat, W_O.")
    lessons.menu()
    mode = st.segmented_control("Model", MODES, key="mode", required=True)
    if mode == "Configurable":
        controls.configurable_controls()
        return Sidebar(mode)
    if mode == "Train":
        training_controls()
        return Sidebar(mode)
    allowed = allowed_models(secret=secret("allowed_models"))
    fallback = pretrained.without_minilm(allowed)
    name = pretrained.model_field(allowed)
    try:
        with st.spinner(f"Loading {name or 'the bundled model'}…"):
            model = load(name)
    except ValueError as err:
        failure = f"Could not load the model {plain(name)}: {plain(str(err))}"
        st.error(failure)
        return Sidebar(mode, load_failure=failure)
    return Sidebar(mode, model, notices=(*fallback, *pretrained.layer_controls(model)))
