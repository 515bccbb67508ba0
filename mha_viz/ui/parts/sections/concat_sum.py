"""Concat vs sum: what concatenating the heads keeps that summing them would lose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....parts import EVERY_MODE, Part

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Concat vs sum", EVERY_MODE, f"{__name__}:render", order=70,
            arrays=("head_outputs", "W_O", "output", "concat"),
            help="What concatenating the heads keeps that summing them would lose.")
SUM_LOSES = 0.05  # a shared W' that misses more than this share of the output: summing loses what concat keeps


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import concat_vs_sum
    from ....figures.analysis import concat_sum_figure
    from ...views import chart, labelled_value

    trace = c.trace
    result = concat_vs_sum(trace)
    H, T, d_v = trace.num_heads, len(trace.query_tokens), trace.d_v
    st.caption(
        f"Concatenating gives W_O {result.concat_dims} numbers per token ({H} heads × d_v = {d_v}), each "
        f"head with its own block W_O^(h). Summing the heads would give it only {result.sum_dims}: (Σ_h head_h)·W'ᵀ "
        "= Σ_h head_h·W'ᵀ, so one shared W' would have to do the work of every block. Below: how close a shared W' "
        "comes to this layer's real output − b_O."
    )
    cols = st.columns(3)
    labelled_value(cols[0], "concat · W_Oᵀ (the real path: float rounding only)", f"{result.concat_error:.1e}")
    labelled_value(cols[1], "sum · best shared W' (fitted to every head's term)", f"{result.fitted_error:.1%}")
    labelled_value(cols[2], "sum · W' = mean of the W_O blocks", f"{result.mean_error:.1%}")
    if H == 1:
        st.info("With one head the concat is the head's output and there is nothing to sum: both paths are the "
                "same. Pick h > 1.")
    elif result.fits_any:
        st.warning(
            f"The {H * T} head-output vectors ({H} heads × {T} tokens) are linearly independent (H·T ≤ d_v = {d_v} "
            "makes this likely), so a fitted W' reproduces every head's term on this input: its error of ~0 says "
            f"nothing here. Use more than {d_v // H} tokens to see what summing loses; the mean-block W' does not "
            "depend on the input."
        )
    elif result.fitted_error > SUM_LOSES:
        st.markdown(
            f"**Summing loses.** Even the best shared W' misses {result.fitted_error:.0%} of this layer's output "
            f"(the mean block: {result.mean_error:.0%}): these heads write into directions their own blocks of W_O "
            "map differently, so each needs its block, which concatenating gives it."
        )
    else:
        st.markdown(
            f"**Here summing would lose little.** A shared W' comes within {result.fitted_error:.1%} of this "
            "layer's output: on this input the heads' blocks of W_O act alike on what the heads write."
        )
    chart(concat_sum_figure(result, trace.query_tokens), "analysis_concat_sum", f"{c.name}-concat-vs-sum")
