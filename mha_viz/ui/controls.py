"""Sidebar widgets of the configurable model. Every widget's key is a ViewState field name."""

from __future__ import annotations

import streamlit as st

from ..config import nearest_valid_heads, valid_head_counts
from ..params import D_MODEL_CHOICES, EXAMPLES, MAX_HEAD_WIDTH, MAX_HEADS, MAX_SEED, MAX_TEXT_CHARS

ADVANCED_OPEN = "advanced_open"  # session key of the Advanced expander's state
ADVANCED_FIELDS = ("d_k", "d_v", "d_out", "seed", "causal", "pe", "cross", "context")


def _use_example() -> None:
    choice = st.session_state.get("example")
    if choice in EXAMPLES:
        st.session_state["text"] = EXAMPLES[choice]
    st.session_state["example"] = None


def _set_heads(h: int) -> None:
    st.session_state["h"] = h


def configurable_controls() -> None:
    """Sentence, h, d_model and the advanced section; values land in st.session_state."""
    st.text_area("Sentence", key="text", max_chars=MAX_TEXT_CHARS, height=90, help="Words and punctuation become tokens.")
    st.selectbox(
        "Example sentences", list(EXAMPLES), index=None, key="example", on_change=_use_example,
        placeholder="Load an example…",
    )
    st.slider("Number of heads h", 1, MAX_HEADS, key="h", help="Each head gets d_k = d_model / h dimensions.")
    st.selectbox("d_model", D_MODEL_CHOICES, key="d_model", help="Width of every token vector.")
    section = st.expander("Advanced", key=ADVANCED_OPEN, on_change="rerun")
    if not section.open:  # a closed expander would still send its 10 widgets to the browser on every rerun
        return
    with section:
        st.caption("Leave a width empty for the standard choice: d_k = d_v = d_model / h, d_out = d_model.")
        c1, c2, c3 = st.columns(3)
        c1.number_input("d_k", 1, MAX_HEAD_WIDTH, key="d_k", placeholder="auto")
        c2.number_input("d_v", 1, MAX_HEAD_WIDTH, key="d_v", placeholder="auto")
        c3.number_input("d_out", 1, MAX_HEAD_WIDTH, key="d_out", placeholder="auto")
        st.number_input("Seed (weights and token vectors)", 0, MAX_SEED, key="seed", step=1)
        st.toggle("Causal mask (no looking ahead)", key="causal")
        st.toggle("Positional encoding", key="pe")
        st.toggle("Cross-attention (keys and values from a second sentence)", key="cross")
        if st.session_state.get("cross"):
            st.text_area("Second sentence (keys and values)", key="context", max_chars=MAX_TEXT_CHARS, height=80)


def explain_invalid_heads(h: int, d_model: int) -> None:
    """Why h must divide d_model, with one-click nearest valid choices."""
    near = nearest_valid_heads(d_model, h, MAX_HEADS)
    valid = valid_head_counts(d_model, MAX_HEADS)
    st.error(
        f"**h = {h} does not divide d_model = {d_model}.** Each head works in d_k = d_model / h = "
        f"{d_model}/{h} = {d_model / h:.3g} dimensions, and a head cannot have a fraction of a dimension: "
        f"the {h} heads together must split the {d_model} dimensions exactly. "
        f"Valid h for d_model = {d_model}: {', '.join(map(str, valid))}. "
        "Or set d_k and d_v yourself under Advanced."
    )
    cols = st.columns(len(near) + 1)
    for col, choice in zip(cols, near):
        col.button(f"Use h = {choice}", key=f"use_h_{choice}", on_click=_set_heads, args=(choice,))
