"""mha-viz: multi-head attention made visible.  Run: streamlit run app.py"""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch
from streamlit.errors import StreamlitSecretNotFoundError

from mha_viz import MHAConfig, MultiHeadAttention, embed_tokens, tokenize
from mha_viz.analysis import without_tokens
from mha_viz.export import safe_filename
from mha_viz.hosting import allowed_models
from mha_viz.params import MAX_TOKENS, MODES, ViewState, to_query
from mha_viz.pretrained import ModelLoadError, PretrainedModel, load_model
from mha_viz.trace import AttentionTrace
from mha_viz.ui import controls, pretrained, state, views
from mha_viz.ui.analysis import analysis_view
from mha_viz.ui.export import export_section
from mha_viz.ui.text import plain
from mha_viz.ui.training import trained_run, training_controls, training_page

st.set_page_config(page_title="mha-viz: multi-head attention, visible", layout="wide")

CONFIGURABLE_VIEWS = ("Heads", "One head", "Concat → W_O", "Analysis", "Shapes & cost", "Formulas")
PRETRAINED_VIEWS = ("Heads", "Overview", "One head", "Concat → W_O", "Analysis")
TRAIN_VIEWS = ("Training", "One head", "Concat → W_O", "Analysis")


# Bounded caches: a 512-token, 16-head trace is ~50 MB; all six layers of the bundled model ~180 MB.
@st.cache_data(max_entries=16, show_spinner=False)
def configurable_trace(
    query_tokens: tuple[str, ...], key_tokens: tuple[str, ...] | None, cfg: MHAConfig, seed: int, causal: bool, pe: bool
) -> AttentionTrace:
    """The configurable model's trace; cached on plain arguments."""
    mha = MultiHeadAttention(cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out, seed=seed)
    x = embed_tokens(list(query_tokens), cfg.d_model, seed=seed, positional=pe)  # (T, d_model)
    c = None if key_tokens is None else embed_tokens(list(key_tokens), cfg.d_model, seed=seed, positional=pe)  # (S, d_model)
    with torch.inference_mode():
        return mha(x, c, causal=causal, query_tokens=query_tokens, key_tokens=key_tokens)


@st.cache_resource(max_entries=2, show_spinner=False)
def get_model(name: str) -> PretrainedModel:
    """One loaded model shared by every session ("" is the bundled MiniLM)."""
    return load_model(name or None)


@st.cache_data(ttl=300, max_entries=32, show_spinner=False)
def load_error(name: str) -> str | None:
    """Why name cannot be loaded, or None; failures are remembered for 5 minutes, not retried per rerun."""
    try:
        get_model(name)
    except (ModelLoadError, ValueError, OSError) as err:
        return str(err)
    return None


@st.cache_resource(max_entries=3, show_spinner=False)
def pretrained_traces(name: str, text: str, part: str, decoder_text: str | None) -> tuple[AttentionTrace, ...]:
    """Every layer of text from one forward pass, so that a layer change is a cache hit.

    cache_resource shares the traces instead of copying them on every rerun (all layers of a
    512-token text are ~180 MB for the bundled model); their arrays are read-only.
    """
    return tuple(t.read_only() for t in get_model(name).traces(text, part=part, decoder_text=decoder_text))


@st.cache_data(max_entries=4, show_spinner=False)
def pretrained_attentions(name: str, text: str, part: str, decoder_text: str | None) -> np.ndarray:
    return get_model(name).attentions(text, part=part, decoder_text=decoder_text)


def secret(key: str) -> str | None:
    """A Streamlit secret, or None when the deployment has no secrets file."""
    try:
        return st.secrets.get(key)
    except (FileNotFoundError, KeyError, ValueError, StreamlitSecretNotFoundError):
        return None


def allowed_model(name: str) -> PretrainedModel:
    """The loaded model ("" is the bundled one): the demo's allow-list applies; failures are ValueErrors saying why."""
    allowed = allowed_models(secret=secret("allowed_models"))
    if allowed is not None and name not in allowed:
        raise ValueError(f"this demo only loads {', '.join(m or 'the bundled model' for m in allowed)}")
    error = load_error(name)
    if error:
        raise ValueError(error)
    return get_model(name)


def tokens_or_stop(text: str, what: str) -> tuple[str, ...]:
    tokens = tokenize(text, MAX_TOKENS + 1)
    if not tokens:
        st.info(f"Type a {what} to see its attention (it has no visible characters yet).")
        st.stop()
    if len(tokens) > MAX_TOKENS:
        st.warning(f"The {what} is longer than {MAX_TOKENS} tokens; only the first {MAX_TOKENS} are shown.")
    return tuple(tokens[:MAX_TOKENS])


def view_picker(options: tuple[str, ...]) -> str:
    if st.session_state.get("view") not in options:
        st.session_state["view"] = options[0]
    return st.segmented_control("View", options, key="view", required=True, label_visibility="collapsed")


def configurable_page(s: ViewState) -> None:
    if s.d_model % s.h and (s.d_k is None or s.d_v is None):
        controls.explain_invalid_heads(s.h, s.d_model)
        return
    cfg = MHAConfig(s.d_model, s.h, d_k=s.d_k, d_v=s.d_v, d_out=s.d_out)
    q_tokens = tokens_or_stop(s.text, "sentence")
    k_tokens = tokens_or_stop(s.context, "second sentence") if s.cross else None
    trace = configurable_trace(q_tokens, k_tokens, cfg, s.seed, s.causal, s.pe)
    T, S = trace.weights.shape[1:]
    st.caption(
        f"h = {cfg.num_heads} heads · d_model = {cfg.d_model} · d_k = {cfg.d_k} · d_v = {cfg.d_v} · d_out = {cfg.d_out}"
        f" · {T} query tokens" + (f" · {S} key tokens (cross-attention)" if s.cross else "") + (" · causal" if s.causal else "")
    )
    view = view_picker(CONFIGURABLE_VIEWS)
    if view == "Heads":
        views.heads_view(trace, "configurable")
    elif view == "One head":
        views.head_view(trace, "configurable")
    elif view == "Concat → W_O":
        views.output_path_view(trace, "configurable")
    elif view == "Analysis":

        def retrace(other: str) -> AttentionTrace:
            tokens = tuple(tokenize(other, MAX_TOKENS))
            if not tokens:
                raise ValueError("the sentence has no tokens")
            return configurable_trace(tokens, k_tokens, cfg, s.seed, s.causal, s.pe)

        analysis_view(trace, name="configurable", retrace=retrace)
    elif view == "Shapes & cost":
        views.cost_view(cfg, T, S)
    else:
        views.formulas_view(cfg, T, S, s.causal)
    export_section(
        trace, name=f"configurable-h{cfg.num_heads}-d{cfg.d_model}", share_query=to_query(s),
        title=f"Multi-head attention: h = {cfg.num_heads}, d_model = {cfg.d_model}",
        notes={"text": s.text, "seed": s.seed, "causal": s.causal, "positional encoding": s.pe,
               **({"context (keys and values)": s.context} if s.cross else {})},
    )


def pretrained_page(s: ViewState, model: PretrainedModel) -> None:
    if not s.text.strip() or (model.kind == "encoder-decoder" and s.part != "encoder" and not s.context.strip()):
        st.info("Type a sentence to see its attention (it has no visible characters yet).")
        return
    decoder_text = s.context if model.kind == "encoder-decoder" else None
    trace = pretrained_traces(s.model, s.text, s.part, decoder_text)[s.layer]
    name = safe_filename(f"{model.name.split('/')[-1]}-{s.part}-layer{s.layer}")
    st.caption(
        f"{model.name} · {model.architecture} ({model.kind}) · {s.part} layer {s.layer} of {model.num_layers[s.part]}"
        f" · {model.num_heads[s.part]} heads · {len(trace.query_tokens)} query tokens"
    )
    if trace.meta.get("truncated"):
        st.warning(f"The input is longer than the model's maximum of {model.max_tokens} tokens: "
                   f"{trace.meta['truncated']} tokens were cut off the end.")
    if trace.missing:
        st.info(f"Only the attention weights are available for this model: {trace.meta.get('unavailable')}")
    shown = trace
    if not s.special:
        try:
            shown = without_tokens(trace, set(model.tokenizer.all_special_tokens))
        except ValueError as err:
            st.info(f"{err}; showing all tokens.")
    view = view_picker(PRETRAINED_VIEWS)
    if view == "Heads":
        views.heads_view(shown, name)
    elif view == "Overview":
        views.overview_view(pretrained_attentions(s.model, s.text, s.part, decoder_text), shown, s.layer, name)
    elif view == "Analysis":
        attentions = None if s.part == "cross" else pretrained_attentions(s.model, s.text, s.part, decoder_text)
        analysis_view(trace, name=name, model=model, text=s.text, part=s.part, layer=s.layer,
                      decoder_text=decoder_text, attentions=attentions, other_model=allowed_model)
    elif trace.missing:
        st.info(f"The {view} view needs queries, keys, values and the output projection: {trace.meta.get('unavailable')}")
    elif view == "One head":
        views.head_view(trace, name)
    else:
        views.output_path_view(trace, name)
    export_section(
        trace, name=name, share_query=to_query(s), title=f"{model.name}: {s.part} layer {s.layer}",
        notes={"model": model.name, "text": s.text, **({"decoder text": decoder_text} if decoder_text else {})},
    )


def train_page(s: ViewState) -> None:
    view = view_picker(TRAIN_VIEWS)
    if view == "Training":
        training_page(s.h, s.d_model, s.steps, s.seed, s.task)
        return
    if s.d_model % s.h:
        controls.explain_invalid_heads(s.h, s.d_model)
        return
    trace = trained_run(s.task, s.h, s.d_model, s.steps, s.seed).final.trace  # the trained layer on its probe
    name = safe_filename(f"trained-{s.task}-h{s.h}-d{s.d_model}")
    st.caption(f"The trained layer (task {s.task}, h = {s.h}, d_model = {s.d_model}, {s.steps} steps, seed {s.seed}) "
               "on the task's probe sequence.")
    if view == "One head":
        views.head_view(trace, name)
    elif view == "Concat → W_O":
        views.output_path_view(trace, name)
    else:
        analysis_view(trace, name=name)


notices = state.seed_from_url()
with st.sidebar:
    st.title("mha-viz")
    st.caption("Multi-head attention, head by head: Q, K, V, softmax, concat, W_O.")
    mode = st.segmented_control("Model", MODES, key="mode", required=True)
    model = None
    if mode == "Configurable":
        controls.configurable_controls()
    elif mode == "Train":
        training_controls()
    else:
        name = pretrained.model_field(allowed_models(secret=secret("allowed_models")))
        try:
            with st.spinner(f"Loading {name or 'the bundled model'}…"):
                model = allowed_model(name)
        except ValueError as err:
            st.error(f"Could not load the model: {plain(str(err))}")
        else:
            notices = notices + pretrained.layer_controls(model)
s = state.current()
state.write_url(s)
for notice in notices:
    st.warning(plain(notice), icon="🔗")

st.header("Multi-head attention, visible")
if mode == "Configurable":
    configurable_page(s)
elif mode == "Train":
    train_page(s)
elif model is not None:
    pretrained_page(s, model)
