"""The Two maps view: a differential head's two softmax maps, their difference on a signed scale, lambda, and what
the subtraction cancels (mha_viz.analysis.differential)."""

from __future__ import annotations

import streamlit as st

from ..analysis.differential import common_mode, first_token_demo
from ..figures.differential import cancelled_keys_figure, common_mode_figure, two_maps_figure
from .state import put
from .state import value as field_value
from .style import is_narrow, page_width
from .view_parts import ViewContext
from .views import chart

WHY = ("Why subtract? Softmax gives every key some weight, and many heads put much of it on the same few keys "
       "whatever the query (the first token, punctuation): attention noise. A differential head computes two maps "
       "from two query/key pairs and subtracts the second, scaled by λ, from the first. Attention both maps give "
       "the same keys cancels, as a differential amplifier cancels the signal common to its two inputs, and what is "
       "left is what the first map sees and the second does not. The weights are signed (rows sum to 1 − λ) and the "
       "head's output passes a norm, (1 − λ_init)·RMSNorm, before W_O.")


def two_maps(c: ViewContext) -> None:
    trace = c.drawn
    if trace.maps is None or trace.lambdas is None:
        st.info("The Two maps view needs differential attention: pick the Diff variant (or a DiffLlama model).")
        return
    n = trace.weights.shape[0]
    if field_value("head") >= n:
        put("head", 0)
    head = st.selectbox("Differential head", list(range(n)), key="head", format_func=lambda h: f"head {h}")
    st.caption(WHY)
    narrow = is_narrow()
    chart(two_maps_figure(trace, head, width=page_width(), compact=narrow), "two_maps", f"{c.name}-head{head}-maps")
    cm = common_mode(trace)
    lam = cm.lambdas[head]
    st.caption(f"λ = {lam:.3f} in this layer (λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init). Head {head}: on average "
               f"{cm.common[head]:.3f} of map₁'s unit of attention goes to keys λ·map₂ also reads, and cancels; "
               f"{cm.kept[head]:.3f} stays positive and {cm.negative[head]:.3f} turns negative (where λ·map₂ is larger)."
               " Cancelled per row: Σ_j min(map₁, λ·map₂).")
    chart(common_mode_figure(cm, width=page_width()), "common_mode", f"{c.name}-common-mode")
    chart(cancelled_keys_figure(cm, head, trace.key_tokens, width=page_width()), "cancelled_keys",
          f"{c.name}-head{head}-cancelled-keys")
    with st.expander("A demonstration: both maps attend to the first token"):
        demo = first_token_demo()
        st.caption("A hand-built head (random weights rarely show it this clearly): map₁ puts 0.8 of every row on the "
                   "first token, a sink, and 0.2 on the last token, the signal; map₂ puts all of it on the first token. "
                   "With λ = 0.8 the difference removes the first token's share and keeps the signal "
                   f"(cancelled: {common_mode(demo).common[0]:.2f} a row).")
        chart(two_maps_figure(demo, 0, width=page_width(), compact=narrow), "two_maps_demo", "differential-demo")
