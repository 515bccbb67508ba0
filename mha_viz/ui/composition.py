"""The Composition section: how much each head reads what an earlier head writes (mha_viz.analysis.composition),
and, on a model with a previous-token head and induction heads, what their K-composition says."""

from __future__ import annotations

import numpy as np
import streamlit as st

from ..analysis.composition import KIND_NAMES, KINDS, CompositionScores, composition
from ..figures.composition import READS, composition_figure
from ..parts import capable
from ..sources import TraceSource
from .analysis import SectionContext
from .cache import cached
from .fair import heavy
from .state import open_on_best
from .state import value as field_value
from .style import page_width
from .text import plain
from .views import chart, open_head_picker

DETECTED = 0.5  # a detector score above this names a head a previous-token or induction head


def _compute(source: TraceSource, kind: str) -> CompositionScores:
    with heavy("Computing composition scores"):
        return composition(source, kind)


def scores(source: TraceSource, kind: str) -> CompositionScores:
    """The source's composition scores, cached: the app's models by model and part (the weights do not depend on the
    text), any other source through its memo."""
    if capable(source, "app_cache"):
        return cached(("composition", source.key, source.part, kind), lambda: composition(source, kind),
                      "Computing composition scores…", heavy=True)
    return source.memo(("composition", kind), lambda: _compute(source, kind))


def render(c: SectionContext) -> None:
    source = c.source
    kind = st.radio("Composition", KINDS, key="composition", horizontal=True, format_func=KIND_NAMES.get)
    try:
        result = scores(source, kind)
    except ValueError as err:
        st.warning(f"Cannot compute composition scores: {plain(str(err))}")
        return
    st.caption(
        f"{KIND_NAMES[kind]}: how much a later head reads, through its {READS[kind]}, what an earlier head writes. "
        "For the writer's W_OV = W_V W_O and the reader's W_B (its W_Q W_K^T for Q, W_K W_Q^T for K, W_V W_O for V), "
        "score = ‖W_OV W_B‖_F / (‖W_OV‖_F ‖W_B‖_F), from 0 (reads nothing it writes) to 1 (Elhage et al. 2021). "
        f"Random matrices of the same shapes score {result.baseline:.3f} ± {result.baseline_std:.3f} (mean ± sd "
        f"over {result.draws} seeded draws): a score well above that is chosen by the weights. "
        f"Weights: {result.folded}."
    )
    if open_on_best("Composition", lambda: result.strongest_pair()[1]):
        st.rerun()  # open on the reader of the strongest pair (a link that names a head keeps it)
    L, H = result.scores.shape[:2]
    layer, head = min(field_value("layer"), L - 1), min(field_value("head"), H - 1)
    writer = result.strongest_writer(layer, head)
    model = result.name or c.name  # the model, not this layer: every layer's heads are in the figure
    chart(composition_figure(result.scores, result.baseline, kind, title=f"{KIND_NAMES[kind]} of {model}",
                             width=page_width(), marked=None if writer is None else (writer, (layer, head))),
          "analysis_composition", f"{model.replace('/', '-')}-composition-{kind}")
    open_head_picker("_open_head_composition", L, H)
    st.caption(open_pair_words(result, layer, head))
    if kind == "k" and source.causal_lm:
        try:
            detected = source.head_scores(seed=0)
        except ValueError:
            return
        words = induction_words(result, detected)
        if words:
            st.markdown(words)


def open_pair_words(result: CompositionScores, layer: int, head: int) -> str:
    """What the open head (the reader) reads most, in words with its score (outlined in the figure)."""
    writer = result.strongest_writer(layer, head)
    if writer is None:
        return f"Open head {_head(layer, head)}: a layer-0 head reads no earlier head's output. Pick a later head."
    score = float(result.scores[(*writer, layer, head)])
    strongest = result.strongest_pair()
    best = float(result.scores[(*strongest[0], *strongest[1])])
    return (f"Open head {_head(layer, head)}: it reads most, through its {READS[result.kind]}, the output of head "
            f"{_head(*writer)} (the outlined cell): {score:.3f} (random matrices: {result.baseline:.3f}). The "
            f"strongest pair of the model: {_head(*strongest[0])} → {_head(*strongest[1])}, {best:.3f}.")


def _head(layer: int, head: int) -> str:
    return f"{layer}.{head}"


def induction_words(result: CompositionScores, detected: dict[str, np.ndarray]) -> str | None:
    """What the K-composition says about the previous-token and induction heads the detectors find (detect_heads),
    in words with the numbers; None when the model has no such pair."""
    prev = [tuple(map(int, i)) for i in np.argwhere(detected["previous"] > DETECTED)]
    induction = [tuple(map(int, i)) for i in np.argwhere(detected["induction"] > DETECTED)]
    pairs = [(p, i) for p in prev for i in induction if p[0] < i[0]]
    if not pairs:
        return None
    s = result.scores
    readers = sorted({i for _, i in pairs})
    fed, rows = [], []
    for l2, h2 in readers:
        column = s[:l2, :, l2, h2]  # every earlier head writing into this induction head's keys
        best = np.unravel_index(int(np.argmax(column)), column.shape)
        senders = [p for p in prev if p[0] < l2]
        top = max(senders, key=lambda p: column[p])
        others = np.delete(column.ravel(), np.ravel_multi_index(top, column.shape))
        rows.append((top, (l2, h2), float(column[top]), float(others.max()) if others.size else 0.0))
        if tuple(map(int, best)) in senders:
            fed.append((l2, h2))
    prev_names = ", ".join(f"{_head(*p)} (previous-token score {detected['previous'][p]:.2f})" for p in prev)
    ind_names = ", ".join(_head(*i) for i in readers)
    scores = "; ".join(f"{_head(*p)} → {_head(*i)}: {v:.3f} (next highest writer {o:.3f})" for p, i, v, o in rows)
    head_says = (f"The head detectors find the previous-token head{'s' if len(prev) > 1 else ''} {prev_names} and "
                 f"the induction head{'s' if len(readers) > 1 else ''} {ind_names}. ")
    if len(fed) == len(readers):
        return (head_says + "**In K-composition the previous-token head is the earlier head whose output every "
                f"induction head's keys read most** ({scores}; random matrices: {result.baseline:.3f}). That is the "
                "mechanism of induction (Elhage et al. 2021, Olsson et al. 2022): the previous-token head writes into "
                "each position which token came before it; the induction head's keys read that, so a query token A "
                "matches the position right after an earlier A, and the head copies the token found there.")
    return (head_says + f"K-composition singles out a previous-token head for {len(fed)} of the {len(readers)} "
            f"induction heads ({scores}; random matrices: {result.baseline:.3f}): here induction does not run only "
            "through a previous-token head's output in the keys.")
