"""Layer reach: which keys each layer lets a query see, measured by probing the model, beside what its config declares
(analysis.visibility)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import BOOL, boolean, choice, whole
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    from ...analysis import SectionContext

MAX_PROBED = 64  # tokens probed: every key costs two probes of each layer's attention kernel
KERNELS = ("sdpa", "eager")  # analysis.visibility.KERNELS, in the order the control offers them
PART = Part("Layer reach", EVERY_MODE, f"{__name__}:render", order=88,
            help="Which keys each layer lets a token see, measured by probing the model, beside what its config "
            "declares.", fields=(choice("reach_kernel", "sdpa", KERNELS),  # the padding box's range follows the text
                                 StateField("reach_padding", 0, lambda raw: whole(raw, 0, MAX_PROBED - 2),
                                            f"a whole number from 0 to {MAX_PROBED - 2}"),
                                 StateField("reach_one_head", False, boolean, BOOL)))  # else the layer: every head


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import probe_kernels, visibility
    from ....figures.reach import reach_figure
    from ...analysis import clamp_heads
    from ...fair import heavy
    from ...state import fit, put
    from ...state import value as field_value
    from ...style import page_width
    from ...text import plain
    from ...views import chart

    model = c.source.model
    if model is None:
        st.info("Layer reach needs a model to probe: this layer's mask is the one its controls set (causal, window), "
                "drawn in the Heads view.")
        return
    T = min(len(c.trace.query_tokens), MAX_PROBED)
    kernels = probe_kernels(model) or ("eager",)  # (): not probed, which visibility says below
    if field_value("reach_kernel") not in kernels:
        put("reach_kernel", "eager")  # this family has no sdpa kernel: not a bad link, the only choice
    if field_value("reach_padding") > T - 2:
        fit("reach_padding", T - 2, f"a whole number from 0 to {T - 2}: {T} positions are probed")
    a, b = st.columns(2)
    kernel = a.radio("Attention kernel probed", kernels, key="reach_kernel", horizontal=True,
                     help="The code that applies the mask: sdpa, transformers' default, or eager, the plain one "
                     "mha-viz reads weights from. A bug can live in one and not the other.")
    padding = b.number_input("Left padding", 0, T - 2, key="reach_padding", step=1,
                             help="The first positions are padding (attention mask 0), as batched generation pads: "
                             "no query should reach them, and a padding query's own row is not compared.")
    try:
        with heavy("Probing every layer"):
            report = c.source.memo(("visibility", T, kernel, padding),
                                   lambda: visibility(model, T, kernel=kernel, padding=padding))
    except ValueError as err:
        st.info(f"Layer reach is unavailable: {plain(str(err))}.")
        return
    st.caption(f"One forward pass on {T} random tokens keeps the mask and positions each layer's attention module "
               "gets. The module is then run again on one vector at every position, and its attention kernel "
               f"({report.kernel}) with one key's key and value pushed far one way, then the other: a query reaches "
               "the key when its output moves, head by head (a family whose module does not call transformers' "
               "attention interface is probed whole: the table's last column says which). Then two adjacent keys swap "
               "places on the layer's own input: a query that sees both moves only if the layer reads positions "
               "(rotary, ALiBi), not in a NoPE layer. Nothing of the config is read for that; the declared side is "
               "what the config says (causal or both ways, sliding windows, chunks, padding, positions).")
    st.dataframe(report.table(), hide_index=True, width="stretch")
    layer = next((r for r in report.layers if r.layer == c.layer), None)
    if layer is None:
        st.info(f"Layer {c.layer} is not softmax attention: its reach is not probed.")
        return
    tokens = [str(i) for i in range(T)]  # positions of the random probe input
    measured, title = layer.measured, f"Layer {layer.layer}: {layer.verdict}"
    if layer.heads is not None and st.toggle(
            "One head", key="reach_one_head", help="Draw one head's reach instead of the layer's (the keys any of its "
            "heads reaches). The verdict above names each head whose reach differs from the layer's."):
        clamp_heads(len(layer.heads))
        head = st.selectbox("Head", list(range(len(layer.heads))), key="head", format_func=lambda h: f"head {h}" + (
            " (differs from the layer)" if h in layer.differing_heads else ""))
        measured = layer.heads[head].copy()
        measured[:padding] = layer.declared[:padding]  # a padding query's row is not compared
        more, fewer = int((measured & ~layer.declared).sum()), int((~measured & layer.declared).sum())
        title = f"Layer {layer.layer}, head {head}: " + ("as declared" if more == fewer == 0 else
                                                         f"{more} pairs reached that should not be, {fewer} not "
                                                         "reached that should be")
    chart(reach_figure(measured, layer.declared, tokens, width=page_width(), title=f"{title} (declared: {layer.rule})"),
          "analysis_reach", f"{c.name}-L{layer.layer}-reach")
