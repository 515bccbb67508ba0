"""mha-viz: multi-head attention made visible.  Run: streamlit run app.py"""

from __future__ import annotations

import streamlit as st
import torch

from mha_viz import MHAConfig, MultiHeadAttention, embed_tokens, tokenize
from mha_viz.params import MAX_TOKENS, VIEWS
from mha_viz.trace import AttentionTrace
from mha_viz.ui import controls, state, views

st.set_page_config(page_title="mha-viz: multi-head attention, visible", layout="wide")


@st.cache_data(max_entries=64, show_spinner=False)
def configurable_trace(
    query_tokens: tuple[str, ...],
    key_tokens: tuple[str, ...] | None,
    cfg: MHAConfig,
    seed: int,
    causal: bool,
    pe: bool,
) -> AttentionTrace:
    """The configurable model's trace; cached on plain arguments."""
    mha = MultiHeadAttention(
        cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out, seed=seed
    )
    x = embed_tokens(list(query_tokens), cfg.d_model, seed=seed, positional=pe)  # (T, d_model)
    c = None if key_tokens is None else embed_tokens(list(key_tokens), cfg.d_model, seed=seed, positional=pe)  # (S, d_model)
    with torch.inference_mode():
        return mha(x, c, causal=causal, query_tokens=query_tokens, key_tokens=key_tokens)


def tokens_or_stop(text: str, what: str) -> tuple[str, ...]:
    tokens = tokenize(text, MAX_TOKENS + 1)
    if not tokens:
        st.info(f"Type a {what} to see its attention (it has no visible characters yet).")
        st.stop()
    if len(tokens) > MAX_TOKENS:
        st.warning(f"The {what} is longer than {MAX_TOKENS} tokens; only the first {MAX_TOKENS} are shown.")
    return tuple(tokens[:MAX_TOKENS])


notices = state.seed_from_url()
with st.sidebar:
    st.title("mha-viz")
    st.caption("Multi-head attention, head by head: Q, K, V, softmax, concat, W_O.")
    controls.configurable_controls()
s = state.current()
state.write_url(s)
for notice in notices:
    st.warning(notice, icon="🔗")

st.header("Multi-head attention, visible")
if s.d_model % s.h and (s.d_k is None or s.d_v is None):
    controls.explain_invalid_heads(s.h, s.d_model)
    st.stop()
cfg = MHAConfig(s.d_model, s.h, d_k=s.d_k, d_v=s.d_v, d_out=s.d_out)
q_tokens = tokens_or_stop(s.text, "sentence")
k_tokens = tokens_or_stop(s.context, "second sentence") if s.cross else None
trace = configurable_trace(q_tokens, k_tokens, cfg, s.seed, s.causal, s.pe)
T, S = trace.weights.shape[1:]
st.caption(
    f"h = {cfg.num_heads} heads · d_model = {cfg.d_model} · d_k = {cfg.d_k} · d_v = {cfg.d_v} · d_out = {cfg.d_out}"
    f" · {T} query tokens" + (f" · {S} key tokens (cross-attention)" if s.cross else "") + (" · causal" if s.causal else "")
)

view = st.segmented_control("View", VIEWS, key="view", required=True, label_visibility="collapsed")
if view == "Heads":
    views.heads_view(trace, "configurable")
elif view == "One head":
    views.head_view(trace, "configurable")
elif view == "Concat → W_O":
    views.output_path_view(trace, "configurable")
elif view == "Shapes & cost":
    views.cost_view(cfg, T, S)
else:
    views.formulas_view(cfg, T, S, s.causal)
