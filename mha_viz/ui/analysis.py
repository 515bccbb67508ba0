"""The analysis view: which heads do what, and which heads matter (mha_viz.analysis, drawn)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from ..analysis import (
    attention_rollout,
    compare_traces,
    concat_vs_sum,
    knockout_effect,
    knockout_ranking,
    model_knockout,
    model_knockout_ranking,
    next_token_knockout,
    norm_attention,
    redundancy,
    trace_head_stats,
)
from ..figures import contributions_figure, heads_figure
from ..figures.analysis import (
    comparison_figure,
    concat_sum_figure,
    divergence_figure,
    head_stats_figure,
    knockout_figure,
    next_token_figure,
    ranking_figure,
    rollout_figure,
)
from ..pretrained.errors import ModelLoadError
from ..trace import AttentionTrace
from .text import plain
from .views import chart

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel

SECTIONS = ("Head statistics", "Redundancy", "Contribution", "Knockout", "Rollout", "Compare", "Concat vs sum")
NEEDS_FULL_TRACE = ("Contribution", "Knockout", "Concat vs sum")
STAT_HELP = {
    "entropy": "Entropy of each row / log(number of keys the row may see): 1 = uniform, 0 = one key. "
    "Rows that see a single key (the first row under a causal mask) are skipped.",
    "confidence": "Mean of each row's largest weight.",
    "first": "Mean weight on the first token.",
    "special": "Mean total weight on special tokens.",
    "previous": "Mean weight on the previous token (rows that have one).",
    "same": "Mean weight on the token itself.",
    "next": "Mean weight on the next token (rows that have one).",
    "distance": "Mean attended distance Σ_j w_ij |i − j|, in tokens.",
}


def analysis_view(
    trace: AttentionTrace,
    *,
    name: str = "analysis",
    model: PretrainedModel | None = None,
    text: str | None = None,
    part: str | None = None,
    layer: int | None = None,
    decoder_text: str | None = None,
    special: Collection[str | int] | None = None,
    retrace: Callable[[str], AttentionTrace] | None = None,
    attentions: np.ndarray | None = None,
    other_model: Callable[[str], PretrainedModel] | None = None,
) -> None:
    """Head statistics, redundancy, contribution, knockout, rollout, comparison and concat vs sum of one layer.

    trace: the layer (keep special tokens in it: knockout and rollout line up with the model's positions).
    model, text, part, layer, decoder_text: the pretrained model and input the trace came from; they add
    knockout through the whole model, rollout and comparison with another sentence or layer.
    special: tokens (strings) or positions counted as special (default: the model tokenizer's).
    retrace: another sentence -> the trace of this same layer (e.g. the configurable model's cached trace).
    attentions [L, H, T, T]: all layers of a multi-layer model, for rollout (default: model.attentions(text)).
    other_model: a model id or folder ("" the bundled model) -> that model loaded (or ValueError /
    ModelLoadError saying why; the app's cached loader, with the demo's allow-list); adds comparison
    with another model on the same sentence.
    """
    if st.session_state.get("analysis_section") not in SECTIONS:
        st.session_state["analysis_section"] = SECTIONS[0]
    section = st.segmented_control("Analysis", SECTIONS, key="analysis_section", required=True,
                                   label_visibility="collapsed")
    whole = model if model is not None and text is not None and layer is not None else None
    part = part or (model.parts[0] if model is not None else None)
    if special is None:
        special = model.tokenizer.all_special_tokens if model is not None else ()
    if section in NEEDS_FULL_TRACE and trace.missing:
        reason = trace.meta.get("unavailable", "the trace holds only attention weights")
        st.info(f"{section} needs the values, head outputs and W_O of this layer: {reason}")
    elif section == "Head statistics":
        _head_statistics(trace, special, name)
    elif section == "Redundancy":
        _redundancy(trace, name)
    elif section == "Contribution":
        _contribution(trace, name)
    elif section == "Knockout":
        _knockout(trace, name, whole, text, part, layer, decoder_text)
    elif section == "Rollout":
        _rollout(trace, name, model, text, part, decoder_text, attentions)
    elif section == "Compare":
        _compare(trace, name, whole, text, part, layer, decoder_text, retrace, other_model)
    else:
        _concat_vs_sum(trace, name)


def _head_statistics(trace: AttentionTrace, special: Collection[str | int], name: str) -> None:
    stats = trace_head_stats(trace, special)
    st.caption(
        "One row per head; click a column header to sort, a row to open that head. Shares are mean weights "
        "over the query rows." + (" Cross-attention: previous/same/next/distance compare positions of two "
                                  "different sentences and are left empty." if trace.cross else "")
    )
    left, right = st.columns([3, 2])
    with left:
        config = {column: st.column_config.NumberColumn(column, help=text, format="%.3f")
                  for column, text in STAT_HELP.items()}
        event = st.dataframe(stats.columns(), key="analysis_stats", on_select="rerun",
                             selection_mode="single-row-required", hide_index=True, column_config=config)
    rows = event.selection.rows
    head = min(rows[0], trace.num_heads - 1) if rows else 0
    with right:
        chart(heads_figure(trace, [head], cols=1, cell_px=22, title=f"head {head}"), "analysis_stats_head",
               f"{name}-head{head}")
    chart(head_stats_figure(stats), "analysis_stats_chart", f"{name}-head-stats")


def _redundancy(trace: AttentionTrace, name: str) -> None:
    st.caption(
        "Jensen-Shannon divergence between two heads' attention rows, averaged over the query tokens: "
        "0 bits = they attend identically, 1 bit = to disjoint tokens. Similar heads are clustered together."
    )
    threshold = st.slider("Near-duplicate below (mean JSD, bits)", 0.0, 0.5, 0.05, 0.01, key="analysis_threshold")
    result = redundancy(trace.weights, threshold)
    chart(divergence_figure(result), "analysis_divergence", f"{name}-redundancy")
    if result.duplicates:
        pairs = ", ".join(f"head {a} ≈ head {b} ({result.divergence[a, b]:.3f})" for a, b in result.duplicates)
        st.warning(f"Near-duplicates on this input: {pairs}.")
    else:
        st.caption(f"No two heads are closer than {threshold:g} bits on this input.")


def _contribution(trace: AttentionTrace, name: str) -> None:
    norm = st.toggle("Norm-based attention ‖w_ij · f_h(x_j)‖ instead of raw weights", key="analysis_norm",
                     help="Kobayashi et al. 2020: f_h(x_j) = v_j W_O^(h)ᵀ is what key j would add through head "
                     "h's block of W_O; a large weight on a short vector moves the output little.")
    if norm:
        st.caption("Each cell: weight × length of the key's value vector after W_O, ‖w_ij · v_j W_O^(h)ᵀ‖.")
        chart(heads_figure(trace, matrices=norm_attention(trace), value_name="‖w·f(x)‖"), "analysis_norm_heads",
               f"{name}-norm-attention")
    else:
        st.caption("Raw softmax weights; switch on the norm-based view to weigh them by what they carry.")
        chart(heads_figure(trace), "analysis_weight_heads", f"{name}-heads")
    chart(contributions_figure(trace), "analysis_contributions", f"{name}-contributions")


def _knockout(
    trace: AttentionTrace,
    name: str,
    model: PretrainedModel | None,
    text: str | None,
    part: str | None,
    layer: int | None,
    decoder_text: str | None,
) -> None:
    H = trace.num_heads
    st.session_state["analysis_off"] = [h for h in st.session_state.get("analysis_off", []) if h < H]
    off = st.multiselect("Switch heads off", list(range(H)), key="analysis_off", format_func=lambda h: f"head {h}",
                         placeholder="Pick heads to knock out…",
                         help="A head switched off has its block of the concat zeroed before W_O.")
    where = ("inside the real model (its concat block is zeroed before W_O, so later layers see the change)"
             if model is not None else "from the trace: output = sum of the kept heads' contributions + b_O")
    st.caption(f"Relative change ‖out − out_knocked‖ / ‖out‖, computed {where}.")
    per_token = {"this layer's output (after W_O)": (trace.query_tokens, knockout_effect(trace, off, axis=-1))}
    cols = st.columns(2)
    cols[0].metric("Change in this layer's output", f"{knockout_effect(trace, off):.1%}")
    if model is not None and off:
        result = model_knockout(model, text, layer, off, part=part, decoder_text=decoder_text)
        cols[1].metric("Change in the final hidden state", f"{result.effect:.1%}")
        per_token["final hidden state (end of the model)"] = (result.tokens, result.per_token)
    if off:
        chart(knockout_figure(per_token), "analysis_knockout", f"{name}-knockout")
    effects = {"this layer's output": knockout_ranking(trace)}
    if model is not None and st.toggle("Also rank by the final hidden state (one forward pass per head)",
                                       key="analysis_rank_final"):
        effects["final hidden state"] = model_knockout_ranking(model, text, layer, part=part, decoder_text=decoder_text)
    chart(ranking_figure(effects), "analysis_ranking", f"{name}-ranking")
    if model is None:
        return
    reason = model.next_token_unavailable
    if reason is not None:
        st.info(f"Next-token view unavailable: {reason}.")
    elif off:
        probs, knocked = next_token_knockout(model, text, layer, off)
        chart(next_token_figure(probs, knocked, model.tokenizer.convert_ids_to_tokens), "analysis_next_token",
               f"{name}-next-token")


def _rollout(
    trace: AttentionTrace,
    name: str,
    model: PretrainedModel | None,
    text: str | None,
    part: str | None,
    decoder_text: str | None,
    attentions: np.ndarray | None,
) -> None:
    if part == "cross" or trace.cross:
        st.info("Rollout chains self-attention maps layer after layer; cross-attention maps (decoder tokens × "
                "encoder tokens) do not chain. Pick the encoder or decoder self-attention.")
        return
    if attentions is None and model is not None and text is not None:
        attentions = model.attentions(text, part=part, decoder_text=decoder_text)  # (L, H, T, T)
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
        if st.session_state.get("analysis_rollout_layer", L) >= L:  # first time, or fewer layers than before
            st.session_state["analysis_rollout_layer"] = L - 1
        through = st.slider("Through layer", 0, L - 1, key="analysis_rollout_layer")
    chart(rollout_figure(rollout[through], tokens, f"rollout through layers 0 … {through}"), "analysis_rollout",
           f"{name}-rollout")


def _compare(
    trace: AttentionTrace,
    name: str,
    model: PretrainedModel | None,
    text: str | None,
    part: str | None,
    layer: int | None,
    decoder_text: str | None,
    retrace: Callable[[str], AttentionTrace] | None,
    other_model: Callable[[str], PretrainedModel] | None,
) -> None:
    options = [o for o, ok in (("Another sentence", retrace is not None or model is not None),
                               ("Another layer", model is not None and model.num_layers[part] > 1),
                               ("Another model", model is not None and other_model is not None)) if ok]
    if not options:
        st.info("Comparison needs a way to trace another input: pass retrace (or a pretrained model) to the view.")
        return
    how = st.radio("Compare with", options, key="analysis_compare_with", horizontal=True)
    if how == "Another sentence":
        other = st.text_input("Second sentence", key="analysis_other_text", placeholder="Type a second sentence…")
        if not other.strip():
            st.info("Type a second sentence to compare. A difference map needs the same token sequence; for "
                    "sentences of equal length (e.g. one word swapped) tick 'subtract position by position'.")
            return
        try:
            b = retrace(other) if retrace is not None else _trace_other_text(model, text, other, part, layer,
                                                                             decoder_text)
        except ValueError as err:
            st.warning(f"Could not trace the second sentence: {err}")
            return
        labels = ("this sentence", "second sentence")
    elif how == "Another layer":
        layers = [n for n in range(model.num_layers[part]) if n != layer]
        other_layer = st.selectbox("Other layer", layers, key="analysis_other_layer")
        b = model.trace(text, other_layer, part=part, decoder_text=decoder_text)
        labels = (f"layer {layer}", f"layer {other_layer}")
    else:
        compared = _trace_other_model(model, other_model, text, part, layer, decoder_text)
        if compared is None:
            return
        b, labels = compared
    by_position = how == "Another sentence" and st.checkbox(
        "Subtract position by position even where the tokens differ", key="analysis_by_position",
        help="Needs the same number of tokens; labels are the first sentence's.")
    result = compare_traces(trace, b, by_position=by_position)
    if result.reason is not None:
        st.info(result.reason)
    heads = [None, *range(trace.num_heads)] if trace.num_heads == b.num_heads else [None]
    head = st.selectbox("Head", heads, key="analysis_compare_head",
                        format_func=lambda h: "mean over heads" if h is None else f"head {h}")
    chart(comparison_figure(result, head, labels), "analysis_compare", f"{name}-compare")


def _trace_other_model(
    model: PretrainedModel,
    other_model: Callable[[str], PretrainedModel],
    text: str,
    part: str,
    layer: int,
    decoder_text: str | None,
) -> tuple[AttentionTrace, tuple[str, str]] | None:
    """The same sentence, part and layer (or the other model's last) in another model; None after a message."""
    name = st.text_input("Other model", key="analysis_other_model", max_chars=200,
                         placeholder="Hugging Face id or local folder; empty: the bundled model",
                         help="A difference map needs the same tokens and head count (e.g. two models that "
                              "share a tokenizer); otherwise the two are shown side by side.").strip()
    try:
        with st.spinner(f"Loading {name or 'the bundled model'}…"):
            other = other_model(name)
    except (ValueError, ModelLoadError) as err:
        st.warning(f"Could not load the other model: {plain(str(err))}")
        return None
    if part not in other.parts:
        st.info(f"{other.name} has no {part} attention (it has: {', '.join(other.parts)}).")
        return None
    other_layer = min(layer, other.num_layers[part] - 1)
    try:
        b = other.trace(text, other_layer, part=part, decoder_text=decoder_text if other.kind == "encoder-decoder" else None)
    except ValueError as err:
        st.warning(f"Could not trace the sentence in {other.name}: {plain(str(err))}")
        return None
    short = (model.name.split("/")[-1], other.name.split("/")[-1])
    return b, (f"{short[0]}, layer {layer}", f"{short[1]}, layer {other_layer}")


def _trace_other_text(
    model: PretrainedModel, text: str, other: str, part: str, layer: int, decoder_text: str | None
) -> AttentionTrace:
    """The same layer on another sentence: the decoder's text for decoder self-attention, else the input text."""
    if model.kind == "encoder-decoder" and part == "decoder":
        return model.trace(text, layer, part=part, decoder_text=other)
    return model.trace(other, layer, part=part, decoder_text=decoder_text)


def _concat_vs_sum(trace: AttentionTrace, name: str) -> None:
    result = concat_vs_sum(trace)
    H, T = trace.num_heads, len(trace.query_tokens)
    st.caption(
        f"Concatenating gives W_O {result.concat_dims} numbers per token ({H} heads × d_v = {trace.d_v}), each "
        f"head with its own block W_O^(h). Summing the heads would give it only {result.sum_dims}, and force every "
        "head through one shared W'. Below: how well a shared W' can reproduce this layer's real output − b_O."
    )
    cols = st.columns(3)
    cols[0].metric("concat · W_Oᵀ (the real path)", f"{result.concat_error:.1e}", help="float rounding only")
    cols[1].metric("sum · best shared W' (least squares)", f"{result.fitted_error:.1%}")
    cols[2].metric("sum · W' = mean of the W_O blocks", f"{result.mean_error:.1%}")
    if result.fits_any:
        st.warning(
            f"The {T} summed head-output vectors are linearly independent (T = {T} ≤ d_v = {trace.d_v} makes this "
            "likely), so a fitted W' reproduces any output on this input: its error of ~0 says nothing here. Use "
            f"more than {trace.d_v} tokens to see what summing loses; the mean-block W' does not depend on the input."
        )
    chart(concat_sum_figure(result, trace.query_tokens), "analysis_concat_sum", f"{name}-concat-vs-sum")
