"""Contribution: how much each head adds to the output; norm-based attention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import BOOL, boolean
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Contribution", EVERY_MODE, f"{__name__}:render", order=30, arrays=("head_outputs", "W_O"),
            help="How much each head adds to the output; norm-based attention.",
            fields=(StateField("norm", False, boolean, BOOL),))


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import norm_attention
    from ....figures import contributions_figure, heads_figure
    from ...style import page_width
    from ...views import chart

    trace, name = c.trace, c.name
    norm = st.toggle("Norm-based attention ‖w_ij · f_h(x_j)‖ instead of raw weights", key="norm",
                     disabled=trace.values is None,
                     help="Kobayashi et al. 2020: f_h(x_j) = v_j W_O^(h)ᵀ is what key j would add through head "
                     "h's block of W_O; a large weight on a short vector moves the output little."
                     + (" Needs the values, which this model's trace does not hold." if trace.values is None else ""))
    norm = norm and trace.values is not None
    if norm:
        st.caption("Each cell: weight × length of the key's value vector after W_O, ‖w_ij · v_j W_O^(h)ᵀ‖.")
        chart(heads_figure(trace, matrices=norm_attention(trace), value_name="‖w·f(x)‖"), "analysis_norm_heads",
              f"{name}-norm-attention")
    else:
        st.caption(("The layer's mixing matrices (signed)" if trace.mixes else "Raw softmax weights")
                   + "; switch on the norm-based view to weigh them by what they carry.")
        chart(heads_figure(trace), "analysis_weight_heads", f"{name}-heads")
    chart(contributions_figure(trace, width=page_width()), "analysis_contributions", f"{name}-contributions")
