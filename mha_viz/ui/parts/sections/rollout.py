"""Rollout: attention chained through the layers (Abnar and Zuidema 2020)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import optional_int
from ....limits import MAX_LAYERS
from ....parts import EVERY_MODE, Part, StateField, capable

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Rollout", EVERY_MODE, f"{__name__}:render", order=50,
            help="Attention chained through the layers (Abnar and Zuidema 2020).",
            fields=(StateField("rollout_layer", None, optional_int(MAX_LAYERS - 1),
                               f"last or a layer number from 0 to {MAX_LAYERS - 1}"),))


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import attention_rollout
    from ....figures.analysis import rollout_figure
    from ...state import fit, put
    from ...state import value as field_value
    from ...views import chart

    trace = c.trace
    if trace.cross:
        st.info("Rollout chains self-attention maps layer after layer; cross-attention maps (decoder tokens × "
                "encoder tokens) do not chain. Pick the encoder or decoder self-attention.")
        return
    if capable(c.source, "hybrid"):
        st.info("Rollout multiplies the layers' attention maps as shares of the input. This model's linear or "
                "state-space layers mix tokens with signed matrices whose rows do not sum to 1, so their product is "
                "not a share of anything: rollout is left out here. Knockout and Patching measure what a token or "
                "head changes in the model itself.")
        return
    attentions = c.source.attentions()  # (L, H, T, T) or None
    if attentions is None:
        st.info("Rollout chains the attention of several layers; this model has a single attention layer, "
                "so its rollout would be just 0.5 · mean-head attention + 0.5 · I.")
        return
    rollout = attention_rollout(attentions)  # (L, T, T)
    L, T = rollout.shape[:2]
    tokens = trace.query_tokens if len(trace.query_tokens) == T else tuple(str(i) for i in range(T))
    st.caption(
        "Abnar and Zuidema 2020: each layer's mean-head attention with the residual connection as identity, "
        "A_l = 0.5·mean_h W_l + 0.5·I (rows renormalised), multiplied through the layers: A_l ⋯ A_1. Row i shows "
        "how much of each input token reaches position i."
    )
    through = L - 1
    if L > 1:
        if field_value("rollout_layer") is None:
            put("rollout_layer", L - 1)  # "last"
        elif field_value("rollout_layer") >= L:
            fit("rollout_layer", L - 1, f"this model's layers are 0 to {L - 1}")
        through = st.slider("Through layer", 0, L - 1, key="rollout_layer")
    chart(rollout_figure(rollout[through], tokens, f"rollout through layers 0 … {through}"), "analysis_rollout",
          f"{c.name}-rollout")
