"""Sidebar widgets of the configurable model. Every widget's key is a ViewState field name."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ..config import divisors, nearest_divisor, nearest_valid_heads, valid_head_counts
from ..limits import (
    D_MODEL_CHOICES,
    MAX_HEADS,
    MAX_LONG_TOKENS,
    MAX_SEQUENCE_CHARS,
    MAX_TEXT_CHARS,
)
from ..names import SINK_KINDS
from ..params import EXAMPLES, LAYER_VARIANTS
from ..parts import bounds
from ..text import repeat_to_tokens
from ..training import TASKS
from ..variants import NAMES as VARIANT_NAMES
from .state import ADVANCED_OPEN, put, take, widget
from .state import value as field_value

TRAINED_D_MODELS = tuple(d for d in D_MODEL_CHOICES if d <= 128)  # wider layers train too slowly for a page
NOTICE = "_heads_notice"  # session key: why h just changed, shown once
KV_NOTICE = "_kv_heads_notice"  # session key: why kv_heads just changed, shown once


def head_choices(d_model: int, d_k: int | None = None, d_v: int | None = None) -> list[int]:
    """The h the slider offers: every h that divides d_model (d_k = d_model / h), or any h when d_k and d_v are set."""
    if d_k is not None and d_v is not None:
        return list(range(1, MAX_HEADS + 1))
    return valid_head_counts(d_model, MAX_HEADS)


def _keep_heads_valid() -> None:
    """After d_model (or d_k, d_v) changed: move h to the nearest h that still divides d_model, and say so."""
    d_model = field_value("d_model")
    choices = head_choices(d_model, field_value("d_k"), field_value("d_v"))
    h = field_value("h")
    if h not in choices:
        new = nearest_valid_heads(d_model, h, MAX_HEADS)[-1]
        put("h", new)
        put(NOTICE, f"h = {h} does not divide d_model = {d_model}, so h is now {new} "
                    f"(d_k = {d_model} / {new} = {d_model // new}).")
        _keep_variant_valid()


def _keep_variant_valid() -> None:
    """After h changed: the variants' parameters that depend on h follow it."""
    _keep_kv_heads_valid()
    _keep_moh_valid()


def _keep_kv_heads_valid() -> None:
    """After h changed: move kv_heads to the nearest divisor of h (said so under the GQA control)."""
    h, kv = field_value("h"), field_value("kv_heads")
    if isinstance(h, int) and h >= 1 and h % kv:
        put("kv_heads", new := nearest_divisor(h, kv))
        if field_value("variant") == "gqa":
            put(KV_NOTICE, f"kv_heads = {kv} does not divide h = {h}, so kv_heads is now {new} "
                           f"({h // new} query heads per key/value head).")


def heads_slider(d_model: int, d_k: int | None = None, d_v: int | None = None) -> None:
    """The head-count slider: it offers only the h that give whole head widths, so every position draws heads.

    An h from a link that no position offers is left for the page to explain (explain_invalid_heads).
    """
    choices = head_choices(d_model, d_k, d_v)
    h = field_value("h")
    if h not in choices:
        st.caption(f"h = {h} (from the link) does not divide d_model = {d_model}: pick a valid h on the page.")
        return
    _heads_widget(choices, d_model, standard=d_k is None or d_v is None, key="h", on_change=_keep_variant_valid)
    notice = take(NOTICE)
    if notice:
        st.caption(notice)


def _heads_widget(choices: list[int], d_model: int, *, standard: bool, key: str, on_change: Callable[..., None],
                  args: tuple = (), note: str = "") -> None:
    st.select_slider(
        "Number of heads h", choices, key=key, on_change=on_change, args=args,
        help=note + ((f"Each head gets d_k = d_model / h dimensions, so h must divide d_model = {d_model}: the slider "
                      f"offers {', '.join(map(str, choices))}. Set d_k and d_v under Advanced for any h.") if standard
                     else "d_k and d_v are set under Advanced, so any h from 1 to 16 works."),
    )


def _kv_heads_widget(h: int, *, key: str, on_change: Callable[..., None] | None = None, args: tuple = (),
                     note: str = "") -> None:
    st.radio("Key/value heads kv_heads", divisors(h), key=key, horizontal=True, format_func=kv_heads_label(h),
             on_change=on_change, args=args,
             help=note + f"The {h} query heads are split into kv_heads groups of h / kv_heads; each group reads one "
             "key/value head. kv_heads must divide h. 1 is multi-query attention (MQA), h is multi-head attention.")


# The sidebar controls a lesson's task can also move from the lesson panel (lessons.py draws a copy under the task,
# so that the control is on screen where the sidebar is closed, on a phone), and what runs after each changes.
COPIED = {"h": _keep_variant_valid, "kv_heads": lambda: None}
COPY_NOTE = "The sidebar's control, copied under the task: moving either moves both. "


def sidebar_control_copy(name: str, key: str, on_change: Callable[..., None], args: tuple = ()) -> bool:
    """Draw a second widget (its own key) of the sidebar control of the registered field `name` (one of COPIED), as
    the sidebar draws it now, where the sidebar draws it; False where the sidebar does not draw it (another mode, a
    value from a link that the control does not offer)."""
    if field_value("mode") != "Configurable" or name not in COPIED:
        return False
    d_model = field_value("d_model")
    d_k, d_v = (None, None) if field_value("weights") == "trained" else (field_value("d_k"), field_value("d_v"))
    choices, h = head_choices(d_model, d_k, d_v), field_value("h")
    if h not in choices:
        return False
    if name == "h":
        _heads_widget(choices, d_model, standard=d_k is None or d_v is None, key=key, on_change=on_change, args=args,
                      note=COPY_NOTE)
        return True
    if field_value("variant") != "gqa" or field_value("kv_heads") not in divisors(h):
        return False
    _kv_heads_widget(h, key=key, on_change=on_change, args=args, note=COPY_NOTE)
    return True


def kv_heads_label(h: int) -> Callable[[int], str]:
    """How the kv_heads control names each choice for h query heads: 1 is MQA, h is plain MHA."""
    return lambda g: f"{g} (MQA)" if g == 1 else f"{g} (= MHA)" if g == h else str(g)


VARIANT_HELP = (
    "MHA: every head has its own keys and values. GQA (Llama 3, Qwen3, Mistral): groups of query heads share one "
    "key/value head (1 is MQA). MLA (DeepSeek-V2/V3): keys and values are rebuilt per head from one small cached "
    "latent. Window (Mistral, Gemma 2, gpt-oss): each query sees only nearby keys, with sinks that soak up attention. "
    "Diff (DIFF Transformer, DiffLlama): each head is the difference of two softmax maps. MoH (mixture-of-heads): a "
    "router picks each token's heads."
)


def _even_choices(lo: int, hi: int) -> list[int]:
    """The even numbers from lo to hi (a link names only these: the field's parser refuses the others)."""
    return list(range(lo + lo % 2, hi + 1, 2))


def _keep_moh_valid() -> None:
    """After h or moh_shared changed: moh_k at most the routed heads h - moh_shared."""
    h, shared, k = field_value("h"), field_value("moh_shared"), field_value("moh_k")
    if isinstance(h, int) and isinstance(shared, int) and isinstance(k, int):
        if shared >= h:
            put("moh_shared", shared := h - 1)
        if k > h - shared:
            put("moh_k", h - shared)


def variant_controls(h: int) -> None:
    """The attention variant and its own parameters; every position of every control gives a layer that runs.

    A value from a link that no position offers (kv_heads that does not divide h, an odd h for diff) is left for the
    page to explain.
    """
    variant = st.segmented_control("Variant", LAYER_VARIANTS, key="variant", required=True,
                                   format_func=VARIANT_NAMES.get, help=VARIANT_HELP)
    if variant == "gqa":
        kv = field_value("kv_heads")
        if kv not in divisors(h):
            st.caption(f"kv_heads = {kv} (from the link) does not divide h = {h}: pick a valid kv_heads on the page.")
            return
        _kv_heads_widget(h, key="kv_heads")
        notice = take(KV_NOTICE)
        if notice:
            st.caption(notice)
    elif variant == "mla":
        c1, c2 = st.columns(2)
        c1.number_input("KV latent kv_latent", *bounds("kv_latent"), key="kv_latent", step=1,
                        help="The width of the one latent vector cached per token; every head's keys and values are "
                        "up-projected from it.")
        c2.number_input("Query latent q_latent", *bounds("q_latent"), key="q_latent", step=1,
                        help="0: queries are projected from the token directly. Else they pass a latent of this "
                        "width first (DeepSeek-V3: 1536), which saves parameters, not cache.")
        st.select_slider("Rotary dims rope_dim", _even_choices(*bounds("rope_dim")), key="rope_dim",
                         help="Per head, this many extra query/key dims carry rotary positions, in a key part shared "
                         "by every head and cached beside the latent (DeepSeek-V3: 64). 0: no positions in the scores.")
    elif variant == "window":
        st.slider("Window (tokens a query sees)", *bounds("window"), key="window",
                  help="Each query sees the keys fewer than window positions away (with the causal mask: itself and "
                  "the window − 1 tokens before it). Mistral: 4096; gpt-oss: 128 on every other layer.")
        st.radio("Sinks", SINK_KINDS, key="sinks", horizontal=True, format_func=SINK_LABELS.get,
                 help="Logit: each head has one learned logit that joins every softmax and is then dropped, so a head "
                 "can attend to 'nothing' (gpt-oss). First tokens: the first 4 tokens stay visible to every query, "
                 "as StreamingLLM keeps them.")
    elif variant == "diff":
        st.caption("Each head subtracts a second softmax map, scaled by λ, from its first: h counts the maps, so h "
                   "must be even and the layer has h / 2 differential heads.")
    elif variant == "moh":
        shared, k = field_value("moh_shared"), field_value("moh_k")
        if isinstance(shared, int) and isinstance(k, int) and (shared >= h or k > h - shared):
            st.caption(f"moh_shared = {shared}, moh_k = {k} (from the link) do not fit h = {h}: see the page.")
            st.button("Fit them to h", key="fit_moh", on_click=_keep_moh_valid,
                      help="moh_shared below h, moh_k at most the routed heads h − moh_shared.")
            return
        c1, c2 = st.columns(2)
        c1.slider("Shared heads moh_shared", 0, max(h - 1, 1), key="moh_shared", on_change=_keep_moh_valid,
                  disabled=h == 1, help="The first moh_shared heads are used by every token.")
        routed = max(h - min(field_value("moh_shared"), h - 1), 1)
        c2.slider("Heads per token moh_k", 1, max(routed, 2), key="moh_k", disabled=routed == 1,
                  help="The router scores the other heads for each token; each token uses its top moh_k of them.")


SINK_LABELS = {"none": "None", "logit": "Logit per head", "tokens": "First tokens"}


LONG_EXAMPLE = f"A long text ({MAX_LONG_TOKENS} tokens)"


def _use_example() -> None:
    choice = widget("example")
    if choice in EXAMPLES:
        put("text", EXAMPLES[choice])
    elif choice == LONG_EXAMPLE:
        put("text", repeat_to_tokens(" . ".join(EXAMPLES.values()) + " .", MAX_LONG_TOKENS))
    put("example", None)


def _set_heads(h: int) -> None:
    put("h", h)
    _keep_variant_valid()


def _set_kv_heads(kv_heads: int) -> None:
    put("kv_heads", kv_heads)


def _set_weights(weights: str) -> None:
    put("weights", weights)
    _trained_d_model()


def _trained_d_model() -> None:
    """Trained weights exist for d_model <= 128 only: move a wider d_model down, and h with it."""
    if field_value("weights") == "trained" and field_value("d_model") not in TRAINED_D_MODELS:
        put("d_model", TRAINED_D_MODELS[-1])
        _keep_heads_valid()


def configurable_controls() -> None:
    """Weights (random or trained), input, h, d_model and the advanced section; values land in the fields (state)."""
    trained = st.segmented_control(
        "Weights", ("random", "trained"), key="weights", required=True, on_change=_trained_d_model,
        format_func=lambda w: {"random": "Random (untrained)", "trained": "Trained on a task"}[w],
        help="Random: Xavier-initialised weights, as before any training; their patterns are chance. "
        "Trained: a layer trained on a task that needs several relations at once.",
    ) == "trained"
    if trained:
        _trained_d_model()  # a link may ask for a width no layer is trained at
        st.selectbox("Task", list(TASKS), key="task", format_func=lambda name: TASKS[name].title)
        st.text_input("Sequence (task tokens)", key="sequence", max_chars=MAX_SEQUENCE_CHARS,
                      placeholder="empty: the task's probe sequence",
                      help="Tokens of the task separated by spaces, e.g. 'b q v s j' (letters a–z for the first two "
                      "tasks). Empty: the fixed probe sequence Train mode shows.")
    else:
        st.text_area("Sentence", key="text", max_chars=MAX_TEXT_CHARS, height=90,
                     help="Words and punctuation become tokens.")
        st.selectbox("Example sentences", [*EXAMPLES, LONG_EXAMPLE], index=None, key="example", on_change=_use_example,
                     placeholder="Load an example…")
    d_models = TRAINED_D_MODELS if trained else D_MODEL_CHOICES
    d_k, d_v = (None, None) if trained else (field_value("d_k"), field_value("d_v"))
    heads_slider(field_value("d_model"), d_k, d_v)
    if field_value("h") in head_choices(field_value("d_model"), d_k, d_v):
        variant_controls(field_value("h"))
    if trained:
        st.slider("Head diversity penalty", *bounds("diversity"), step=0.1, key="diversity",
                  help="Trains the layer with loss = task loss + this weight × the mean pairwise cosine similarity of "
                  "the heads' outputs (the disagreement regulariser of Li et al. 2018): heads pushed apart.")
    st.selectbox("d_model", d_models, key="d_model", on_change=_keep_heads_valid, help="Width of every token vector.")
    section = st.expander("Advanced", key=ADVANCED_OPEN, on_change="rerun")
    if not section.open:  # a closed expander would still send its 10 widgets to the browser on every rerun
        return
    with section:
        if trained:
            st.number_input("Seed (weights and training data)", *bounds("seed"), key="seed", step=1)
            st.caption("Trained layers use the standard widths d_k = d_v = d_model / h, a causal mask and learned "
                       "position embeddings; Train mode sets the number of training steps.")
            return
        st.caption("Leave a width empty for the standard choice: d_k = d_v = d_model / h, d_out = d_model.")
        c1, c2, c3 = st.columns(3)
        c1.number_input("d_k", *bounds("d_k"), key="d_k", placeholder="auto", on_change=_keep_heads_valid)
        c2.number_input("d_v", *bounds("d_v"), key="d_v", placeholder="auto", on_change=_keep_heads_valid)
        c3.number_input("d_out", *bounds("d_out"), key="d_out", placeholder="auto")
        st.number_input("Seed (weights and token vectors)", *bounds("seed"), key="seed", step=1)
        st.toggle("Causal mask (no looking ahead)", key="causal")
        st.toggle("Positional encoding", key="pe")
        st.toggle("Cross-attention (keys and values from a second sentence)", key="cross")
        if field_value("cross"):
            st.text_area("Second sentence (keys and values)", key="context", max_chars=MAX_TEXT_CHARS, height=80)


def random_weights_banner(seed: int) -> None:
    """Say plainly that the weights are random, with the switch to trained weights one click away."""
    st.info(
        f"**These weights are random** (Xavier initialisation, seed {seed}): no head has learned anything, so any "
        "pattern below is chance, not meaning. Switch to trained weights to see heads that learned relations.",
        icon=":material/casino:",
    )
    st.button("Show trained weights", key="to_trained", on_click=_set_weights, args=("trained",),
              icon=":material/school:")


def explain_invalid_heads(h: int, d_model: int, *, advanced: bool = True) -> None:
    """Why h must divide d_model, with one-click nearest valid choices (advanced: mention d_k and d_v)."""
    near = nearest_valid_heads(d_model, h, MAX_HEADS)
    valid = valid_head_counts(d_model, MAX_HEADS)
    st.error(
        f"**h = {h} does not divide d_model = {d_model}.** Each head works in d_k = d_model / h = "
        f"{d_model}/{h} = {d_model / h:.3g} dimensions, and a head cannot have a fraction of a dimension: "
        f"the {h} heads together must split the {d_model} dimensions exactly. "
        f"Valid h for d_model = {d_model}: {', '.join(map(str, valid))}."
        + (" Or set d_k and d_v yourself under Advanced." if advanced else "")
    )
    cols = st.columns(len(near) + 1)
    for col, choice in zip(cols, near):
        col.button(f"Use h = {choice}", key=f"use_h_{choice}", on_click=_set_heads, args=(choice,))


def explain_invalid_kv_heads(kv_heads: int, h: int) -> None:
    """Why kv_heads must divide h, with a one-click nearest valid kv_heads (and MQA)."""
    near = nearest_divisor(h, kv_heads)
    st.error(
        f"**kv_heads = {kv_heads} does not divide h = {h}.** Grouped-query attention splits the {h} query heads "
        f"into kv_heads equal groups, one key/value head for each group: {h} / {kv_heads} = {h / kv_heads:.3g} query "
        f"heads a group is not a whole number. Valid kv_heads for h = {h}: {', '.join(map(str, divisors(h)))} "
        "(1 is multi-query attention, h is multi-head attention)."
    )
    choices = dict.fromkeys((near, 1))
    cols = st.columns(len(choices) + 1)
    for col, choice in zip(cols, choices):
        col.button(f"Use kv_heads = {kv_heads_label(h)(choice)}", key=f"use_kv_{choice}", on_click=_set_kv_heads,
                   args=(choice,))
