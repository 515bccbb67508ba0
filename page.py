"""mha-viz: the script each session runs (`streamlit run app.py` serves it; AppTest can run it directly).

This script holds the caches, the sidebar and the dispatch to a page (mha_viz/ui/pages.py).
Traces live in one cache shared by every session and bounded in bytes (MHA_VIZ_CACHE_MB, default
1 GB); models in a cache of two. A public demo (MHA_VIZ_PUBLIC=1 or an allow-list) gets a Budget.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import streamlit as st

st.set_page_config(page_title="mha-viz: multi-head attention, visible", layout="wide")
# Plotly's code is a chunk of Streamlit's frontend (4.7 MB) that a browser fetches and runs when a page shows
# its first chart. Starting it now, before the imports below (torch: ~1 s on a cold server), takes it off the
# first page's critical path; the frontend's own import of the chunk then finds it loaded.
PLOTLY_CHUNK = next((p.name for p in (Path(st.__file__).parent / "static/static/js").glob("PlotlyChart.*.js")), None)
if PLOTLY_CHUNK:  # every run, so that what follows keeps its place on the page (mha_viz/ui/body.py)
    with st.container(key="plotly_preload"):  # hidden: it takes no room on the page
        st.html(f"""<style>:has(> .st-key-plotly_preload:only-child) {{display: none}}</style><script>{{
            const main = document.querySelector('script[src*="/static/js/index."]');
            import(new URL("./{PLOTLY_CHUNK}", main ? main.src : document.baseURI)).catch(() => {{}});}}</script>""",
                unsafe_allow_javascript=True)

import numpy as np

from mha_viz.analysis import detect_heads
from mha_viz.hosting import (
    Budget,
    allowed_models,
    budget,
    check_model,
    heavy_request,
    is_public,
    long_text,
    page_training_seconds,
    within_budget,
)
from mha_viz.long import LongTrace
from mha_viz.params import MAX_LONG_TOKENS, MODES
from mha_viz.pretrained import Generation, ModelLoadError, PretrainedModel
from mha_viz.sources import MAX_TOKENS, ConfigurableSource, ModelSource
from mha_viz.trace import AttentionTrace
from mha_viz.ui import body, controls, fair, pages, pretrained, state, style, views
from mha_viz.ui.cache import cached
from mha_viz.ui.loaders import download_error, get_model, model_size, page_drawn, secret
from mha_viz.ui.pandas_guard import figures_allowed
from mha_viz.ui.text import plain
from mha_viz.ui.training import train_in_child_processes, training_controls

T = TypeVar("T")


class CachedConfigurable(ConfigurableSource):
    """A ConfigurableSource whose trace comes from the shared cache."""

    def trace(self, layer: int = 0) -> AttentionTrace:
        if layer != 0:
            return super().trace(layer)  # raises IndexError
        return cached(("configurable", self.key()), lambda: super(CachedConfigurable, self).trace(0).read_only(),
                      heavy=long_text(self.text) and self.cfg.d_model * self.cfg.num_heads > 1024)

    def long_trace(self) -> LongTrace:
        return cached(("long", self.key()), super().long_trace, spinner="Computing attention over a long input…", heavy=True)


@dataclass(frozen=True, eq=False)
class CachedModel(ModelSource):
    """A ModelSource whose layers, attentions, generations and detector scores come from the shared cache.

    key: what identifies the loaded model (the name it loaded by, whether folders were allowed, its max_tokens).
    """

    key: tuple = ()

    def trace(self, layer: int) -> AttentionTrace:
        # Every layer of the text from one forward pass, so that a layer change is a cache hit.
        layers = cached(("layers", self.key, self.text, self.part, self.decoder_text), lambda: tuple(
            t.read_only() for t in self.model.traces(self.text, part=self.part, decoder_text=self.decoder_text)),
            heavy=long_text(self.text))
        if not 0 <= layer < len(layers):
            return super().trace(layer)  # raises IndexError saying which layers exist
        return layers[layer]

    def attentions(self) -> np.ndarray | None:
        return None if self.part == "cross" else cached(
            ("attentions", self.key, self.text, self.part, self.decoder_text), super().attentions,
            heavy=long_text(self.text))

    def generate(self, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0) -> Generation:
        key = ("generation", self.key, self.text, max_new_tokens, temperature, top_k, top_p, seed)
        return cached(key, lambda: super(CachedModel, self).generate(
            max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed), "Writing…", heavy=True)

    def head_scores(self, *, seed: int = 0) -> dict[str, np.ndarray]:
        return cached(("head scores", self.key, seed), lambda: detect_heads(self.model, seed=seed),
                      "Running the head detectors on repeated random tokens…", heavy=True)

    def trace_loader(self, layer: int) -> Callable[[], AttentionTrace]:
        """trace(layer) as a function that holds the model's key, not the model: get_model finds it again."""
        text, part, decoder_text, key = self.text, self.part, self.decoder_text, self.key
        return lambda: CachedModel(get_model(*key), text, part, decoder_text, key=key).trace(layer)

    def memo(self, what: Hashable, compute: Callable[[], T]) -> T:
        return cached((what, self.key, self.text, self.part, self.decoder_text), compute)


def model_key(name: str, limits: Budget | None) -> tuple[str, bool, int | None]:
    """How a model is loaded: its name, whether it may be a local folder (only if this session typed it, and
    never on a public demo) and its most tokens (the Budget's on a public demo)."""
    return name, state.was_typed(name) and limits is None, None if limits is None else limits.max_tokens


def model_loader(limits: Budget | None) -> Callable[[str], PretrainedModel]:
    """name -> the loaded model ("" is the bundled one), or a ValueError saying why not (the allow-list applies,
    and a public demo's size limit, checked before anything is downloaded: hosting.check_model)."""
    def load(name: str) -> PretrainedModel:
        check_model(name, allowed_models(secret=secret("allowed_models")), limits, size=model_size)
        key = model_key(name, limits)
        try:
            error = download_error(*key)  # a remembered download failure: not asked again
            if error:
                raise ValueError(error)
            return get_model(*key)
        except (ModelLoadError, OSError) as err:
            raise ValueError(str(err)) from err

    return load


def back_to_bundled() -> None:
    st.session_state["model"] = ""


def show_page() -> None:
    """The sidebar, then the page it asks for."""
    views.start_run()
    style.page_style()
    notices = state.seed_from_url()
    limits = budget(secret=secret) if is_public(secret=secret) else None
    if limits is not None:
        fair.leave_a_core_free()
        train_in_child_processes()
    fair.limit_waiting(None if limits is None else limits.max_wait_seconds)
    load = model_loader(limits)
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
                    model = load(name)
            except ValueError as err:
                load_failure = f"Could not load the model {plain(name)}: {plain(str(err))}"
                st.error(load_failure)
            else:
                notices = notices + pretrained.layer_controls(model)
    s = state.current()
    state.write_url(s)  # what was asked for: a link reproduces it in full wherever it is opened
    s, cuts = within_budget(s, limits)
    for notice in notices:
        st.warning(plain(notice), icon="🔗")
    for cut in cuts:
        st.info(plain(cut), icon=":material/speed:")

    st.header("Multi-head attention, visible")
    max_tokens = MAX_TOKENS if limits is None else limits.max_tokens
    # Heavy pages are drawn one at a time: a light page then shares the CPU with one of them at most.
    seconds = max(fair.DEFAULT_SECONDS, page_training_seconds(s))
    with body.page_body(body.identity(s)), fair.heavy("This page", seconds) if heavy_request(s) else contextlib.nullcontext():
        if mode == "Configurable":
            pages.configurable_page(s, lambda **kw: CachedConfigurable(
                **kw, max_tokens=max_tokens, long_tokens=MAX_LONG_TOKENS if limits is None else max_tokens), limits)
        elif mode == "Train":
            pages.train_page(s, limits)
        elif model is not None:
            decoder_text = s.context if model.kind == "encoder-decoder" else None
            source = CachedModel(model, s.text, s.part, decoder_text, key=model_key(s.model.strip(), limits))
            pages.pretrained_page(s, source, load, limits)
        else:
            st.error(load_failure)
            st.button("Open the bundled all-MiniLM-L6-v2 instead (works offline)", key="to_bundled",
                      on_click=back_to_bundled, icon=":material/undo:")


with figures_allowed():  # pandas in full, or nobody importing it beside this run (mha_viz/ui/pandas_guard.py)
    try:
        show_page()
    finally:
        views.end_run()  # the session keeps no figure between runs
page_drawn.set()  # the warm-up's model loads may start (app.py)
