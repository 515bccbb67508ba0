"""Redundancy: which heads attend alike (Jensen-Shannon divergence)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import ranged
from ....parts import EVERY_MODE, Part

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Redundancy", EVERY_MODE, f"{__name__}:render", order=20,
            help="Which heads attend alike (Jensen-Shannon divergence).",
            fields=(ranged("threshold", 0.05, 0.0, 0.5, "a number from {lo} to {hi}"),))


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import redundancy
    from ....figures.analysis import divergence_figure
    from ....parts import bounds
    from ...views import chart

    st.caption(
        "Jensen-Shannon divergence between two heads' attention rows, averaged over the query tokens: "
        "0 bits = they attend identically, 1 bit = to disjoint tokens. Similar heads are clustered together."
    )
    threshold = st.slider("Near-duplicate below (mean JSD, bits)", *bounds("threshold"), step=0.01, key="threshold")
    result = redundancy(c.trace.weights, threshold)
    chart(divergence_figure(result), "analysis_divergence", f"{c.name}-redundancy")
    if result.duplicates:
        pairs = ", ".join(f"head {a} ≈ head {b} ({result.divergence[a, b]:.3f})" for a, b in result.duplicates)
        st.warning(f"Near-duplicates on this input: {pairs}.")
    else:
        st.caption(f"No two heads are closer than {threshold:g} bits on this input.")
