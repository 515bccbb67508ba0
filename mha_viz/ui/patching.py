"""The Patching section: activation patching between a clean and a corrupted prompt (mha_viz.analysis.patching)."""

from __future__ import annotations

import io

import numpy as np
import streamlit as st

from ..analysis.patching import BATCH, PAIRS, PatchingResult, activation_patching, pairs_for, patching_unavailable
from ..figures.patching import patching_figure
from ..limits import MAX_PATCH_PASSES
from ..names import PATCH_DIRECTIONS, PATCH_METRICS, PATCH_SITES
from .analysis import SectionContext
from .fair import heavy
from .state import value as field_value
from .style import page_width
from .text import plain
from .views import chart, labelled_value

OWN_PAIR = ""  # patch_pair for a pair the user types
SITE_LABELS = {"head": "head outputs", "head_position": "head outputs by position",
               "residual": "residual stream", "pattern": "attention patterns"}
METRIC_LABELS = {"logit_diff": "logit difference", "logprob": "log-prob of the answer", "prob": "prob of the answer"}
DIRECTION_LABELS = {"denoise": "denoise (clean into corrupted)", "noise": "noise (corrupted into clean)"}


def _fill_pair() -> None:
    """Copy the picked ready-made pair into the pair's fields."""
    pair = PAIRS.get(st.session_state.get("patch_pair", OWN_PAIR))
    if pair is not None:
        st.session_state.update(patch_clean=pair.clean, patch_corrupted=pair.corrupted, patch_answer=pair.answer,
                                patch_wrong=pair.wrong or "", patch_metric="logit_diff" if pair.wrong else "logprob")


def _as_token(model, typed: str) -> int | str:
    """A typed answer as a token: the token itself if the vocabulary has it, else the single token the word is
    with a space before it (GPT-2's 'Ġfox'), else the text as typed (the library then says it is not a token)."""
    if typed in model.tokenizer.get_vocab():
        return typed
    ids = model.tokenizer(" " + typed, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 and ids[0] != model.tokenizer.unk_token_id else typed


def render(c: SectionContext) -> None:
    model = c.source.model
    reason = "this layer is not part of a language model" if model is None else patching_unavailable(model)
    if reason is not None:
        st.info(f"Patching needs a causal language model: {plain(reason)}.")
        return
    pairs = pairs_for(model.name)
    if st.session_state.get("patch_pair") not in (OWN_PAIR, *pairs):
        st.session_state["patch_pair"] = OWN_PAIR
    if pairs and not field_value("patch_clean") and not field_value("patch_corrupted"):
        st.session_state["patch_pair"] = st.session_state.get("patch_pair") or next(iter(pairs))
        _fill_pair()
    if not field_value("patch_clean"):
        st.session_state["patch_clean"] = c.source.text
    st.caption("Run the model on a **clean** prompt, where it gives the answer, and on a **corrupted** one of the same "
               "token length, where it does not; then patch one activation at a time from one run into the other and "
               "see how much of the answer comes back. 0 = the corrupted run, 1 = the clean run.")
    if pairs:
        st.selectbox("Ready-made pair", [OWN_PAIR, *pairs], key="patch_pair", on_change=_fill_pair,
                     format_func=lambda n: n or "my own pair (type it below)")
        picked = PAIRS.get(field_value("patch_pair"))
        if picked is not None:
            st.caption(plain(picked.about))
    left, right = st.columns(2)
    clean = left.text_input("Clean prompt", key="patch_clean", max_chars=2000)
    corrupted = right.text_input("Corrupted prompt", key="patch_corrupted", max_chars=2000,
                                 placeholder="The clean prompt with a word changed…")
    a, b, m = st.columns([1, 1, 2])
    answer = a.text_input("Answer token", key="patch_answer", max_chars=100, placeholder="e.g. fox")
    metric = m.radio("Metric", PATCH_METRICS, key="patch_metric", format_func=METRIC_LABELS.get, horizontal=True)
    wrong = b.text_input("Wrong token", key="patch_wrong", max_chars=100, placeholder="for the logit difference",
                         disabled=metric != "logit_diff")
    s, d = st.columns(2)
    site = s.radio("Patch", PATCH_SITES, key="patch_site", format_func=SITE_LABELS.get, horizontal=True)
    direction = d.radio("Direction", PATCH_DIRECTIONS, key="patch_direction", format_func=DIRECTION_LABELS.get,
                        horizontal=True)
    if not corrupted.strip() or not answer.strip():
        st.info("Type a corrupted prompt and the answer token the clean prompt should lead to.")
        return
    if metric == "logit_diff" and not wrong.strip():
        st.info("The logit difference needs a wrong token (the corrupted prompt's answer), or pick a log-prob metric.")
        return
    limit = MAX_PATCH_PASSES if c.max_passes is None else c.max_passes * BATCH
    question = (clean, corrupted, answer.strip(), wrong.strip() if metric == "logit_diff" else None, metric, site,
                direction, limit)
    try:  # a question asked before (by any session on this model and text) is not computed again
        result = c.source.memo(("patching", *question), lambda: _run(model, *question))
    except ValueError as err:
        st.warning(f"Cannot patch: {plain(str(err))}")
        return
    _show(result, c.name)


def _run(model, clean: str, corrupted: str, answer: str, wrong: str | None, metric: str, site: str, direction: str,
         limit: int) -> PatchingResult:
    """The patching itself, as heavy work (one at a time across sessions), with a progress bar."""
    with heavy("Patching"):
        bar = st.progress(0.0, text="Patching…")
        try:
            return activation_patching(
                model, clean, corrupted, answer=_as_token(model, answer),
                wrong=None if wrong is None else _as_token(model, wrong), metric=metric, site=site,
                direction=direction, max_passes=limit,
                on_pass=lambda done, total: bar.progress(done / total, text=f"{done} of {total} patched"))
        finally:
            bar.empty()


def _show(result: PatchingResult, name: str) -> None:
    cols = st.columns(2)
    labelled_value(cols[0], f"Clean run ({METRIC_LABELS[result.metric]})", f"{result.clean:.4g}")
    labelled_value(cols[1], f"Corrupted run ({METRIC_LABELS[result.metric]})", f"{result.corrupted:.4g}")
    chart(patching_figure(result, width=page_width()), "analysis_patching", f"{name}-patching-{result.site}")
    best = np.unravel_index(np.nanargmax(np.abs(result.scores - (result.direction == "noise"))), result.scores.shape)
    where = {2: "layer {}, head {}", 3: "layer {}, head {}, position {}"}[len(best)]
    if result.site == "residual":
        where = "layer {}, position {}"
    st.caption(f"Scores: (patched − corrupted) / (clean − corrupted) of the {METRIC_LABELS[result.metric]} after the "
               f"last token. The unit that moves it most: {where.format(*(int(i) for i in best))} "
               f"({result.scores[best]:.2f}). The residual stream is taken where each layer's block starts (before "
               "its norm and attention).")
    st.download_button("Scores as CSV", _csv(result), file_name=f"{name}-patching-{result.site}.csv",
                       mime="text/csv", key="patching_csv")


def _csv(result: PatchingResult) -> str:
    """The scores with the question on commented lines: pair, answer, metric, site, direction, clean/corrupted."""
    out = io.StringIO()
    out.write(f"# clean: {' '.join(result.tokens)}\n# corrupted: {' '.join(result.corrupted_tokens)}\n"
              f"# answer: {result.answer}; wrong: {result.wrong}; metric: {result.metric}; site: {result.site}; "
              f"direction: {result.direction}; clean {result.clean:.6g}; corrupted {result.corrupted:.6g}\n")
    np.savetxt(out, result.scores.reshape(-1, result.scores.shape[-1]), delimiter=",", fmt="%.6g")
    return out.getvalue()
