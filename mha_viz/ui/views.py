"""The main views; each takes an AttentionTrace, so every model kind shares them."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from ..config import MHAConfig
from ..cost import full_width_head, layer_cost
from ..figures import contributions_figure, head_steps_figure, heads_figure, output_path_figure, overview_figure
from ..figures.heads import MAX_CELLS_PER_SIDE
from ..formulas import formulas
from ..trace import AttentionTrace

PLOT_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
APP_FONT = {"family": '"Source Sans", sans-serif', "color": "#31333F"}  # Streamlit's own text font and colour


def chart(fig: go.Figure, key: str, filename: str) -> None:
    """Draw fig once in the browser, not twice.

    Streamlit mounts a new chart for every new figure (the element id hashes the spec), draws it,
    then passes a JSON copy of it to Plotly.react. Plotly redraws everything if the figure has a
    template (Streamlit's theme adds one) or no datarevision (arrays are compared by identity):
    0.1-0.3 s more of the browser's main thread per chart. Without a template, and with a fixed
    datarevision (data never changes under a mounted chart), that second pass only redraws the
    annotations (~60 ms for the 12-head grid's titles).
    Axes keep the theme's automargin unless the figure turned it off (the heads grid does: it is
    a second layout pass).
    """
    config = {**PLOT_CONFIG, "toImageButtonOptions": {**PLOT_CONFIG["toImageButtonOptions"], "filename": filename}}
    fig.layout.template = None
    fig.update_layout(datarevision=key, font=APP_FONT)
    for axis in (*fig.select_xaxes(), *fig.select_yaxes()):
        if axis.automargin is None:
            axis.automargin = True
    st.plotly_chart(fig, width="stretch", key=key, config=config, theme=None)


def _clamp_head_selection(num_heads: int) -> None:
    """Drop head numbers a smaller h no longer has, before the widgets read them."""
    st.session_state["compare"] = tuple(h for h in st.session_state.get("compare", ()) if h < num_heads)
    if st.session_state.get("head", 0) >= num_heads:
        st.session_state["head"] = 0


def heads_view(trace: AttentionTrace, name: str) -> None:
    H, T, S = trace.weights.shape
    st.caption(
        f"{H} heads, each a {T}×{S} attention matrix: row = query token, column = key token, "
        "colour = softmax weight (each row sums to 1). One colour scale for all heads."
    )
    pooled = max(T, S) > MAX_CELLS_PER_SIDE
    if pooled:
        st.caption(
            f"{max(T, S)} tokens: each cell shows the largest weight in a block of positions. Pick heads "
            f"below to see a {MAX_CELLS_PER_SIDE}-token window at full resolution."
        )
    chart(heads_figure(trace), "heads", f"{name}-heads")
    _clamp_head_selection(H)
    chosen = st.multiselect(
        "Compare heads side by side (larger)", list(range(H)), key="compare", format_func=lambda h: f"head {h}",
        placeholder="Pick heads to compare…",
    )
    if chosen:
        window = None
        if pooled:
            start = st.slider("Full-resolution window: first position", 0, max(T, S) - MAX_CELLS_PER_SIDE, 0,
                              step=8, key="zoom")
            window = (start, start + MAX_CELLS_PER_SIDE)
        fig = heads_figure(trace, chosen, cols=min(len(chosen), 3), cell_px=28, window=window)
        chart(fig, "compare_heads", f"{name}-compare")


def head_view(trace: AttentionTrace, name: str) -> None:
    _clamp_head_selection(trace.num_heads)
    head = st.selectbox("Head", list(range(trace.num_heads)), key="head", format_func=lambda h: f"head {h}")
    st.caption(
        "Q and K meet in the scores Q·Kᵀ (scaled by 1/√d_k); the softmax turns each row into weights; "
        "the weights mix the rows of V into the head's output."
    )
    chart(head_steps_figure(trace, head), "head_steps", f"{name}-head{head}-steps")


def output_path_view(trace: AttentionTrace, name: str) -> None:
    st.caption(
        "The heads' outputs are laid side by side (concat, before W_O); W_O mixes them into the output. "
        "Because concat · W_Oᵀ splits into one product per head block, the output is the sum of each "
        "head's contribution head_h · W_O^(h)ᵀ plus the bias."
    )
    chart(output_path_figure(trace), "output_path", f"{name}-concat-wo")
    checks = trace.check_wo_path()
    cols = st.columns(len(checks))
    for col, (label, err) in zip(cols, checks.items()):
        col.metric(label, f"{err:.1e}", help="max |difference| over all entries; float rounding only")
    chart(contributions_figure(trace), "contributions", f"{name}-contributions")


def cost_view(cfg: MHAConfig, T: int, S: int) -> None:
    ours, wide = layer_cost(cfg, T, S), layer_cost(full_width_head(cfg), T, S)
    H = cfg.num_heads
    shapes = {
        "x (queries in)": f"{T} × {cfg.d_model}",
        "W_Q, W_K, W_V": f"{H} × ({cfg.d_model} × {cfg.d_k}), {H} × ({cfg.d_context} × {cfg.d_k}), {H} × ({cfg.d_context} × {cfg.d_v})",
        "Q_h, K_h, V_h": f"{T} × {cfg.d_k}, {S} × {cfg.d_k}, {S} × {cfg.d_v}",
        "scores, weights (per head)": f"{T} × {S}",
        "head_h": f"{T} × {cfg.d_v}",
        "concat": f"{T} × {cfg.concat_width}",
        "W_O": f"{cfg.d_out} × {cfg.concat_width}",
        "output": f"{T} × {cfg.d_out}",
    }
    st.table({"tensor": list(shapes), "shape": list(shapes.values())})
    rows = ["weights", "biases", "parameters", "FLOPs"]
    st.table(
        {
            "": rows,
            f"{H} heads (d_k={cfg.d_k})": [f"{ours.weight_count:,}", f"{ours.bias_count:,}", f"{ours.params:,}", f"{ours.total_flops:,}"],
            f"1 full-width head (d_k={cfg.num_heads * cfg.d_k})": [
                f"{wide.weight_count:,}", f"{wide.bias_count:,}", f"{wide.params:,}", f"{wide.total_flops:,}"
            ],
        }
    )
    if cfg.is_standard:
        st.success(
            f"With d_k = d_v = d_model/h and d_out = d_model the weights are 4·d_model² = 4·{cfg.d_model}² = "
            f"{4 * cfg.d_model**2:,}, the same as one full-width head: more heads are narrower views, not more parameters."
        )
    st.caption("FLOPs count a multiply-add as 2; the only extra cost of h heads is h softmaxes instead of one.")
    st.table({"step": list(ours.flops), "FLOPs": [f"{v:,}" for v in ours.flops.values()]})


def formulas_view(cfg: MHAConfig, T: int, S: int, causal: bool) -> None:
    for line in formulas(cfg, T, S, causal=causal):
        st.latex(line)


def overview_view(attentions: np.ndarray, trace: AttentionTrace, layer: int, name: str) -> None:
    """Layers x heads thumbnails; picking a head opens it below, at full size, for the current layer."""
    L, H = attentions.shape[:2]
    st.caption(
        f"All {L} layers × {H} heads at a glance (the model's own attention weights; long inputs are "
        "max-pooled in the thumbnails). Move the layer slider and pick heads to open them."
    )
    _clamp_head_selection(H)
    chosen = st.multiselect(
        "Open heads of the current layer", list(range(H)), key="compare", format_func=lambda h: f"head {h}",
        placeholder="Pick heads to open…",
    )
    chart(overview_figure(attentions, selected=(layer, chosen[0]) if chosen else None), "overview", f"{name}-overview")
    if chosen:
        chart(heads_figure(trace, chosen, cols=min(len(chosen), 3), cell_px=28, title=f"layer {layer}"), "opened_heads", f"{name}-layer{layer}")
