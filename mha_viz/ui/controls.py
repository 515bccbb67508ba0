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
from ..params import EXAMPLES
from ..parts import bounds
from ..text import repeat_to_tokens
from ..training import TASKS
from ..variants import NAMES as VARIANT_NAMES
from ..variants import VARIANTS, Control
from ..variants.plain import kv_heads_label
from ..variants.spec import variant_fields
from .state import ADVANCED_OPEN, put, take, widget
from .state import value as field_value

TRAINED_D_MODELS = tuple(d for d in D_MODEL_CHOICES if d <= 128)  # wider layers train too slowly for a page
NOTICE = "_heads_notice"  # session key: why h just changed, shown once
VARIANT_NOTICE = "_variant_notice"  # session key: why a variant's parameter just followed h, shown once


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


def _keep_variant_valid(kind: str | None = None) -> None:
    """After h changed (kind None: every variant's) or one of kind's controls moved: the variant parameters that depend
    on h follow it (VariantSpec.fit); when they are the page's own variant's, the sidebar says so once."""
    for spec in VARIANTS.values() if kind is None else (VARIANTS[kind],):
        old = _values(field_value("h"))
        new = spec.fit(old)
        for name, moved in new.items():
            put(name, moved)
        notice = spec.notice(old, old | new) if new and field_value("variant") == spec.kind else None
        if notice:
            put(VARIANT_NOTICE, notice)


def _values(h: object) -> dict[str, object]:
    """What a variant's controls read: h and every variant field's value."""
    return {"h": h, **{f.name: field_value(f.name) for f in variant_fields()}}


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


# The sidebar controls a lesson's task can also move from the lesson panel (lessons.py draws a copy under the task,
# so that the control is on screen where the sidebar is closed, on a phone), and what runs after each changes.
COPIED = {"h": _keep_variant_valid, "kv_heads": lambda: None}  # a variant's control: its spec's Control
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
    spec = VARIANTS[field_value("variant")]
    control = next((c for c in spec.controls if c.name == name), None)
    values = _values(h) | {"variant": spec.kind}
    if control is None or spec.unfit(values):
        return False
    draw_control(control, values, key=key, on_change=on_change, args=args, note=COPY_NOTE)
    return True


def draw_control(control: Control, values: dict[str, object], *, key: str | None = None,
                 on_change: Callable[..., None] | None = None, args: tuple = (), note: str = "", where=st) -> None:
    """Draw one declared variant control (mha_viz.variants.spec.Control) under key (default: its field's name)
    in `where` (st or a column); values: _values and the variant's kind; on_change: what runs after it moves
    (default: its spec's fit, when refit)."""
    if control.kind == "caption":
        where.caption(control.label)
        return
    kind = values.get("variant", "")
    if on_change is None and control.refit:
        on_change, args = _keep_variant_valid, (kind,)
    shown = dict(key=key or control.name, on_change=on_change, args=args,
                 help=note + (control.help(values) if callable(control.help) else control.help))
    if control.disabled is not None:
        shown["disabled"] = control.disabled(values)
    if control.kind == "radio":
        where.radio(control.label, list(control.options(values)), horizontal=True,
                    format_func=control.labels(values) if control.labels else str, **shown)
    elif control.kind == "select_slider":
        where.select_slider(control.label, list(control.options(values)), **shown)
    else:
        lo, hi = control.bounds(values) if control.bounds else bounds(control.name)
        if control.kind == "number":
            where.number_input(control.label, lo, hi, step=1, **shown)
        else:
            where.slider(control.label, lo, hi, **shown)


def variant_controls(h: int) -> None:
    """The attention variant and its own parameters, drawn from its spec's controls; every position of every
    control gives a layer that runs.

    A value from a link that no position offers (kv_heads that does not divide h, an odd h for diff) is left for the
    page to explain (VariantSpec.unfit says so here, with a button that fits them when the spec offers one).
    """
    kind = st.segmented_control("Variant", tuple(VARIANTS), key="variant", required=True,
                                format_func=VARIANT_NAMES.get, help=" ".join(s.help for s in VARIANTS.values()))
    if kind not in VARIANTS:  # no variant in the session (a page that seeds no state)
        return
    spec = VARIANTS[kind]
    values = _values(h) | {"variant": kind}
    why = spec.unfit(values)
    if why:
        st.caption(why)
        if spec.fit_button:
            st.button("Fit them to h", key=f"fit_{kind}", on_click=_keep_variant_valid, args=(kind,),
                      help=spec.fit_button)
        return
    controls = list(spec.controls)
    while controls:
        row = [controls.pop(0)]
        while row[0].column and controls and controls[0].column:
            row.append(controls.pop(0))
        for control, where in zip(row, st.columns(len(row)) if row[0].column else (st,)):
            draw_control(control, values, where=where)
    notice = take(VARIANT_NOTICE)
    if notice:
        st.caption(notice)


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
