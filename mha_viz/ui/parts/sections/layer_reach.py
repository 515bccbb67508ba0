"""Layer reach: which keys each layer lets a query see, measured by probing the model, beside what its config declares
(analysis.visibility)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....parts import EVERY_MODE, Part

if TYPE_CHECKING:
    from ...analysis import SectionContext

MAX_PROBED = 64  # tokens probed: every key costs one call of each layer's attention module
PART = Part("Layer reach", EVERY_MODE, f"{__name__}:render", order=88,
            help="Which keys each layer lets a token see, measured by probing the model, beside what its config "
            "declares.")


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import visibility
    from ....figures.reach import reach_figure
    from ...fair import heavy
    from ...style import page_width
    from ...text import plain
    from ...views import chart

    model = c.source.model
    if model is None:
        st.info("Layer reach needs a model to probe: this layer's mask is the one its controls set (causal, window), "
                "drawn in the Heads view.")
        return
    T = min(len(c.trace.query_tokens), MAX_PROBED)
    try:
        with heavy("Probing every layer"):
            report = c.source.memo(("visibility", T), lambda: visibility(model, T))
    except ValueError as err:
        st.info(f"Layer reach is unavailable: {plain(str(err))}.")
        return
    st.caption(f"Each layer's attention module is called again with the mask and positions it got on {T} random "
               "tokens, on one vector at every position, one key's input pushed at a time: a query reaches the key "
               "when its output moves. Nothing of the config is read for that; the declared reach is what the config "
               "says (causal or both ways, sliding windows, chunks).")
    st.dataframe(report.table(), hide_index=True, width="stretch")
    layer = next((r for r in report.layers if r.layer == c.layer), None)
    if layer is None:
        st.info(f"Layer {c.layer} is not softmax attention: its reach is not probed.")
        return
    tokens = [str(i) for i in range(T)]  # positions of the random probe input
    chart(reach_figure(layer.measured, layer.declared, tokens, width=page_width(),
                       title=f"Layer {layer.layer}: {layer.verdict} (declared: {layer.rule})"),
          "analysis_reach", f"{c.name}-L{layer.layer}-reach")
