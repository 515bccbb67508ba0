"""mha-viz: multi-head attention made visible.  Run: streamlit run app.py

This script holds the caches, the sidebar and the dispatch to a page (mha_viz/ui/pages.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

from mha_viz.analysis import detect_heads
from mha_viz.config import MHAConfig
from mha_viz.hosting import allowed_models, check_allowed
from mha_viz.params import MODES
from mha_viz.pretrained import Generation, ModelLoadError, PretrainedModel, load_model
from mha_viz.sources import ConfigurableSource, ModelSource, configurable_trace
from mha_viz.trace import AttentionTrace
from mha_viz.ui import controls, pages, pretrained, state, style, views
from mha_viz.ui.text import plain
from mha_viz.ui.training import training_controls

st.set_page_config(page_title="mha-viz: multi-head attention, visible", layout="wide")


# Bounded caches: a 512-token, 16-head trace is ~50 MB; all six layers of the bundled model ~180 MB.
@st.cache_data(max_entries=16, show_spinner=False)
def cached_configurable(text: str, cfg: MHAConfig, seed: int, causal: bool, positional: bool, context: str | None
                        ) -> AttentionTrace:
    return configurable_trace(text, cfg, seed=seed, causal=causal, positional=positional, context=context)


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
def cached_layers(name: str, text: str, part: str, decoder_text: str | None) -> tuple[AttentionTrace, ...]:
    """Every layer of text from one forward pass, so that a layer change is a cache hit.

    cache_resource shares the traces instead of copying them on every rerun (all layers of a
    512-token text are ~180 MB for the bundled model); their arrays are read-only.
    """
    return tuple(t.read_only() for t in get_model(name).traces(text, part=part, decoder_text=decoder_text))


@st.cache_data(max_entries=4, show_spinner=False)
def cached_attentions(name: str, text: str, part: str, decoder_text: str | None) -> np.ndarray:
    return get_model(name).attentions(text, part=part, decoder_text=decoder_text)


@st.cache_data(max_entries=16, show_spinner="Writing…")
def cached_generation(name: str, text: str, new_tokens: int, temperature: float, top_k: int | None,
                      top_p: float | None, seed: int) -> Generation:
    return get_model(name).generate(text, new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)


@st.cache_data(max_entries=4, show_spinner="Running the head detectors on repeated random tokens…")
def cached_head_scores(name: str, seed: int) -> dict[str, np.ndarray]:
    return detect_heads(get_model(name), seed=seed)


class CachedConfigurable(ConfigurableSource):
    """A ConfigurableSource whose trace comes from this app's cache."""

    def trace(self, layer: int = 0) -> AttentionTrace:
        if layer != 0:
            return super().trace(layer)  # raises IndexError
        return cached_configurable(self.text, self.cfg, self.seed, self.causal, self.positional, self.context)


@dataclass(frozen=True, eq=False)
class CachedModel(ModelSource):
    """A ModelSource whose layers and attentions come from this app's caches; key: the name the model loaded by."""

    key: str = ""

    def trace(self, layer: int) -> AttentionTrace:
        layers = cached_layers(self.key, self.text, self.part, self.decoder_text)
        if not 0 <= layer < len(layers):
            return super().trace(layer)  # raises IndexError saying which layers exist
        return layers[layer]

    def attentions(self) -> np.ndarray | None:
        return None if self.part == "cross" else cached_attentions(self.key, self.text, self.part, self.decoder_text)

    def generate(self, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0) -> Generation:
        return cached_generation(self.key, self.text, max_new_tokens, temperature, top_k, top_p, seed)

    def head_scores(self, *, seed: int = 0) -> dict[str, np.ndarray]:
        return cached_head_scores(self.key, seed)


def secret(key: str) -> str | None:
    """A Streamlit secret, or None when the deployment has no secrets file."""
    try:
        return st.secrets.get(key)
    except (FileNotFoundError, KeyError, ValueError, StreamlitSecretNotFoundError):
        return None


def allowed_model(name: str) -> PretrainedModel:
    """The loaded model ("" is the bundled one): the demo's allow-list applies; failures are ValueErrors saying why."""
    check_allowed(name, allowed_models(secret=secret("allowed_models")))
    error = load_error(name)
    if error:
        raise ValueError(error)
    return get_model(name)


def back_to_bundled() -> None:
    st.session_state["model"] = ""


views.start_run()
style.page_style()
notices = state.seed_from_url()
load_failure = None
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
            load_failure = f"Could not load the model {plain(name)}: {plain(str(err))}"
            st.error(load_failure)
        else:
            notices = notices + pretrained.layer_controls(model)
s = state.current()
state.write_url(s)
for notice in notices:
    st.warning(plain(notice), icon="🔗")

st.header("Multi-head attention, visible")
if mode == "Configurable":
    pages.configurable_page(s, CachedConfigurable)
elif mode == "Train":
    pages.train_page(s)
elif model is not None:
    decoder_text = s.context if model.kind == "encoder-decoder" else None
    pages.pretrained_page(s, CachedModel(model, s.text, s.part, decoder_text, key=s.model.strip()), allowed_model)
else:
    st.error(load_failure)
    st.button("Open the bundled all-MiniLM-L6-v2 instead (works offline)", key="to_bundled", on_click=back_to_bundled,
              icon=":material/undo:")
