"""The Patching section: activation patching between a clean and a corrupted prompt (mha_viz.analysis.patching)."""

from __future__ import annotations

import io
from contextlib import nullcontext

import numpy as np
import streamlit as st

from ..analysis.patching import (
    BATCH,
    PAIRS,
    PatchingResult,
    activation_patching,
    pairs_for,
    patching_unavailable,
    path_patching_scan,
)
from ..figures.patching import patching_figure
from ..limits import MAX_PATCH_PASSES
from ..names import PATCH_CHOICES, PATCH_DIRECTIONS, PATCH_METRICS, PATCH_THROUGH
from ..pretrained import INDUCTION_MODEL
from ..serve.hosting import long_text
from ..token_labels import vocab_token
from .analysis import SectionContext
from .composition import DETECTED
from .fair import TimeSpent, check_time, heavy
from .state import confine, kept, put, put_all
from .state import value as field_value
from .style import page_width
from .text import plain
from .views import chart, labelled_value

OWN_PAIR = ""  # patch_pair for a pair the user types
SITE_LABELS = {"head": "head outputs", "head_position": "head outputs by position",
               "residual": "residual stream", "pattern": "attention patterns", "path": "path to receivers"}
THROUGH_LABELS = {"q": "queries", "k": "keys", "v": "values"}
_RECEIVERS_FOR = "_patch_receivers_for"  # the model whose heads patch_receivers was last checked against
METRIC_LABELS = {"logit_diff": "logit difference", "logprob": "log-prob of the answer", "prob": "prob of the answer"}
DIRECTION_LABELS = {"denoise": "denoise (clean into corrupted)", "noise": "noise (corrupted into clean)"}


def _fill_pair() -> None:
    """Copy the picked ready-made pair into the pair's fields."""
    pair = PAIRS.get(field_value("patch_pair"))
    if pair is not None:
        put_all(patch_clean=pair.clean, patch_corrupted=pair.corrupted, patch_answer=pair.answer,
                patch_wrong=pair.wrong or "", patch_metric="logit_diff" if pair.wrong else "logprob")


def _as_token(model, typed: str) -> int | str:
    """A typed answer as a token: the token itself if the vocabulary has it (as spelled there, or as the page labels
    it: " fox" for GPT-2's 'Ġfox'), else the single token the word is with a space before it, else the text as typed
    (the library then says it is not a token)."""
    vocab = model.tokenizer.get_vocab()
    if typed in vocab:
        return typed
    spelled = vocab_token(model.tokenizer, typed)
    if spelled in vocab:
        return int(vocab[spelled])
    ids = model.tokenizer(" " + typed, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 and ids[0] != model.tokenizer.unk_token_id else typed


def render(c: SectionContext) -> None:
    model = c.source.model
    reason = "this layer is not part of a language model" if model is None else patching_unavailable(model)
    if reason is not None:
        st.info(f"Patching needs a causal language model: {plain(reason)}.")
        return
    pairs = pairs_for(model.name)
    confine("patch_pair", (OWN_PAIR, *pairs))
    if pairs and not field_value("patch_clean") and not field_value("patch_corrupted"):
        put("patch_pair", field_value("patch_pair") or next(iter(pairs)))
        _fill_pair()
    if not field_value("patch_clean"):
        put("patch_clean", c.source.text)
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
    site = s.radio("Patch", PATCH_CHOICES, key="patch_site", format_func=SITE_LABELS.get, horizontal=True)
    direction = d.radio("Direction", PATCH_DIRECTIONS, key="patch_direction", format_func=DIRECTION_LABELS.get,
                        horizontal=True)
    path = None
    if site == "path":
        path = _path_choices(c, model)
        if path is None:
            return
    if not corrupted.strip() or not answer.strip():
        st.info("Type a corrupted prompt and the answer token the clean prompt should lead to.")
        return
    if metric == "logit_diff" and not wrong.strip():
        st.info("The logit difference needs a wrong token (the corrupted prompt's answer), or pick a log-prob metric.")
        return
    limit = MAX_PATCH_PASSES if c.max_passes is None else c.max_passes * BATCH
    question = (clean, corrupted, answer.strip(), wrong.strip() if metric == "logit_diff" else None, metric, site,
                direction, limit, path)
    try:  # a question asked before (by any session on this model and text) is not computed again
        result = c.source.memo(("patching", *question), lambda: _run(model, *question))
    except (ValueError, TimeSpent) as err:
        st.warning(f"Cannot patch: {plain(str(err))}")
        return
    _show(result, c.name)


def _path_choices(c: SectionContext, model) -> tuple[tuple[tuple[int, int], ...], str] | None:
    """The receiver heads and their input (q, k or v) for path patching, or None (with a message) when there is no
    sender to scan. Receivers a link names that the model does not have are left out with a warning; none named
    (or none left on another model): the default receivers."""
    L, H = model.num_layers["decoder"], model.adapter.site("decoder", 0).num_heads
    options = [f"{layer}.{h}" for layer in range(L) for h in range(H)]
    chosen = list(field_value("patch_receivers") or ())
    bad = [r for r in chosen if r not in options]
    if bad:
        st.warning(f"Receiver heads {', '.join(map(plain, bad))} are not heads of {plain(model.name)} "
                   f"(layers 0 … {L - 1}, heads 0 … {H - 1}): left out.")
        chosen = [r for r in chosen if r in options]
    if not chosen and kept(_RECEIVERS_FOR) != model.name:
        chosen = _default_receivers(c, model, L, H)
    put("patch_receivers", chosen)
    put(_RECEIVERS_FOR, model.name)
    r, t = st.columns([3, 1])
    picked = r.multiselect("Receiver heads (layer.head)", options, key="patch_receivers",
                           help="Path patching (Wang et al. 2022) patches each earlier sender head's effect on these "
                                "heads only, through their queries, keys or values.")
    through = t.radio("Through their", PATCH_THROUGH, key="patch_through", format_func=THROUGH_LABELS.get,
                      horizontal=True)
    receivers = tuple(sorted(tuple(int(i) for i in p.split(".")) for p in picked))
    if not receivers:
        st.info("Pick at least one receiver head.")
        return None
    if max(layer for layer, _ in receivers) == 0:
        st.info("Receivers in layer 0 have no earlier heads to send to them: pick a receiver in a later layer.")
        return None
    return receivers, through


def _default_receivers(c: SectionContext, model, L: int, H: int) -> list[str]:
    """On the bundled induction model its induction heads (the head detectors' score above DETECTED), else the heads
    of the last layer."""
    if model.name == INDUCTION_MODEL:
        try:
            found = np.argwhere(c.source.head_scores(seed=0)["induction"] > DETECTED)
        except ValueError:
            found = np.empty((0, 2), dtype=int)
        if len(found):
            return [f"{int(layer)}.{int(h)}" for layer, h in found]
    return [f"{L - 1}.{h}" for h in range(H)]


def _run(model, clean: str, corrupted: str, answer: str, wrong: str | None, metric: str, site: str, direction: str,
         limit: int, path: tuple[tuple[tuple[int, int], ...], str] | None) -> PatchingResult:
    """The patching itself, as heavy work (one at a time across sessions), with a progress bar; site "path": the
    path patching scan of every sender head to path's (receivers, through). Light (no turn) for the prompts of up to
    LIGHT_CHARS that patching reads, except a path scan (a pass per sender head)."""
    light = path is None and not (long_text(clean) or long_text(corrupted))
    with nullcontext() if light else heavy("Patching"):
        bar = st.progress(0.0, text="Patching…")
        common = {"answer": _as_token(model, answer), "wrong": None if wrong is None else _as_token(model, wrong),
                  "metric": metric, "direction": direction, "max_passes": limit}
        try:
            if path is not None:
                return path_patching_scan(
                    model, clean, corrupted, receivers=path[0], through=path[1], **common,
                    on_pass=lambda done, total: check_time() or bar.progress(done / total,
                                                                             text=f"{done} of {total} senders patched"))
            return activation_patching(
                model, clean, corrupted, site=site, **common,
                on_pass=lambda done, total: check_time() or bar.progress(done / total, text=f"{done} of {total} patched"))
        finally:
            bar.empty()


def _show(result: PatchingResult, name: str) -> None:
    if result.notice:
        st.warning(plain(result.notice), icon=":material/content_cut:")
    cols = st.columns(2)
    labelled_value(cols[0], f"Clean run ({METRIC_LABELS[result.metric]})", f"{result.clean:.4g}")
    labelled_value(cols[1], f"Corrupted run ({METRIC_LABELS[result.metric]})", f"{result.corrupted:.4g}")
    chart(patching_figure(result, width=page_width()), "analysis_patching", f"{name}-patching-{result.site}")
    if result.site.startswith("path_"):
        st.markdown(path_words(result))
    else:
        _site_caption(result)
    st.download_button("Scores as CSV", _csv(result), file_name=f"{name}-patching-{result.site}.csv",
                       mime="text/csv", key="patching_csv")


def path_words(result: PatchingResult) -> str:
    """The path patching scan in words, from its numbers: the sender that moves the metric most, and the next."""
    moved = np.abs(result.scores.astype(np.float64) - (result.direction == "noise"))  # NaN where no path
    ranked = np.argsort(-np.nan_to_num(moved, nan=-1.0), axis=None)  # most moved first, no-path cells last
    order = [u for u in (tuple(int(i) for i in np.unravel_index(k, moved.shape)) for k in ranked) if not np.isnan(moved[u])]
    receivers = ", ".join(f"{layer}.{h}" for layer, h in result.detail["receivers"])
    reads = THROUGH_LABELS[result.site.removeprefix("path_")]
    (tl, th), score = order[0], float(result.scores[order[0]])
    effect = (f"restores {score:.2f} of the clean run" if result.direction == "denoise"
              else f"leaves {score:.2f} of the clean run (removes {1 - score:.2f})")
    words = (f"**Top sender: head {tl}.{th}** (layer {tl}, head {th}). Patched only along its path into the {reads} "
             f"of the receivers {receivers}, it {effect}")
    if len(order) > 1:
        (nl, nh) = order[1]
        words += f"; the next sender, {nl}.{nh}, scores {float(result.scores[nl, nh]):.2f}"
    return (words + ". Each cell: one sender head's output taken from the other run and passed on to the receivers "
            f"only by the residual stream and the MLPs (every other head frozen), the receivers' {reads} alone "
            "patched with what arrives (Wang et al. 2022); empty cells: heads in or after the last receiver's layer, "
            "which have no path to it.")


def _site_caption(result: PatchingResult) -> None:
    best = np.unravel_index(np.nanargmax(np.abs(result.scores - (result.direction == "noise"))), result.scores.shape)
    where = {2: "layer {}, head {}", 3: "layer {}, head {}, position {}"}[len(best)]
    if result.site == "residual":
        where = "layer {}, position {}"
    st.caption(f"Scores: (patched − corrupted) / (clean − corrupted) of the {METRIC_LABELS[result.metric]} after the "
               f"last token. The unit that moves it most: {where.format(*(int(i) for i in best))} "
               f"({result.scores[best]:.2f}). The residual stream is taken where each layer's block starts (before "
               "its norm and attention).")


def _csv(result: PatchingResult) -> str:
    """The scores with the question on commented lines: pair, answer, metric, site, direction, clean/corrupted."""
    out = io.StringIO()
    out.write(f"# clean: {' '.join(result.tokens)}\n# corrupted: {' '.join(result.corrupted_tokens)}\n"
              f"# answer: {result.answer}; wrong: {result.wrong}; metric: {result.metric}; site: {result.site}; "
              f"direction: {result.direction}; clean {result.clean:.6g}; corrupted {result.corrupted:.6g}\n")
    if result.notice:
        out.write(f"# {result.notice}\n")
    if "receivers" in result.detail:
        out.write("# path patching: rows = sender layers, columns = sender heads, nan = no path; receivers: "
                  + " ".join(f"{layer}.{h}" for layer, h in result.detail["receivers"])
                  + f"; through: {result.site.removeprefix('path_')}\n")
    np.savetxt(out, result.scores.reshape(-1, result.scores.shape[-1]), delimiter=",", fmt="%.6g")
    return out.getvalue()
