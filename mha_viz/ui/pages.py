"""The app's three pages: the configurable layer (random or trained weights), a pretrained model, Train mode.

Each page takes the ViewState and the sources page.py builds (with its caches), checks its input,
and shows the chosen view of one AttentionTrace, then Export and share.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ..checks import failure_message
from ..config import MHAConfig
from ..export import safe_filename
from ..figures.common import plural
from ..layer_payload import no_weights
from ..limits import MAX_LONG_TOKENS, MAX_MODEL_LONG_TOKENS, MAX_TOKENS
from ..long import LongTrace
from ..mixers import layer_marks
from ..params import ViewState
from ..parts import VIEWS, capable
from ..pretrained import MixerSizeError, PretrainedModel, bundled_model_installed
from ..serve.hosting import FULL_SIZE, Budget
from ..sources import ConfigurableSource, ModelSource, TraceSource, TrainedSource
from ..trace import AttentionTrace
from ..training import TASKS
from ..training.variants import variant_label as trained_variant_label
from ..variants import NAMES as VARIANT_NAMES
from ..variants import LayerVariant
from ..variants import describe as describe_variant
from .analysis import ModelLoader
from .cached_sources import CachedConfigurable, CachedModel, model_key
from .controls import explain_invalid_heads, explain_invalid_kv_heads, random_weights_banner
from .export import export_section
from .heads_component import heads_component
from .long_model import long_input, long_model_view
from .pretrained import MINILM_MISSING, open_induction_button
from .sidebar import Sidebar
from .state import put, put_default, share_query
from .text import plain
from .training import (
    accuracy_by_heads,
    budget_notice,
    cached_trained_layer,
    diversity_effect,
    stoppable,
    trained_run,
    variants_quality,
    who_takes_what,
)
from .view_parts import ViewContext, hide, layer_payload, render_view, shown_parts, view_picker

UNKNOWN_SHARE = 0.2  # warn when this share of a text's tokens is [UNK] to the model
CHARACTER_SHARE = 0.5  # ... or read one character at a time


def show(s: ViewState, bar: Sidebar, load: ModelLoader, limits: Budget | None) -> None:
    """The page of the sidebar's mode, for the state s (within the limits of a public demo, if any)."""
    if bar.mode == "Configurable":
        max_tokens = MAX_TOKENS if limits is None else limits.max_tokens
        configurable_page(s, lambda **kw: CachedConfigurable(
            **kw, max_tokens=max_tokens, long_tokens=MAX_LONG_TOKENS if limits is None else max_tokens), limits)
    elif bar.mode == "Train":
        train_page(s, limits)
    elif bar.model is not None:
        decoder_text = s.context if bar.model.kind == "encoder-decoder" else None
        source = CachedModel(bar.model, s.text, s.part, decoder_text, key=model_key(s.model.strip(), limits),
                             long_tokens=MAX_MODEL_LONG_TOKENS if limits is None else limits.max_long_tokens)
        pretrained_page(s, source, load, limits)
    else:
        st.error(bar.load_failure)
        if bundled_model_installed():
            st.button("Open the bundled all-MiniLM-L6-v2 instead (works offline)", key="to_bundled",
                      on_click=_set, args=("model", ""), icon=":material/undo:")
        else:
            if s.model.strip():  # the failure itself says so for the missing MiniLM
                st.info(plain(MINILM_MISSING))
            open_induction_button("to_bundled")


def _max_mb(limits: Budget | None) -> int | None:
    return None if limits is None else limits.max_export_mb


def _set(key: str, value: object) -> None:
    put(key, value)


def configurable_page(s: ViewState, random_source: Callable[..., ConfigurableSource], limits: Budget | None = None
                      ) -> None:
    """The configurable layer: random, seeded weights (random_source builds the cached source), or trained ones.

    limits: a public demo's Budget (the source reads at most its max_tokens; it caps downloads).
    """
    if s.weights == "trained":
        _trained_weights_page(s, limits)
        return
    if s.d_model % s.h and (s.d_k is None or s.d_v is None):
        explain_invalid_heads(s.h, s.d_model)
        return
    if s.variant == "gqa" and s.h % s.kv_heads:  # GQA's link explained with a button a valid kv_heads each
        explain_invalid_kv_heads(s.kv_heads, s.h)
        return
    variant = state_variant(s)
    try:
        cfg = variant.config(MHAConfig(s.d_model, s.h, d_k=s.d_k, d_v=s.d_v, d_out=s.d_out))
    except ValueError as err:  # an odd h for diff, moh_k above the routed heads (from a link)
        st.error(f"**The {VARIANT_NAMES[s.variant]} variant cannot run with these settings.** {err}.")
        return
    source = random_source(text=s.text, cfg=cfg, seed=s.seed, causal=s.causal, positional=s.pe,
                           context=s.context if s.cross else None, variant=variant)
    try:  # a long input: its first max_tokens only when a view other than Heads, or an export, asks for them
        long = source.long_trace() if source.is_long() else None
        trace = source.trace(0) if long is None else None
    except ValueError as err:  # a text without tokens
        what = "second sentence" if "second" in str(err) else "sentence"
        st.info(f"Type a {what} to see its attention (it has no visible characters yet).")
        return
    if long is not None:
        _, T, S = long.shape
        cut = long.meta.get("truncated")
        st.info(f"A long input: {T} tokens" + (f" (and {S} keys)" if s.cross else "")
                + (f", the first {source.long_tokens} read" if cut else "")
                + f". The Heads view shows all of them, as an overview and a full-resolution zoom; the other views "
                f"and the exports hold the first {source.max_tokens}.", icon=":material/straighten:")
    else:
        T, S = trace.weights.shape[1:]
        if trace.meta.get("truncated"):
            n = source.max_tokens
            st.warning(f"The text is longer than {n} tokens; only the first {n} are shown."
                       + ("" if n >= MAX_TOKENS else f" This public demo draws at most {n}; to {FULL_SIZE}."))
    random_weights_banner(s.seed)
    st.caption(
        f"h = {plural(cfg.num_heads, 'head')} · d_model = {cfg.d_model} · d_k = {cfg.d_k} · d_v = {cfg.d_v} · d_out = {cfg.d_out}"
        f" · {T} query tokens" + (f" · {S} key tokens (cross-attention)" if s.cross else "") + (" · causal" if s.causal else "")
    )
    st.caption(describe_variant(cfg, variant))
    name = safe_filename(f"configurable-h{cfg.num_heads}-d{cfg.d_model}" + variant.spec.stem(cfg, variant))
    _layer_views(s, trace, source, name, cfg, long=long, limits=limits)
    export_section(
        lambda: source.trace(0), trace=trace, name=name, share_query=share_query(s), max_mb=_max_mb(limits),
        title=variant.spec.title(cfg, variant) + f", d_model = {cfg.d_model} (random weights)",
        notes={"weights": f"random (Xavier, seed {s.seed})", "variant": s.variant, **variant.params(), "text": s.text,
               "causal": s.causal,
               "positional encoding": s.pe, **({"context (keys and values)": s.context} if s.cross else {}), **shown_parts()},
    )


def state_variant(s: ViewState) -> LayerVariant:
    """The page state's attention variant, with the parameters its kind reads."""
    return LayerVariant.of(s)


def _trained_weights_page(s: ViewState, limits: Budget | None) -> None:
    """The configurable views on a layer trained for this h and d_model, beside the accuracy of every h."""
    if s.d_model % s.h:
        explain_invalid_heads(s.h, s.d_model, advanced=False)
        return
    variant = state_variant(s)
    try:
        cfg = variant.config(MHAConfig(s.d_model, s.h))
    except ValueError as err:
        st.error(f"**The {VARIANT_NAMES[s.variant]} variant cannot be trained with these settings.** {err}.")
        return
    spec = TASKS[s.task]
    key = (s.task, s.h, s.d_model, s.steps, s.seed, variant, s.diversity)
    layer = stoppable(key, lambda: cached_trained_layer(*key))
    if layer is None:
        return
    if layer.cut:
        budget_notice(f"this layer (h = {s.h})", layer.steps, s.steps, layer.loss, layer.mean_accuracy)
    source = TrainedSource(layer, s.sequence)
    try:
        trace = source.trace(0)
    except ValueError as err:
        st.warning(f"Cannot read the sequence: {plain(str(err))}.")
        st.button("Use the task's probe sequence", key="use_probe", on_click=_set, args=("sequence", ""))
        return
    what = "" if variant.kind == "mha" else f"{trained_variant_label(variant, s.h)}, "
    penalty = f", head-diversity penalty {s.diversity:g}" if s.diversity else ""
    st.success(
        f"**Trained weights.** This layer ({what}h = {s.h}, d_model = {s.d_model}{penalty}) was trained for {layer.steps} "
        "steps on "
        f"*{spec.title}*: {spec.description} Mean accuracy {layer.mean_accuracy:.1%} ("
        + ", ".join(f"{r} {a:.0%}" for r, a in zip(layer.relations, layer.accuracy)) + "). "
        + who_takes_what(layer.scores, layer.relations)
        + (" One head has to split its attention between the relations." if s.h == 1 else
           " Drag h to 1 to see one head compromise."),
        icon=":material/school:",
    )
    if variant.kind != "mha":
        st.caption(describe_variant(cfg, variant))
    if variant.spec.training.unsplit:
        st.caption(f"Analysis → W_O at work is not offered for a trained {VARIANT_NAMES[variant.kind]} layer: its weights "
                   f"give no per-head W_K and W_V ({variant.spec.training.unsplit}).")
    T = trace.weights.shape[1]
    st.caption(f"h = {plural(s.h, 'head')} · d_model = {s.d_model} · d_k = d_v = {cfg.d_k} · {T} tokens "
               + ("(the task's probe sequence; type your own in the sidebar)" if not s.sequence else "")
               + " · causal · seed " + str(s.seed))
    name = safe_filename(f"trained-{s.task}-h{s.h}-d{s.d_model}" + ("" if variant.kind == "mha" else f"-{s.variant}"))
    by_heads = variant.kind == "mha" and not s.diversity  # the accuracy of every h compares plain MHA layers
    _layer_views(s, trace, source, name, cfg, accuracy=(lambda: accuracy_by_heads(layer, name)) if by_heads else None,
                 limits=limits)
    diversity_effect(layer, trace, s.sequence, name)
    variants_quality(trained_variant_label(variant, s.h), name)
    export_section(
        lambda: source.trace(0), trace=trace, name=name, share_query=share_query(s), max_mb=_max_mb(limits),
        title=f"A layer trained on {spec.title}: h = {s.h}, d_model = {s.d_model}",
        notes={"weights": f"trained for {s.steps} steps on {spec.title} (seed {s.seed})",
               "sequence": " ".join(trace.query_tokens), "mean accuracy": f"{layer.mean_accuracy:.3f}",
               **({} if variant.kind == "mha" else {"variant": s.variant, **variant.params()}),
               **({"diversity penalty": f"{s.diversity:g}"} if s.diversity else {}), **shown_parts()},
    )


def _layer_views(
    s: ViewState, trace: AttentionTrace | None, source: TraceSource, name: str, cfg: MHAConfig,
    accuracy: Callable[[], None] | None = None, long: LongTrace | None = None, limits: Budget | None = None,
) -> None:
    """The views of one configurable or trained layer; accuracy draws the accuracy per h beside the heads.

    long: the whole of a long input: the Heads view draws it, the others source.trace(0), its first tokens
    (trace None: not computed yet)."""
    view = view_picker(VIEWS.menu("Configurable", source))
    if long is None or not VIEWS.part(view).can("draws_long"):
        trace = trace or source.trace(0)
        if long is not None and VIEWS.part(view).arrays:
            st.caption(f"This view draws the first {trace.weights.shape[1]} tokens of {long.shape[1]}; the Heads view "
                       "draws all of them.")
    render_view(view, ViewContext(s, name, source, trace, layer=0, cfg=cfg, long=long, limits=limits,
                                  accuracy=accuracy))


def _coverage_warning(model: PretrainedModel, text: str) -> None:
    """Say when the model's vocabulary does not know much of the text ([UNK]) or reads it letter by letter."""
    c = model.coverage(text)
    if c.tokens and c.unknown_share >= UNKNOWN_SHARE:
        st.warning(f"{c.unknown} of this text's {c.tokens} tokens are unknown to {model.name} (shown as "
                   f"{model.tokenizer.unk_token}): its vocabulary does not cover this language or script, so its "
                   "attention on them says little. Try a model trained on this language.")
    elif c.tokens >= 4 and c.character_share >= CHARACTER_SHARE:
        st.info(f"{model.name} reads {c.characters} of this text's {c.tokens} tokens one character at a time: its "
                "vocabulary has few words of this language or script, so the tokens are single characters.")


def _set_layer(layer: int) -> None:
    put("layer", layer)


def _layer_control(source: ModelSource, s: ViewState, hidden: frozenset[str], view: str, subtitle: tuple[str, str],
                   long: bool = False) -> bool:
    """The page's one layer control: the subtitle naming the layer over the layer buttons (mha_viz/renderer.js). In a
    view that switches layers (Heads) the renderer paints every head of every layer under them (when these fit; not
    a long text's) and a click repaints at once. Returns whether it drew the heads."""
    if source.num_layers == 1:
        st.caption(f"{subtitle[0]}{s.layer}{subtitle[1]}")
        return False
    switches = VIEWS.part(view).can("switches_layers") and not long
    payload = layer_payload(source, hidden) if switches else None
    failed = {} if payload is None else {  # said above a layer's heads in the browser, as st.error says it here
        str(i): message for i in range(source.num_layers) if (message := failure_message(source.trace(i)))}
    with st.container(key="figure_layer_switch"):  # as chart() keys a chart's box: a lesson's "Show me" finds it
        heads_component(payload or no_weights(source.num_layers), view="heads" if payload else "buttons",
                        layer=s.layer, subtitle=subtitle, failed=failed, key="layer_switch", on_layer=_set_layer,
                        marks=layer_marks(source.layer_kinds) if capable(source, "hybrid") else None)
    if switches and payload is None:
        st.caption("Every layer of this model at once is more than this page should hold: a layer button asks the "
                   "server for that layer.")
    return payload is not None


def pretrained_page(s: ViewState, source: ModelSource, other_model: ModelLoader, limits: Budget | None = None) -> None:
    """A pretrained model's layer; source is the app's cached ModelSource for s.text, s.part and the decoder text.

    limits: a public demo's Budget (the model was loaded with its max_tokens; it caps knockout passes).
    """
    model = source.model
    if not s.text.strip() or (model.kind == "encoder-decoder" and s.part != "encoder" and not s.context.strip()):
        st.info("Type a sentence to see its attention (it has no visible characters yet).")
        return
    long = long_input(source, limits) if capable(source, "app_cache") else None
    try:
        trace = source.trace(s.layer)
    except MixerSizeError as err:  # even this one layer's mixing matrices would not fit
        st.error(f"This layer is too large to draw whole: {err}. Shorten the text.", icon=":material/error:")
        return
    name = safe_filename(f"{model.name.split('/')[-1]}-{s.part}-layer{s.layer}")
    hidden = frozenset() if s.special else frozenset(model.tokenizer.all_special_tokens)
    views_here = VIEWS.menu("Pretrained", source)
    tokens = f"{long.num_tokens} tokens" if long is not None else f"{len(trace.query_tokens)} query tokens"
    view = view_picker(views_here)
    grid = _layer_control(source, s, hidden, view, subtitle=(
        f"{model.name} · {model.architecture} ({model.kind}) · {s.part} layer ",
        f" of {model.num_layers[s.part]} · {plural(model.num_heads[s.part], 'head')} · {tokens}"), long=long is not None)
    if trace.meta.get("truncated") and long is None:
        st.warning(f"The input is longer than the model's maximum of {model.max_tokens} tokens: "
                   f"{trace.meta['truncated']} tokens were cut off the end."
                   + (f" This public demo reads at most {limits.max_tokens}; to {FULL_SIZE}." if limits else ""))
    failed = failure_message(trace)
    if failed:  # the rebuilt numbers are not the model's own: said before any of them is shown
        st.error(plain(failed), icon=":material/error:")
    _coverage_warning(model, s.text)
    if "half" in trace.meta:  # one of the two halves of a block that runs attention and a mixer side by side
        other = s.layer + (1 if trace.kind == "softmax" else -1)
        st.caption(f"Layer {s.layer} is the {trace.meta['half']} half of block {trace.meta['block']}: it runs beside "
                   f"layer {other} on the same input, and the block adds their outputs, this one times "
                   f"{trace.meta['multiplier']:g}.")
    if "kv_from" in trace.meta:  # Gemma 3n's last layers: no keys or values of their own
        st.caption(f"Layer {s.layer} has no W_K or W_V of its own: it reads the keys and values layer "
                   f"{trace.meta['kv_from']} computed (KV sharing), so its keys and values are that layer's.")
    if trace.mixes:
        st.info(f"Layer {s.layer} is a {trace.meta['mixer']} layer, not softmax attention. Its weights are the exact "
                f"mixing matrix of each head, {trace.meta['matrix']}. It has no queries, keys or scores of its own "
                "for One head to show.")
    elif trace.kind == "sparse":
        st.info(f"Layer {s.layer} is sparse attention: each query reads only the {trace.meta['index_topk']} keys its "
                "indexer ranked highest, and the others get 0. Head statistics list, per head, the dropped mass: what "
                "dense attention would have given the keys it dropped.")
    elif trace.missing:
        held = "only the attention weights" if trace.concat is None else "the attention weights, head outputs, concat, W_O and output"
        st.info(f"For this model mha-viz holds {held}: {trace.meta.get('unavailable')}")
    shown = hide(trace, hidden)
    if shown is None:
        st.info("Hiding the special tokens would leave nothing to show; showing all tokens.")
        shown = trace
    if long is not None and VIEWS.part(view).can("draws_long"):
        for f in VIEWS.part(view).fields:  # the zoom's and the statistic's widgets start at their defaults
            put_default(f.name)
        long_model_view(long, s.layer, name, source.long_loader())
    else:
        if long is not None and not VIEWS.part(view).can("reads_long"):
            st.caption(f"This view draws the window: the first {len(trace.query_tokens)} tokens of {long.num_tokens}; "
                       "the Heads view draws all of them.")
        render_view(view, ViewContext(s, name, source, trace, shown, layer=s.layer, limits=limits, hidden=hidden,
                                      grid_drawn=grid, other_model=other_model))
    export_section(
        source.trace_loader(s.layer), trace=trace, name=name, share_query=share_query(s), max_mb=_max_mb(limits),
        title=f"{model.name}: {s.part} layer {s.layer}",
        notes={"model": model.name, "text": s.text, **({"decoder text": source.decoder_text} if source.decoder_text else {}), **shown_parts()},
    )


def train_page(s: ViewState, limits: Budget | None = None) -> None:
    """Train mode: h heads and one head trained side by side, then the trained layer in every view."""
    view = view_picker(VIEWS.menu("Train"))
    name = safe_filename(f"trained-{s.task}-h{s.h}-d{s.d_model}")
    if VIEWS.part(view).can("trains"):  # trains (or reads the cache) itself
        trace = render_view(view, ViewContext(s, name, limits=limits))
    elif s.d_model % s.h:
        explain_invalid_heads(s.h, s.d_model, advanced=False)
        trace = None
    else:
        run = stoppable((s.task, s.h, s.d_model, s.steps, s.seed),
                        lambda: trained_run(s.task, s.h, s.d_model, s.steps, s.seed))
        if run is None:
            return
        if run.cut:
            budget_notice(f"h = {s.h}", run.steps_done, s.steps, run.final.loss, run.final.mean_accuracy)
        source = TrainedSource(run.layer, "")
        trace = source.trace(0)  # the trained layer on the task's probe sequence
        st.caption(f"The trained layer (task {s.task}, h = {s.h}, d_model = {s.d_model}, {s.steps} steps, seed {s.seed}) "
                   "on the task's probe sequence.")
        render_view(view, ViewContext(s, name, source, trace, limits=limits))
    if trace is not None:  # a task's probe sequence of a few tokens: a trace of a few kB, kept as it is
        export_section(
            lambda: trace, name=name, share_query=share_query(s), max_mb=_max_mb(limits),
            title=f"Train mode: {TASKS[s.task].title}, h = {s.h} vs h = 1, d_model = {s.d_model}",
            notes={"task": TASKS[s.task].title, "steps": s.steps, "seed": s.seed,
                   "trace": "the trained h-head layer on the task's probe sequence", **shown_parts()},
        )
