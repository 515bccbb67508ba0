"""The main views; each takes an AttentionTrace, so every model kind shares them."""

from __future__ import annotations

import html
import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from ..analysis import score_terms
from ..analysis.kv_groups import KVGroup, kv_group
from ..config import MHAConfig
from ..cost import full_width_head, layer_cost
from ..figures import (
    contributions_figure,
    head_steps_figure,
    heads_figure,
    lines_figure,
    long_heads_figure,
    output_path_figure,
    overview_figure,
    projections_figure,
    score_terms_figure,
)
from ..figures.common import describe, figure_title, plural, token_label, under_toolbar, with_automargin
from ..figures.heads import MAX_CELLS_PER_SIDE, zoom_window
from ..figures.lines import MAX_LINE_TOKENS, picked_token
from ..figures.output_path import output_path_ranges
from ..figures.overview import picked_head
from ..figures.steps import score_parts_figure
from ..formulas import formulas, variant_formulas
from ..layer_payload import fitting_payload, overview_payload
from ..long import LongTrace
from ..trace import AttentionTrace
from ..variants import NAMES as VARIANT_NAMES
from ..variants import LayerVariant
from .heads_component import heads_component
from .state import current, fit, keep, kept, put, put_all, widget, write_url
from .state import value as field_value
from .style import column_width, is_narrow, page_width

# The chart toolbar keeps the PNG download and Streamlit's fullscreen: each of Plotly's other buttons (zoom, pan,
# autoscale...) was one more tab stop, 8 a chart, for what a drag (zoom) and a double click (reset) do anyway.
TOOLBAR_REMOVED = ["zoom2d", "pan2d", "select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d", "resetScale2d"]
PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": TOOLBAR_REMOVED,
               "toImageButtonOptions": {"format": "png", "scale": 2}}
APP_FONT = {"family": '"Source Sans", sans-serif', "color": "#31333F"}  # Streamlit's own text font and colour
SHOWN = "_figures_shown"  # session key: chart key -> (figure, file name) drawn in this run, for the report


def start_run() -> None:
    """Forget the figures of the previous run (call once at the top of the script)."""
    put(SHOWN, {})


def end_run() -> None:
    """Let go of this run's figures (call once at the end of the script): a session keeps no figure between runs
    (the report keeps its own copies in the shared cache, mha_viz/ui/export.py)."""
    put(SHOWN, {})


def figures_shown() -> list[tuple[go.Figure, str]]:
    """Every figure drawn in this run so far, with its file name, in page order."""
    return list(kept(SHOWN, {}).values())


def for_report(key: str, fig: go.Figure, filename: str) -> None:
    """Put fig in the report of this run's figures (a chart's, or what the renderer paints, drawn by Plotly for the
    report); a fragment's rerun replaces its own."""
    keep(SHOWN, dict)[key] = (fig, filename)


def chart(fig: go.Figure, key: str, filename: str, *, on_select: Callable[[], None] | None = None,
          report: Callable[[], go.Figure] | None = None) -> None:
    """Draw fig once in the browser, not twice; on_select: a callback for a click on a point; report: the figure the
    report shows instead of fig (default: fig).

    Streamlit mounts a new chart for every new figure (the element id hashes the spec), draws it,
    then passes a JSON copy of it to Plotly.react. Plotly redraws everything if the figure has a
    template (Streamlit's theme adds one) or no datarevision (arrays are compared by identity):
    0.1-0.3 s more of the browser's main thread per chart. Without a template, and with a fixed
    datarevision (data never changes under a mounted chart), that second pass only redraws the
    annotations (~60 ms for the 12-head grid's titles).
    The PNG download is the figure's own size (labels included), named after the view.
    """
    under_toolbar(fig, page_width())  # before the height is read: it may grow
    height = fig.layout.height
    image = {**PLOT_CONFIG["toImageButtonOptions"], "filename": filename,
             **({"height": height, "width": 1100} if height else {})}
    config = {**PLOT_CONFIG, "toImageButtonOptions": image}
    fig.layout.template = None
    fig.update_layout(datarevision=key, font=APP_FONT)
    with_automargin(fig)
    for_report(key, fig if report is None else report(), filename)
    with st.container(key=f"figure_{key}", gap=None):  # the chart and its text alternative, no gap between them
        if on_select is None:
            st.plotly_chart(fig, width="stretch", key=key, config=config, theme=None)
        else:
            st.plotly_chart(fig, width="stretch", key=key, config=config, theme=None, on_select=on_select,
                            selection_mode="points")
        text_alternative(fig, f"figure_{key}", filename)


SR_ONLY = "position:absolute;width:1px;height:1px;margin:-1px;padding:0;border:0;overflow:hidden;clip:rect(0,0,0,0)"
# The keyed container (Streamlit's documented st-key-<key> class) becomes a figure named after the chart; every SVG
# in it (Plotly draws the chart, its tick labels and its toolbar's icons in SVG) is hidden from screen readers, which
# read the figure's name and the text alternative instead. Its toolbar's buttons keep their own names.
FIGURE_ROLE_JS = """<script>(() => {{
    const box = document.querySelector('.st-key-' + CSS.escape({key}));
    if (!box) return;
    box.setAttribute('role', 'figure');
    box.setAttribute('aria-label', {name});
    const hide = () => box.querySelectorAll('svg:not([aria-hidden])').forEach(s => s.setAttribute('aria-hidden', 'true'));
    hide();
    if (box.a11yObserver) box.a11yObserver.disconnect();
    box.a11yObserver = new MutationObserver(hide);
    box.a11yObserver.observe(box, {{childList: true, subtree: true}});
}})();</script>"""


def _js_string(text: str) -> str:
    """text as a JavaScript string literal that is safe inside a <script> element (no "</script>" can end it)."""
    return json.dumps(text).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def text_alternative_html(fig: go.Figure, container_key: str, fallback_name: str) -> str:
    """The HTML of text_alternative: describe(fig) as visually hidden text, and the script that gives the keyed
    container its role and name."""
    key, name = _js_string(container_key), _js_string(figure_title(fig) or fallback_name)
    return f'<p style="{SR_ONLY}">{html.escape(describe(fig))}</p>' + FIGURE_ROLE_JS.format(key=key, name=name)


def text_alternative(fig: go.Figure, container_key: str, fallback_name: str) -> None:
    """Make the keyed container holding fig a figure for screen readers: role "figure", named after the figure's
    title, with describe(fig) (what it shows, its strongest cells) as visually hidden text inside it; the chart's SVG,
    a picture of that text and hundreds of tick labels, is hidden from them. Takes no room on the page."""
    st.html(text_alternative_html(fig, container_key, fallback_name), unsafe_allow_javascript=True)


def _layer_head_format(pair: tuple[int, int]) -> str:
    return f"layer {pair[0]}, head {pair[1]}"


def _open_picked(key: str, then: Callable[[], None] | None) -> None:
    layer, head = widget(key)
    put_all(layer=layer, head=head)
    if then is not None:
        then()


def open_head_picker(key: str, num_layers: int, num_heads: int, on_pick: Callable[[], None] | None = None) -> None:
    """The keyboard's way to do what a click on a cell of a layers × heads heatmap does: a select box of every
    (layer, head) that shows the open head and opens the one picked (session keys "layer" and "head", so the URL
    keeps it). on_pick: called after a pick (e.g. to rerun the whole app from a fragment)."""
    pairs = [(layer, head) for layer in range(num_layers) for head in range(num_heads)]
    shown = (field_value("layer"), field_value("head"))
    put(key, shown if shown in pairs else pairs[0])  # follows clicks on the heatmap
    st.selectbox("Open head", pairs, key=key, format_func=_layer_head_format, on_change=_open_picked,
                 args=(key, on_pick))


def labelled_value(container, label: str, value: str) -> None:
    """A label, then a value in bold: Markdown, whose code every page has loaded already. (st.metric's code is
    fetched when a page first shows one, and a grey placeholder stands in each metric's place until it comes.)"""
    container.markdown(f"{label}  \n**{value}**")


def heads_here(num_heads: int) -> str:
    """What a valid head number is on a layer of num_heads heads (for the notice about one it lacks)."""
    return f"this layer's heads are 0 to {num_heads - 1}"


def _clamp_head_selection(num_heads: int) -> None:
    """Drop head numbers a smaller h no longer has, before the widgets read them, and say so (state.fit)."""
    fit("compare", tuple(h for h in field_value("compare") if h < num_heads), heads_here(num_heads))
    if field_value("head") >= num_heads:
        fit("head", 0, heads_here(num_heads))


def _fit_start(name: str, top: int) -> None:
    """A window's first position past the last one that fills the window: the last one, said (state.fit)."""
    if field_value(name) > top:
        fit(name, top, f"a first position from 0 to {top} on this text")


def _head_format(h: int) -> str:
    return f"head {h}"


def signed_weights_caption(trace: AttentionTrace) -> str:
    """What a differential trace's colours mean: map1 - lambda * map2, signed, and this layer's lambda."""
    lambdas = np.unique(np.round(trace.lambdas, 3))
    said = f"λ = {lambdas[0]:.3f}" if len(lambdas) == 1 else "λ per head " + ", ".join(f"{x:.3f}" for x in trace.lambdas)
    return (f"colour = differential weight map₁ − λ·map₂ ({said} in this layer): two softmax maps subtracted, so a "
            "weight can be negative (red) and each row sums to 1 − λ. One colour scale for all heads, centred at 0.")


def mixing_caption(trace: AttentionTrace) -> str:
    """What a mixer layer's colours mean (a linear-attention or state-space layer, mha_viz.mixers)."""
    return (f"colour = the {trace.meta.get('mixer', trace.kind)} layer's exact mixing matrix, not a softmax: each "
            "head's output is this matrix times its values, so an entry can be negative (red) and a row does not sum "
            "to 1. One colour scale for all heads, centred at 0.")


def heads_view(trace: AttentionTrace, name: str, width: int | None = None, grid_drawn: bool = False) -> None:
    """Every head of the trace, painted by the one renderer (mha_viz/renderer.js; a Plotly chart when the weights are
    more than layer_payload.MAX_BYTES), then the heads picked to compare, larger. width: the px of the column it is
    drawn in (default: the page's). grid_drawn: the layer control above painted the grid already."""
    H, T, S = trace.weights.shape
    width = width or page_width()
    st.caption(
        f"{plural(H, 'head')} (numbered from 0), each a {T}×{S} {'attention' if trace.kind == 'softmax' else 'mixing'} "
        "matrix: row = query token, column = key token, "
        + (signed_weights_caption(trace) if trace.lambdas is not None else mixing_caption(trace)
           if trace.mixes else "colour = softmax weight (each row sums to 1). One colour scale for all heads.")
        + " Hover a cell for its tokens and weight."
        + (f" Grouped-query attention: {H} query heads read {len(set(trace.kv_heads))} key/value heads; each title "
           "names the K/V head a head reads, and heads that share one have the same frame (colour and dash)."
           if trace.kv_heads else "")
    )
    pooled = max(T, S) > MAX_CELLS_PER_SIDE
    if pooled:
        st.caption(
            f"{max(T, S)} tokens: each cell shows the largest weight in a block of positions. Pick heads "
            f"below to see a {MAX_CELLS_PER_SIDE}-token window at full resolution."
        )
    if not grid_drawn:
        payload = fitting_payload([trace])
        if payload is not None:
            with st.container(key="figure_heads"):  # as chart() keys a chart's box: a lesson's "Show me" finds it
                heads_component(payload, view="heads", key="heads")
        else:
            chart(heads_figure(trace, width=width), "heads", f"{name}-heads")
    _clamp_head_selection(H)
    chosen = st.multiselect(
        "Compare heads side by side (larger)", list(range(H)), key="compare", format_func=_head_format,
        placeholder="Pick heads to compare…",
    )
    if chosen:
        window = None
        if pooled:
            top = max(T, S) - MAX_CELLS_PER_SIDE
            _fit_start("zoom", top)
            put("zoom", field_value("zoom") // 8 * 8)  # the slider's step
            start = st.slider("Full-resolution window: first position", 0, top, step=8, key="zoom")
            window = (start, start + MAX_CELLS_PER_SIDE)
        fig = heads_figure(trace, chosen, cols=min(len(chosen), 3), cell_px=28, window=window, width=width)
        chart(fig, "compare_heads", f"{name}-compare")


def _zoom_at(block_rows: int, block_cols: int, row: int, col: int) -> None:
    """A cell clicked on the overview (its blocks of block_rows x block_cols positions) centres the zoom window on
    it (a start past the end is clamped by the sliders' own fit)."""
    half = MAX_CELLS_PER_SIDE // 2
    put_all(zoom=max(0, row * block_rows + block_rows // 2 - half),
            zoom_k=max(0, col * block_cols + block_cols // 2 - half))


def long_heads_view(trace: LongTrace, name: str, reload: Callable[[], LongTrace]) -> None:
    """Every head of a long input: a max-pooled overview, and a full-resolution zoom where the user points.

    reload: returns the same LongTrace from the shared cache (computing it on a miss); the view, a fragment that
    Streamlit keeps for the session's life, holds this function, not the trace."""
    _long_view(WhileHeld(weakref.ref(trace), reload), name)


@dataclass(frozen=True)
class WhileHeld:
    """The object while something else holds it (this run's page), else reload()'s (a fragment's later reruns): a
    fragment argument that neither keeps a trace or run alive nor computes it twice in one run."""

    ref: weakref.ref
    reload: Callable[[], object]

    def __call__(self):
        held = self.ref()
        return held if held is not None else self.reload()


ZOOM_HEADS = 4  # heads the zoom shows unless others are picked (each is 128 x 128 cells to send and draw)


@st.fragment
def _long_view(reload: Callable[[], LongTrace], name: str) -> None:
    """The overview and the zoom of a long input. A fragment: moving the zoom (its sliders, or a click on the
    overview, whose red squares the renderer moves at once) reruns this part only: the overview's payload is sent
    again with its squares on the new zoom (the renderer repaints it from its lookup table), and the zoom.
    Streamlit keeps a fragment's arguments for the session's life: reload reads the trace from the shared cache."""
    trace = reload()
    H, T, S = trace.shape
    top_q, top_k = max(0, T - MAX_CELLS_PER_SIDE), max(0, S - MAX_CELLS_PER_SIDE)
    _fit_start("zoom", top_q)  # a link's start past the end
    _fit_start("zoom_k", top_k)
    _clamp_head_selection(H)
    mixes = trace.kind != "softmax"  # a linear or state-space layer: its exact mixing matrix, signed
    largest = "the signed value of the largest |M|" if mixes else "the largest weight"
    st.caption(
        f"{plural(H, 'head')} (numbered from 0) of {T} query × {S} key tokens. Overview: each cell is {largest} in a "
        f"block of {trace.block_rows}×{trace.block_cols} positions, so a sharp peak stays visible. The red square is "
        f"the zoom below: click any head where to move it, or use the sliders."
    )
    rows, keys = zoom_window(trace, field_value("zoom"), field_value("zoom_k"))
    with st.container(key="figure_heads_long"):
        heads_component(overview_payload(trace), view="heads", key="heads_long",
                        mark=(rows.start / trace.block_rows, keys.start / trace.block_cols,
                              rows.stop / trace.block_rows, keys.stop / trace.block_cols),
                        on_zoom=partial(_zoom_at, trace.block_rows, trace.block_cols))
    for_report("heads_long", long_heads_figure(trace, mark=(rows.start, keys.start), width=page_width()),
               f"{name}-overview")
    a, b, c = st.columns([2, 1, 1]) if not is_narrow() else (st.container(), st.container(), st.container())
    chosen = a.multiselect(f"Heads in the zoom (the first {ZOOM_HEADS} when none is picked)", list(range(H)),
                           key="compare", format_func=_head_format, placeholder=f"Heads 0–{min(H, ZOOM_HEADS) - 1}")
    q0 = b.slider("Zoom: first query", 0, top_q, key="zoom", disabled=top_q == 0)
    k0 = c.slider("Zoom: first key", 0, top_k, key="zoom_k", disabled=top_k == 0)
    what = ("the exact mixing matrix M, computed now from the layer's queries, keys and decays (signed, on a scale "
            "centred at 0; its rows are not normalised)" if mixes else
            "the exact softmax weights (each row normalised over all keys, so a row here sums to at most 1)")
    st.caption(f"Zoom: queries {rows.start}–{rows.stop - 1} × keys {keys.start}–{keys.stop - 1}, one token pair a "
               f"cell; {what}.")
    heads = chosen or list(range(min(H, ZOOM_HEADS)))
    chart(long_heads_figure(trace, heads, zoom=(q0, k0), cols=min(len(heads), 4), width=page_width()),
          "heads_zoom", f"{name}-zoom")
    write_url(current())  # a fragment rerun skips the app's own URL update


def _pick() -> tuple[str, int] | None:
    raw = field_value("pick")
    return None if not raw else ("query" if raw[0] == "q" else "key", int(raw[1:]))


def _on_line_click() -> None:
    """A click on a token of the lines view picks it (a second click on it, or a double click, shows all)."""
    event = widget("lines")
    picked = picked_token(event.selection.points) if event is not None else None
    code = "" if picked is None else f"{picked[0][0]}{picked[1]}"
    put("pick", "" if code == field_value("pick") else code)


def _show_all_lines() -> None:
    put("pick", "")


def lines_view(trace: AttentionTrace, name: str) -> None:
    """BertViz's head view: a line from each query token to each key token, opacity = weight, colour = head."""
    H, T, S = trace.weights.shape
    _clamp_head_selection(H)
    pick = _pick()
    if pick is not None and pick[1] >= (T if pick[0] == "query" else S):
        put("pick", "")
        pick = None
    narrow = is_narrow()
    left, right = st.columns([3, 1]) if not narrow else (st.container(), st.container())
    with right:
        every = st.toggle("All heads overlaid", key="lines_all", help="Off: one head at a time.")
        heads = list(range(H)) if every else [st.selectbox("Head", list(range(H)), key="head", format_func=_head_format)]
        start = 0
        if max(T, S) > MAX_LINE_TOKENS:
            top = max(T, S) - MAX_LINE_TOKENS
            _fit_start("zoom", top)
            put("zoom", field_value("zoom") // 8 * 8)  # the slider's step
            start = st.slider("First position shown", 0, top, step=8, key="zoom")
        if pick is not None:
            side, pos = pick
            tokens = trace.query_tokens if side == "query" else trace.key_tokens
            st.markdown(f"Showing only the lines {'from' if side == 'query' else 'into'} {side} {pos}: "
                        f"**{token_label(tokens[pos], 24)}**")
            st.button("Show all lines", key="lines_show_all", on_click=_show_all_lines)
        st.caption("Click a token to see only its lines, click it again to see all; click a head in the legend to "
                   "hide it. Hover a query token for the keys each head attends to most.")
    with left:
        st.caption(f"Queries on the left, keys on the right; a line's opacity is the weight (lines under 0.02 are "
                   f"not drawn), its colour the head. {plural(H, 'head')} of {T} queries × {S} keys.")
        if max(T, S) > MAX_LINE_TOKENS:
            st.info(f"The lines view stays readable up to {MAX_LINE_TOKENS} tokens a side; this input has "
                    f"{max(T, S)}, so it shows positions {start} to {min(max(T, S), start + MAX_LINE_TOKENS) - 1}. "
                    "Move the window on the right, or use the Heads view for the whole matrix.")
        fig = lines_figure(trace, heads, pick=pick, start=start, width=page_width() if narrow else column_width(0.75))
        chart(fig, "lines", f"{name}-lines", on_select=_on_line_click)


def _position_format(tokens: tuple[str, ...]) -> Callable[[int], str]:
    return lambda i: f"{i}: {token_label(tokens[i], 24)}"


def head_view(trace: AttentionTrace, name: str) -> None:
    _clamp_head_selection(trace.num_heads)
    head = st.selectbox("Head", list(range(trace.num_heads)), key="head", format_func=_head_format)
    st.caption(
        "Q and K meet in the scores Q·Kᵀ (scaled, here by "
        f"{trace.score_scale:.4g}); the softmax turns each row into weights; the weights mix the rows of V into "
        + ("the head's output." if not trace.meta.get("head_norm") else
           f"weights · V, and a norm on each head makes the head's output: {trace.meta['head_norm']}.")
        + (" Special tokens are hidden: each weights row is renormalised over the tokens shown; the head "
           "output is the model's own, computed with every token." if trace.meta.get("hidden_tokens") else "")
    )
    if trace.kv_heads is not None:
        st.caption(kv_group_text(kv_group(trace, head)))
    if "kv_latent" in trace.meta:
        st.caption(f"Multi-head latent attention: there is no W_K or W_V; K and V below are rebuilt from the cached "
                   f"latent (K = [k_rope | c_KV W_UK], V = c_KV W_UV), and the first {trace.meta.get('rope_dim', 0)} "
                   "dims of Q and K are the rotary ones. The Latent (MLA) view shows how.")
    chart(head_steps_figure(trace, head, compact=is_narrow()), "head_steps", f"{name}-head{head}-steps")
    _why_one_score(trace, head, name)
    if trace.W_Q is not None:
        st.subheader(f"The projections of head {head}")
        st.caption("W_Q, W_K and W_V themselves: Q = X·W_Q (+ b_Q), and likewise K and V. Row i of each matrix is "
                   "what input dimension i adds to every query, key or value dimension of this head.")
        chart(projections_figure(trace, head), "projections", f"{name}-head{head}-W_QKV")


def kv_group_text(group: KVGroup) -> str:
    """What One head says of a grouped-query head: the K/V head it reads, the query heads sharing it, and the
    measured difference between their K and V (0: the same arrays)."""
    head, others = group.head, ", ".join(map(str, group.sharing))
    text = (f"Grouped-query attention: head {head} reads key/value head {group.kv_head}, so its K and V below are the "
            "same as those of " + (f"heads {others}" if group.sharing else "no other head")
            + "; its Q, scores and weights are its own.")
    if group.sharing:
        text += (f" Group of K/V head {group.kv_head}: heads {', '.join(map(str, sorted((head, *group.sharing))))}. "
                 f"Measured over heads {others}: max |K_{head} − K_h| = {group.max_key_difference:.3g} and max "
                 f"|V_{head} − V_h| = {group.max_value_difference:.3g}.")
    return text


def _why_one_score(trace: AttentionTrace, head: int, name: str) -> None:
    """BertViz's neuron view: the element-wise q ⊙ k of one query and one key, which sums to their score."""
    T, S = trace.weights.shape[1:]
    for field, n in (("q_pos", T), ("k_pos", S)):
        if field_value(field) >= n:
            fit(field, 0, f"a position from 0 to {n - 1}: this text has {n} tokens")
    st.subheader("Why one score")
    a, b = st.columns(2)
    query = a.selectbox("Query token", list(range(T)), key="q_pos", format_func=_position_format(trace.query_tokens))
    key = b.selectbox("Key token", list(range(S)), key="k_pos", format_func=_position_format(trace.key_tokens))
    t = score_terms(trace, head, query, key)
    q_tok, k_tok = token_label(trace.query_tokens[query], 24), token_label(trace.key_tokens[key], 24)
    steps = [f"q·k = Σ_d q_d k_d = **{t.dot:.4g}**", f"× {t.scale:.4g} = {t.scale * t.dot:.4g}"]
    steps += [f"{value:+.4g} ({term})" for term, value in t.terms.items()]
    if t.softcap is not None:
        steps.append(f"soft-capped: {t.softcap:g}·tanh({t.logit:.4g} / {t.softcap:g}) = {t.capped:.4g}")
    known = t.capped - t.scale * t.dot  # what the named terms and soft-capping explain of `other`
    if np.isinf(t.other):
        steps.append("masked: the model hides this key from this query (causal mask or window), score −∞")
    elif abs(t.other - known) > 1e-4 * max(1.0, abs(t.score)):
        steps.append(f"{t.other - known:+.4g} (position bias or mask the model adds)")
    steps.append(f"score **{t.score:.4g}**; after the softmax over the row: weight **{t.weight:.3f}**")
    st.markdown(f"Head {head}, query {query} (**{q_tok}**) and key {key} (**{k_tok}**): " + " → ".join(steps))
    if trace.score_bias or trace.softcap is not None:
        st.caption("Every key's score for this query, part by part: the content term scale · q·k (what Q and K "
                   "alone give) and what the model adds to it (" + (", ".join(trace.score_bias) or "soft-capping")
                   + "); the diamonds are the scores.")
        chart(score_parts_figure(trace, head, query), "score_parts", f"{name}-head{head}-q{query}-parts")
    chart(score_terms_figure(trace, head, query, key), "score_terms", f"{name}-head{head}-q{query}-k{key}")


def output_path_view(trace: AttentionTrace, name: str) -> None:
    st.caption(
        "The heads' outputs are laid side by side (concat, before W_O); W_O mixes them into the output. "
        "Because concat · W_Oᵀ splits into one product per head block, the output is the sum of each "
        "head's contribution head_h · W_O^(h)ᵀ plus the bias."
    )
    if trace.kv_heads is not None:
        st.caption(concat_text(trace))
    chart(output_path_figure(trace, width=page_width()), "output_path", f"{name}-concat-wo")
    clipped = " ".join(filter(None, (r.sentence(what) for r, what in zip(output_path_ranges(trace),
                                                                         ("Concat and output", "W_O")))))
    if clipped:
        st.caption(clipped)
    checks = trace.check_wo_path()
    tolerance = trace.rounding_tolerance()
    dtype = trace.output.dtype
    cols = st.columns(len(checks))
    for col, (label, err) in zip(cols, checks.items()):
        equal = err <= tolerance
        labelled_value(col, label, "equal ✓" if equal else f"differs: {err:.1e}")
        col.caption(f"max |difference| {err:.1e} ≤ {tolerance:.1e}: equal within {dtype} rounding" if equal
                    else f"max |difference| {err:.1e} > {tolerance:.1e}, more than {dtype} rounding explains")
    chart(contributions_figure(trace, width=page_width()), "contributions", f"{name}-contributions")


def concat_text(trace: AttentionTrace) -> str:
    """What Concat → W_O says of a grouped-query trace: the step is unchanged, one d_v block per query head."""
    H, G, d_v = trace.num_heads, len(set(trace.kv_heads or ())), trace.d_v
    return (f"Grouped-query attention leaves this step unchanged: sharing keys and values among query heads changes "
            f"where K and V come from, not the heads' outputs. There are still {H} head outputs of width {d_v}, and "
            f"the concat still has one d_v block per query head: h·d_v = {H}·{d_v} = {H * d_v} wide, not "
            f"kv_heads·d_v = {G * d_v}. W_O is unchanged: d_out × h·d_v = {trace.output.shape[-1]} × {H * d_v}, the same as under MHA.")


def cost_view(cfg: MHAConfig, T: int, S: int, cross: bool = False) -> None:
    ours, wide = layer_cost(cfg, T, S, cross=cross), layer_cost(full_width_head(cfg), T, S, cross=cross)
    H, G = cfg.num_heads, cfg.kv_heads
    c = "C" if cross else "X"
    shapes = {
        "X (queries in)" + (", C (keys and values in)" if cross else ""): f"{T} × {cfg.d_model}"
        + (f", {S} × {cfg.d_context}" if cross else ""),
        "W_Q, W_K, W_V": f"{H} × ({cfg.d_model} × {cfg.d_k}), {G} × ({cfg.d_context} × {cfg.d_k}), {G} × ({cfg.d_context} × {cfg.d_v})",
        f"Q_h = X W_Q[h], K_h = {c} W_K[h], V_h = {c} W_V[h]": f"{T} × {cfg.d_k}, {S} × {cfg.d_k}, {S} × {cfg.d_v}",
        "scores, weights (per head)": f"{T} × {S}",
        "head_h": f"{T} × {cfg.d_v}",
        "concat": f"{T} × {cfg.concat_width}",
        "W_O": f"{cfg.d_out} × {cfg.concat_width}",
        "output": f"{T} × {cfg.d_out}",
    }
    st.table({"tensor": list(shapes), "shape": list(shapes.values())})
    if G < H:
        st.caption(f"Grouped-query attention: W_K and W_V have kv_heads = {G} heads, not {H}; K_g and V_g are computed "
                   f"once per key/value head g and read by {H // G} query heads each (query head h reads g = h // "
                   f"{H // G}). A KV cache holds {G * (cfg.d_k + cfg.d_v)} numbers per token instead of "
                   f"{H * (cfg.d_k + cfg.d_v)}.")
    rows = ["weights", "biases", "parameters", "FLOPs"]
    st.table(
        {
            "count": rows,
            f"{plural(H, 'head')} (d_k={cfg.d_k})": [f"{ours.weight_count:,}", f"{ours.bias_count:,}", f"{ours.params:,}", f"{ours.total_flops:,}"],
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


def formulas_view(cfg: MHAConfig, T: int, S: int, causal: bool, cross: bool = False,
                  variant: LayerVariant | None = None) -> None:
    """The layer's formulas with live sizes; an attention variant's own lines first, then MHA's for comparison."""
    st.caption("Heads are numbered from 0, as everywhere in mha-viz. X holds the query tokens"
               + (", C the key and value tokens (cross-attention)." if cross else "; in self-attention X also gives "
                  "the keys and values."))
    if is_narrow():
        st.caption("Wide formulas scroll sideways.")
    changed = [] if variant is None else variant_formulas(variant.kind, cfg, T, S, causal=causal, **variant.params())
    if changed:
        st.subheader(f"{VARIANT_NAMES[variant.kind]}: what the variant computes")
        for line in changed:
            st.latex(line)
        st.subheader("Multi-head attention, for comparison")
    for line in formulas(cfg, T, S, causal=causal, cross=cross):
        st.latex(line)


def _on_thumbnail_click() -> None:
    """A click on an overview thumbnail opens that head: its layer becomes the current one."""
    event = widget("overview")
    picked = picked_head(event.selection.points) if event is not None else None
    if picked is not None:
        put_all(layer=picked[0], compare=(picked[1],))


def overview_view(attentions: np.ndarray, trace: AttentionTrace, layer: int, name: str,
                  windows: Sequence[int | None] | None = None, marks: Sequence[str] | None = None) -> None:
    """Layers x heads thumbnails; clicking one (or picking heads) opens it below, at full size. windows: each layer's
    sliding window (None: full attention); marks: each layer's kind in a hybrid model (mixers.layer_marks)."""
    L, H = attentions.shape[:2]
    kv = trace.kv_heads
    st.caption(
        f"All {L} layers × {H} heads at a glance (the model's own attention weights; long inputs are "
        "max-pooled in the thumbnails). Click a thumbnail to open that head below, or pick heads of the current layer."
        + (f" Grouped-query attention: {H} query heads share {len(set(kv))} key/value heads; KVg under a column says "
           "which K/V head it reads, and a line separates the groups." if kv else "")
        + (" A row labelled (window w) is a sliding-window layer: each token sees only the last w tokens."
           if windows and any(windows) else "")
        + (" " + signed_weights_caption(trace) if trace.lambdas is not None else "")
        + (" Rows marked lin (linear attention), ssm (a state space) or conv (a short convolution) show each head's "
           "exact mixing matrix (Mamba's and LFM2's: one per channel), which "
           "can be negative (red) and whose rows do not sum to 1; attn rows are softmax attention. Each row is scaled "
           "to its own largest |value|, since a mixing matrix's entries are much smaller than softmax weights."
           if marks else "")
    )
    if marks:
        tops = np.nanmax(np.abs(attentions), axis=(1, 2, 3), keepdims=True)  # (L, 1, 1, 1)
        attentions = attentions / np.where(tops > 0, tops, 1.0)
    _clamp_head_selection(H)
    chosen = st.multiselect(
        "Open heads of the current layer", list(range(H)), key="compare", format_func=_head_format,
        placeholder="Pick heads to open…",
    )
    chart(overview_figure(attentions, selected=(layer, chosen[0]) if chosen else None, kv_heads=kv, windows=windows,
                          marks=marks),
          "overview",
          f"{name}-overview", on_select=_on_thumbnail_click)
    if chosen:
        chart(heads_figure(trace, chosen, cols=min(len(chosen), 3), cell_px=28, title=f"layer {layer}",
                           width=page_width()), "opened_heads", f"{name}-layer{layer}")
