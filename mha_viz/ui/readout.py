"""The "W_O at work" analysis section: each head's block of W_O followed to the readout (mha_viz.analysis.readout).

Offered for sources with the token_readout flag: a trained layer (each relation's readout) and a small language model
(the bundled induction model's unembedding). The readout is computed once per layer or model, in the shared cache.
"""

from __future__ import annotations

import streamlit as st

from ..analysis.readout import Readout, model_readout, trained_readout
from ..figures.readout import contributions_heatmap, token_map_figure
from ..sources import TraceSource
from .analysis import SectionContext
from .cache import cached
from .state import fit, open_on_best, put
from .state import value as field_value
from .style import column_width, is_narrow, page_width
from .views import chart, open_head_picker


def _readout(source: TraceSource) -> Readout:
    layer = getattr(source, "layer", None)
    if source.model is None and layer is not None:  # a trained layer: its arguments say which weights it has
        key = ("readout", layer.task, layer.num_heads, layer.d_model, layer.steps, layer.seed, layer.variant,
               layer.diversity, layer.diversity_kind)
        return cached(key, lambda: trained_readout(layer), "Following each head's W_O to the readouts…", heavy=True)
    key = ("readout", getattr(source, "key", None) or source.model.name)
    return cached(key, lambda: model_readout(source.model), "Splitting the logits of repeated tokens head by head…",
                  heavy=True)


def _picked_row(r: Readout, num_layers: int) -> int:
    """The row of r for the head the page has open (field "head", and "layer" for a stack)."""
    heads_per_layer = len(r.heads) // num_layers
    if num_layers > 1:
        open_head_picker("_open_head_wo", num_layers, heads_per_layer)
    layer = min(field_value("layer"), num_layers - 1) if num_layers > 1 else 0
    if field_value("head") >= heads_per_layer:
        put("head", 0)
    if num_layers == 1:
        st.selectbox("Head", list(range(heads_per_layer)), key="head", format_func=lambda h: r.heads[h])
    return layer * heads_per_layer + field_value("head")


def wo_at_work(c: SectionContext) -> None:
    r = _readout(c.source)
    st.caption(
        "A head's block of W_O says nothing on its own: what counts is where the readout takes what it writes. "
        + ("Each relation has its own readout W_r (logits = output · W_rᵀ + b_r, no residual, no MLP), so the "
           "layer's logits split exactly into one term per head plus the biases. " if r.centred else
           "The unembedding reads the residual stream, and direct logit attribution splits the logit into one term "
           "per head plus the rest. ")
        + f"Left: each head's direct contribution to the right answer's logit ({r.method}). Right: one head's "
        "token map, W_E W_V W_O " + ("W_rᵀ" if r.centred else "W_U") + ": for each source token the head attends to, "
        "what it raises among the answers (each row centred)."
    )
    for sentence in r.sentences():
        st.markdown(f"**{sentence}**")
    if len(r.answers) > 1:
        if field_value("wo_answer") >= len(r.answers):
            fit("wo_answer", 0, f"an answer from 0 to {len(r.answers) - 1} on this layer")
        answer = st.segmented_control("Readout", list(range(len(r.answers))), key="wo_answer", required=True,
                                      format_func=lambda k: r.answers[k])
    else:
        answer = 0
    heads_per_layer = len(r.heads) // c.source.num_layers
    if open_on_best("W_O at work", lambda: divmod(r.strongest()[0], heads_per_layer)):
        st.rerun()  # open on the head with the largest direct contribution (a link that names a head keeps it)
    row = _picked_row(r, c.source.num_layers)
    narrow = is_narrow()
    left, right = (st.container(), st.container()) if narrow else st.columns([2, 3])
    with left:
        chart(contributions_heatmap(r.contributions, r.heads, r.answers, width=page_width() if narrow else
                                    column_width(0.4), title="each head's direct contribution to the right answer"),
              "analysis_wo_contributions", f"{c.name}-wo-contributions")
        total = r.contributions.sum(0) + r.rest
        st.caption("Every head's term plus the rest (" + r.rest_label + ") adds up to the model's own mean logit of "
                   "the right answer: " + "; ".join(
                       f"{a!r} {t:.3f} vs {m:.3f}" for a, t, m in zip(r.answers, total, r.logit, strict=True))
                   + (". Logits are centred over the vocabulary: a shift every answer gets alike does not count."
                      if r.centred else ". Raw logits, the final norm frozen at its measured scale."))
    with right:
        name, what = r.heads[row], r.answers[answer]
        chart(token_map_figure(r.token_maps[row, answer], r.vocab, width=page_width() if narrow else column_width(0.6),
                               title=f"{name}'s token map in the {what!r} readout"),
              "analysis_wo_token_map", f"{c.name}-wo-{name}-{what}")
        V = len(r.vocab)
        copies = round(float(r.copying[row, answer]) * V)
        st.caption(f"{name}: the top answer of {copies} of {V} source tokens is the token itself; the diagonal "
                   f"stands {r.diagonal[row, answer]:+.2f} above the rest of its row on average. A bright diagonal: "
                   "the head carries the attended token's identity to where this readout looks for it.")
