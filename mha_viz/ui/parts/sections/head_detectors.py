"""Head detectors: previous-token, duplicate-token and induction scores of every head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import choice
from ....names import DETECTOR_KINDS
from ....parts import EVERY_MODE, Part, capable

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Head detectors", EVERY_MODE, f"{__name__}:render", order=90,
            help="Previous-token, duplicate-token and induction scores of every head.",
            fields=(choice("detector", "induction", DETECTOR_KINDS),))


def render(c: SectionContext) -> None:
    """Previous-token, duplicate-token and induction scores of every head, on repeated random tokens."""
    import numpy as np
    import streamlit as st

    from ....analysis import repeated_tokens
    from ....figures.generation import head_scores_figure
    from ....serve.hosting import FULL_SIZE
    from ....token_labels import token_labels
    from ....trace import AttentionTrace
    from ...analysis import open_head, show_head
    from ...state import value as field_value
    from ...style import column_width
    from ...text import plain
    from ...views import chart, open_head_picker

    source, name = c.source, c.name
    if source.model is None or source.model.kind == "encoder-decoder":
        st.info("Head detectors run a model on repeated random tokens of its own vocabulary: they need a pretrained "
                "encoder or decoder-only model.")
        return
    try:
        scores = source.head_scores(seed=0)
    except ValueError as err:
        st.warning(f"Cannot run the head detectors: {plain(str(err))}")
        return
    if scores.sequences < scores.asked:
        st.warning(f"The head detectors stopped at this demo's time budget after {scores.sequences} of their "
                   f"{scores.asked} probe sequences: the scores below average those {scores.sequences}. To "
                   f"{FULL_SIZE}.", icon=":material/timer_off:")
    st.caption(f"Each score is the mean attention a head puts where that kind of head looks, on {scores.sequences} "
               "sequences [BOS] + A + A (A: 32 distinct random tokens of the model's vocabulary, seed 0): previous = "
               "on the token just before; duplicate = on the earlier copy of the same token; induction = on the token "
               "after that earlier copy (Olsson et al. 2022). 1 = always exactly there."
               + (" On a linear or state-space layer (lin, ssm) a score is the mean entry of its mixing matrix there: "
                  "signed, and not a share of 1." if capable(c.source, "hybrid") else ""))
    kind = st.radio("Kind of head", DETECTOR_KINDS, key="detector", horizontal=True)
    left, right = st.columns([3, 2])
    with left:
        chart(head_scores_figure(scores[kind], kind, width=column_width(0.6)), "analysis_detectors", f"{name}-{kind}-heads",
              on_select=lambda: open_head("analysis_detectors"))
        open_head_picker("_open_head_detectors", *scores[kind].shape)
    L, H = scores[kind].shape
    rows = {"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
            **{k: np.round(v.ravel(), 3) for k, v in scores.items()}}
    with right:
        st.dataframe(rows, hide_index=True, key="analysis_detector_table")
    layer, head = field_value("layer"), field_value("head")
    ids, start, n = repeated_tokens(source.model, seed=0)  # (B, start + 2n)
    probe = ids[0].tolist()
    tokens = token_labels(source.model.tokenizer, probe)
    weights = source.model.attentions_for_ids(probe)[layer]  # (H, T, T)
    st.caption(f"Click a head above (or pick it in Open head) to open it here, on the first probe sequence: {start} start token, then "
               f"{n} random tokens, then the same {n} again. A previous-token head draws the diagonal just below "
               "the main one; an induction head draws a second diagonal in the repeat, one key after the copy.")
    probe_trace = AttentionTrace(query_tokens=tokens, key_tokens=tokens, weights=weights, causal=source.part == "decoder",
                                 meta={"unavailable": "the model's attention weights on a probe sequence"})
    show_head(source, layer, head, name, probe_trace)
