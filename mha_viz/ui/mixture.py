"""The Router (MoH) view: which heads a mixture-of-heads router gives each token, how often each head is used, and the
gated concat W_O receives (offered for the configurable layer's moh variant: the routed flag)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from ..figures.mixture import gated_concat_figure, load_figure, router_figure
from ..variants.mixture import head_load
from .style import page_width
from .view_parts import ViewContext
from .views import chart


def render(c: ViewContext) -> None:
    trace = c.drawn
    meta = trace.meta
    if trace.gates is None or "picked" not in meta:
        st.info("This layer has no router: pick the MoH variant to see one.")
        return
    gates, picked = trace.gates, np.asarray(meta["picked"])
    shared, k, H = int(meta["moh_shared"]), int(meta["moh_k"]), trace.num_heads
    st.caption(
        "Dynamic head selection, the answer mixture-of-heads gives to \"do all heads matter for every token?\": a "
        f"router reads each token and gives every head a gate. The token keeps its top {k} of the {H - shared} routed "
        "heads" + (f" and always uses the {shared} shared head" + ("s" if shared > 1 else "") if shared else "")
        + "; the others get gate 0. Each head's attention map is computed as in MHA, but its output is multiplied by "
        "the gate before W_O, so an unused head adds nothing to that token's output (and need not be computed: MoH "
        "saves compute, not KV cache). The gates are softmax weights"
        + (", split between shared and routed heads by a second softmax (α₁, α₂)" if shared else "")
        + "; top-k chooses, the gate values carry the gradient that trains the router."
    )
    width = page_width()
    chart(router_figure(gates, picked, shared, trace.query_tokens, k=k, width=width), "moh_router",
          f"{c.name}-router")
    chart(load_figure(head_load(picked), shared, k=k, width=width), "moh_load", f"{c.name}-head-load")
    st.caption("Random weights route by chance; a trained router learns which heads each kind of token needs. "
               "MoH training adds a load-balance loss so that the routed heads are used about equally.")
    chart(gated_concat_figure(trace.concat, gates, trace.query_tokens, shared=shared, width=width), "moh_concat",
          f"{c.name}-gated-concat")
    st.caption("concat · W_Oᵀ + b is still the output (Concat → W_O checks it): the gates already sit in the concat.")
