"""The container a page draws into, emptied at once when the page becomes another one.

During a run, Streamlit leaves the previous run's elements on the page (faded) until this run draws over them or
ends. Between two states of one page that avoids a flicker; but a page that now trains a model (seconds) would show,
under its progress bar, the heatmaps of what was there before: another mode, another sentence. So the body has two
slots: it is drawn into one and the other is empty, and it changes slot when the page's identity changes. The slot it
leaves is replaced by an empty element at once (its old contents go with it), and the slot it enters held an empty
element, so it starts with nothing old in it.
"""

from __future__ import annotations

from collections.abc import Hashable

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from ..params import ViewState
from .state import kept, put

_SLOT = "_page_body"  # session key: (identity, slot) of the last run


def identity(s: ViewState) -> Hashable:
    """What makes one page another: the mode, the model shown, and the training a page would run."""
    training = (s.task, s.h, s.d_model, s.steps, s.seed, s.variant, s.diversity)  # the variant, the penalty
    if s.mode == "Train":
        return s.mode, *training
    if s.mode == "Pretrained":
        return s.mode, s.model.strip()
    return (s.mode, s.weights, *training) if s.weights == "trained" else (s.mode, s.weights)


def page_body(page: Hashable) -> DeltaGenerator:
    """The container to draw this run's page into (call once per run, at the same place)."""
    last, slot = kept(_SLOT, (page, 0))
    if last != page:
        slot = 1 - slot
    put(_SLOT, (page, slot))
    if slot == 0:  # one delta a slot: an empty then a container at one place could reach the browser one by one
        body = st.container()
        st.empty()
    else:
        st.empty()
        body = st.container()
    return body
