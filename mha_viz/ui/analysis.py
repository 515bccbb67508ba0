"""The analysis view: which heads do what, and which heads matter (mha_viz.analysis, drawn).

Every widget's key is a ViewState field (mha_viz.params), so a shared link reopens the same section
with the same heads switched off, the same comparison, and so on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from ..analysis import (
    ABLATIONS,
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
    repeated_tokens,
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
from ..figures.common import visible_token
from ..figures.generation import head_scores_figure, logit_attribution_figure
from ..figures.overview import picked_head
from ..limits import client_int
from ..params import DETECTORS
from ..parts import SECTIONS, bounds
from ..pretrained.errors import ModelLoadError
from ..serve.hosting import FULL_SIZE
from ..sources import ModelSource, TraceSource
from ..token_labels import token_labels, vocab_labels
from ..trace import AttentionTrace
from .fair import TimeSpent, check_time, heavy
from .parts.sections.compare import COMPARE_WITH
from .state import confine, fit, mark_typed, put, put_all, put_default, widget
from .state import value as field_value
from .style import column_width, is_narrow, page_width
from .text import plain
from .views import chart, heads_here, labelled_value, open_head_picker

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel

STAT_HELP = {
    "entropy": "Entropy of each row / log(number of keys the row may see): 1 = uniform, 0 = one key. "
    "Rows that see a single key (the first row under a causal mask) are skipped.",
    "confidence": "Mean of each row's largest weight.",
    "first": "Mean weight on the first token. Often large: an attention sink. Softmax must put a row's mass "
    "somewhere, so a head with nothing to read parks it on the first token (which every query can see); "
    "StreamingLLM keeps the first tokens in its cache for this reason.",
    "special": "Mean total weight on special tokens.",
    "previous": "Mean weight on the previous token (rows that have one).",
    "same": "Mean weight on the token itself.",
    "next": "Mean weight on the next token (rows that have one).",
    "distance": "Mean attended distance Σ_j w_ij |i − j|, in tokens.",
    "sink": "Mean sink mass 1 − Σ_j w_ij: the share of each row's softmax taken by the head's learned sink logit "
    "(gpt-oss), which joins the softmax and is then dropped, so the head can attend to nothing instead of the "
    "first token.",
}
ModelLoader = Callable[[str], "PretrainedModel"]


@dataclass(frozen=True)
class SectionContext:
    """What the analysis view hands the section it shows (the arguments of analysis_view)."""

    trace: AttentionTrace
    source: TraceSource
    layer: int
    name: str
    special: Collection[str | int]
    other_model: ModelLoader | None = None
    max_passes: int | None = None


def _head_format(h: int | None) -> str:
    return "mean over heads" if h is None else f"head {h}"


def analysis_view(
    trace: AttentionTrace,
    source: TraceSource,
    *,
    layer: int = 0,
    name: str = "analysis",
    special: Collection[str | int] | None = None,
    other_model: ModelLoader | None = None,
    max_passes: int | None = None,
) -> None:
    """Head statistics, redundancy, contribution, knockout, rollout, comparison and concat vs sum of one layer.

    trace: the layer as source.trace(layer) gives it (special tokens kept: knockout and rollout line up
    with the model's positions). source: where it came from; it traces other layers and texts, gives
    every layer's attentions for rollout, and its model (if any) runs knockout through the whole model.
    special: tokens (strings) or positions counted as special (default: the model tokenizer's).
    other_model: a model id or folder ("" the bundled model) -> that model loaded (ValueError /
    ModelLoadError saying why; the app's cached loader with the demo's allow-list); adds comparison
    with another model on the same sentence. max_passes: the most forward passes one knockout ranking
    may run (a public demo's budget; None: no limit).
    """
    menu = SECTIONS.menu(field_value("mode"), source)
    confine("section", menu)
    section = st.segmented_control("Analysis", menu, key="section", required=True, label_visibility="collapsed")
    part = SECTIONS.part(section)
    for f in part.fields:  # its widgets' keys hold their registered defaults (a page not seeded from a URL, too)
        put_default(f.name)
    model = source.model
    if special is None:
        special = model.tokenizer.all_special_tokens if model is not None else ()
    lacking = trace.lacks(*part.arrays)
    if lacking:
        reason = trace.meta.get("unavailable", "the trace holds only attention weights")
        st.info(f"{section} needs the {', '.join(lacking)} of this layer: {reason}")
        return
    try:
        part.renderer()(SectionContext(trace, source, layer, name, special, other_model, max_passes))
    except (np.linalg.LinAlgError, FloatingPointError, ValueError) as err:  # e.g. a model whose numbers are not finite
        st.warning(f"{section} could not be computed on this layer: {plain(str(err))}")


# The render functions the parts in mha_viz/ui/parts/sections/ point to (their PART declares them).

def head_statistics(c: SectionContext) -> None:
    _head_statistics(c.trace, c.special, c.name)


def redundancy_section(c: SectionContext) -> None:
    _redundancy(c.trace, c.name)


def contribution(c: SectionContext) -> None:
    _contribution(c.trace, c.name)


def knockout(c: SectionContext) -> None:
    _knockout(c.trace, c.name, c.source, c.layer, c.max_passes)


def rollout(c: SectionContext) -> None:
    _rollout(c.trace, c.name, c.source)


def compare(c: SectionContext) -> None:
    _compare(c.trace, c.name, c.source, c.layer, c.other_model)


def concat_sum(c: SectionContext) -> None:
    _concat_vs_sum(c.trace, c.name)


def logit_attribution(c: SectionContext) -> None:
    _logit_attribution(c.name, c.source)


def head_detectors(c: SectionContext) -> None:
    _head_detectors(c.name, c.source)


def _clamp_heads(num_heads: int) -> None:
    """Drop head numbers this layer lacks, and say so (state.fit)."""
    fit("off", tuple(h for h in field_value("off") if h < num_heads), heads_here(num_heads))
    if field_value("head") >= num_heads:
        fit("head", 0, heads_here(num_heads))
    if (field_value("compare_head") or 0) >= num_heads:
        fit("compare_head", None, heads_here(num_heads), "the mean over heads")


def _head_statistics(trace: AttentionTrace, special: Collection[str | int], name: str) -> None:
    stats = trace_head_stats(trace, special)
    _clamp_heads(trace.num_heads)
    st.caption(
        "One row per head; click a column header to sort, a row to open that head. Shares are mean weights "
        "over the query rows." + (" This model learns a sink logit per head: the sink column is the share of "
                                  "each row it takes (rows of weights sum to 1 − sink)." if trace.sinks is not None
                                  else "") + (" Cross-attention: previous/same/next/distance compare positions of two "
                                  "different sentences and are left empty." if trace.cross else "")
    )
    config = {column: st.column_config.NumberColumn(column, help=text, format="%.3f")
              for column, text in STAT_HELP.items()}
    config["head"] = st.column_config.NumberColumn("head", width=48)  # room for the others at 1024 px
    # The table across the page: beside a chart its last columns would be cut off.
    event = st.dataframe(stats.columns(), key="analysis_stats", on_select="rerun", selection_mode="single-row",
                         hide_index=True, column_config=config, width="stretch")
    rows = event.selection.rows
    picked = client_int(rows[0], 0, trace.num_heads - 1) if isinstance(rows, list) and rows else None
    if picked is not None:  # a picked row opens its head (and a shared link remembers it as `head`)
        put("head", picked)
    head = field_value("head")
    narrow = is_narrow()
    left, right = (st.container(), st.container()) if narrow else st.columns([2, 3])
    with left:
        chart(heads_figure(trace, [head], cols=1, cell_px=22, title=f"head {head}",
                           width=page_width() if narrow else column_width(0.4)), "analysis_stats_head", f"{name}-head{head}")
    with right:
        chart(head_stats_figure(stats, width=page_width() if narrow else column_width(0.6)), "analysis_stats_chart",
              f"{name}-head-stats")


def _redundancy(trace: AttentionTrace, name: str) -> None:
    st.caption(
        "Jensen-Shannon divergence between two heads' attention rows, averaged over the query tokens: "
        "0 bits = they attend identically, 1 bit = to disjoint tokens. Similar heads are clustered together."
    )
    threshold = st.slider("Near-duplicate below (mean JSD, bits)", *bounds("threshold"), step=0.01, key="threshold")
    result = redundancy(trace.weights, threshold)
    chart(divergence_figure(result), "analysis_divergence", f"{name}-redundancy")
    if result.duplicates:
        pairs = ", ".join(f"head {a} ≈ head {b} ({result.divergence[a, b]:.3f})" for a, b in result.duplicates)
        st.warning(f"Near-duplicates on this input: {pairs}.")
    else:
        st.caption(f"No two heads are closer than {threshold:g} bits on this input.")


def _contribution(trace: AttentionTrace, name: str) -> None:
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
        st.caption("Raw softmax weights; switch on the norm-based view to weigh them by what they carry.")
        chart(heads_figure(trace), "analysis_weight_heads", f"{name}-heads")
    chart(contributions_figure(trace, width=page_width()), "analysis_contributions", f"{name}-contributions")


def _knockout(trace: AttentionTrace, name: str, source: TraceSource, layer: int, max_passes: int | None) -> None:
    H = trace.num_heads
    _clamp_heads(H)
    off = st.multiselect("Switch heads off", list(range(H)), key="off", format_func=_head_format,
                         placeholder="Pick heads to knock out…",
                         help="A head switched off has its block of the concat zeroed before W_O.")
    whole = source if source.model is not None else None  # a whole model behind the layer
    ablation, reference = _ablation_choice(whole)
    where = ("inside the real model (its concat block is zeroed before W_O, so later layers see the change)"
             if whole is not None else "from the trace: output = sum of the kept heads' contributions + b_O")
    st.caption(f"Relative change ‖out − out_knocked‖ / ‖out‖, computed {where}.")
    per_token = {"this layer's output (after W_O)": (trace.query_tokens, knockout_effect(trace, off, axis=-1))}
    cols = st.columns(2)
    labelled_value(cols[0], "Change in this layer's output", f"{knockout_effect(trace, off):.1%}")
    try:
        _model_knockout(whole, name, layer, H, off, ablation, reference, max_passes, cols[1], per_token,
                        knockout_ranking(trace))
    except ValueError as err:
        st.warning(f"Cannot {ablation}-ablate: {plain(str(err))}")


def _ablation_choice(whole: TraceSource | None) -> tuple[str, str | None]:
    """The ablation through the model (zero, mean or resample) and its reference text (None: the text itself)."""
    if whole is None:
        return "zero", None
    ablation = st.radio("Ablation", ABLATIONS, key="ablation", horizontal=True, format_func=ABLATION_LABELS.get,
                        help="Zero: the head's block of the concat set to 0. Mean: set to its mean over the positions "
                        "of a reference text (default: this text). Resample: set, position by position, to its block "
                        "on another text of the same token length.")
    if ablation == "zero":
        return ablation, None
    reference = st.text_input("Reference text" + (" (same token length)" if ablation == "resample" else ""),
                              key="ablation_text", max_chars=5000,
                              placeholder="this text" if ablation == "mean" else "another text of as many tokens…")
    return ablation, reference.strip() or None


ABLATION_LABELS = {"zero": "zero", "mean": "mean over a reference", "resample": "resample from another text"}


def _model_knockout(whole: TraceSource | None, name: str, layer: int, H: int, off: list[int], ablation: str,
                    reference: str | None, max_passes: int | None, column, per_token: dict,
                    layer_ranking: np.ndarray) -> None:
    """Knockout through the whole model with the chosen ablation, said in every label."""
    if whole is not None and ablation == "resample" and reference is None:
        st.info("Resample ablation takes each head's output from another text: type one of the same token length.")
        return
    if whole is not None and off:
        with heavy("Knockout through the model"):
            result = model_knockout(whole.model, whole.text, layer, off, part=whole.part,
                                    decoder_text=whole.decoder_text, ablation=ablation, reference=reference)
        labelled_value(column, "Change in the final hidden state", f"{result.effect:.1%}")
        per_token[f"final hidden state (end of the model, {result.ablation} ablation)"] = (result.tokens,
                                                                                          result.per_token)
        st.caption(f"Through the model: **{result.ablation} ablation** of head(s) {', '.join(map(str, off))}"
                   + ("" if result.ablation == "zero" else f", reference: {plain(reference or 'this text')!s}")
                   + ". This layer's own change is zero ablation, computed from the trace.")
    if off:
        chart(knockout_figure(per_token), "analysis_knockout", f"{name}-knockout")
    effects = {"this layer's output": layer_ranking}
    if whole is not None and st.toggle("Also rank by the final hidden state (one forward pass per head)",
                                       key="rank_final"):
        if max_passes is not None and H > max_passes:
            st.info(f"Ranking by the final hidden state runs the model once per head ({H} passes); this public demo "
                    f"runs at most {max_passes} at a time. To {FULL_SIZE}.")
        else:
            with heavy("Ranking every head through the model"):
                bar = st.progress(0.0, text="Switching off one head at a time…")
                try:
                    effects[f"final hidden state ({ablation} ablation)"] = model_knockout_ranking(
                        whole.model, whole.text, layer, part=whole.part, decoder_text=whole.decoder_text,
                        ablation=ablation, reference=reference,
                        on_pass=lambda done, total: check_time() or bar.progress(
                            done / total, text=f"Head {done} of {total} switched off"))
                except TimeSpent as err:
                    st.warning(f"Ranking by the final hidden state {err}", icon=":material/timer_off:")
                bar.empty()
    chart(ranking_figure(effects), "analysis_ranking", f"{name}-ranking")
    if whole is None:
        return
    reason = whole.model.next_token_unavailable
    if reason is not None:
        st.info(f"Next-token view unavailable: {reason}.")
    elif off:
        probs, knocked = next_token_knockout(whole.model, whole.text, layer, off, ablation=ablation,
                                             reference=reference)
        decode = functools.partial(vocab_labels, whole.model.tokenizer)
        chart(next_token_figure(probs, knocked, decode), "analysis_next_token",
              f"{name}-next-token")


def _rollout(trace: AttentionTrace, name: str, source: TraceSource) -> None:
    if trace.cross:
        st.info("Rollout chains self-attention maps layer after layer; cross-attention maps (decoder tokens × "
                "encoder tokens) do not chain. Pick the encoder or decoder self-attention.")
        return
    attentions = source.attentions()  # (L, H, T, T) or None
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
          f"{name}-rollout")


def _compare(trace: AttentionTrace, name: str, source: TraceSource, layer: int, other_model: ModelLoader | None) -> None:
    whole = source if source.model is not None else None  # a whole model behind the layer
    offered = {"Another sentence": True, "Another layer": source.num_layers > 1,
               "Another model": whole is not None and other_model is not None}
    options = [o for o in COMPARE_WITH if offered[o]]
    confine("compare_with", options)
    how = st.radio("Compare with", options, key="compare_with", horizontal=True)
    if how == "Another sentence":
        other = st.text_input("Second sentence", key="other_text", placeholder="Type a second sentence…",
                              max_chars=5000)
        if not other.strip():
            st.info("Type a second sentence to compare. A difference map needs the same token sequence; for "
                    "sentences of equal length (e.g. one word swapped) tick 'subtract position by position'.")
            return
        try:
            b = source.with_text(other).trace(layer)
        except ValueError as err:
            st.warning(f"Could not trace the second sentence: {plain(str(err))}")
            return
        labels = ("this sentence", "second sentence")
    elif how == "Another layer":
        layers = [n for n in range(source.num_layers) if n != layer]
        if field_value("other_layer") is None:
            put("other_layer", layers[0])
        elif field_value("other_layer") not in layers:
            fit("other_layer", layers[0], f"another of this model's layers, 0 to {source.num_layers - 1}")
        other_layer = st.selectbox("Other layer", layers, key="other_layer")
        b = source.trace(other_layer)
        labels = (f"layer {layer}", f"layer {other_layer}")
    else:
        compared = _trace_other_model(whole, other_model, layer)
        if compared is None:
            return
        b, labels = compared
    by_position = how == "Another sentence" and st.checkbox(
        "Subtract position by position even where the tokens differ", key="by_position",
        help="Needs the same number of tokens; labels are the first sentence's.")
    result = compare_traces(trace, b, by_position=by_position)
    if result.reason is not None:
        st.info(result.reason)
    heads = [None, *range(trace.num_heads)] if trace.num_heads == b.num_heads else [None]
    _clamp_heads(trace.num_heads)
    confine("compare_head", heads, None)
    head = st.selectbox("Head", heads, key="compare_head", format_func=_head_format)
    chart(comparison_figure(result, head, labels), "analysis_compare", f"{name}-compare")


def _trace_other_model(
    source: ModelSource, other_model: ModelLoader, layer: int
) -> tuple[AttentionTrace, tuple[str, str]] | None:
    """The same sentence, part and layer (or the other model's last) in another model; None after a message."""
    name = st.text_input("Other model", key="other_model", max_chars=200, on_change=mark_typed, args=("other_model",),
                         placeholder="Hugging Face id or local folder, e.g. bundled",
                         help="A difference map needs the same tokens and head count (e.g. two models that "
                              "share a tokenizer); otherwise the two are shown side by side. 'bundled' is the "
                              "bundled all-MiniLM-L6-v2.").strip()
    if not name:
        st.info("Type another model to compare this sentence with: a Hugging Face id (online) or a local folder; "
                "'bundled' is the bundled all-MiniLM-L6-v2.")
        return None
    try:
        with st.spinner(f"Loading {name}…"):
            other = other_model("" if name.lower() == "bundled" else name)
    except (ValueError, ModelLoadError) as err:
        st.warning(f"Could not load the other model: {plain(str(err))}")
        return None
    model = source.model
    if other is model:
        st.info(f"{plain(name)} is the model shown above; type another one to compare with.")
        return None
    part = source.part
    if part not in other.parts:
        st.info(f"{other.name} has no {part} attention (it has: {', '.join(other.parts)}).")
        return None
    other_layer = min(layer, other.num_layers[part] - 1)
    try:
        decoder_text = source.decoder_text if other.kind == "encoder-decoder" else None
        b = other.trace(source.text, other_layer, part=part, decoder_text=decoder_text)
    except ValueError as err:
        st.warning(f"Could not trace the sentence in {other.name}: {plain(str(err))}")
        return None
    short = (model.name.split("/")[-1], other.name.split("/")[-1])
    return b, (f"{short[0]}, layer {layer}", f"{short[1]}, layer {other_layer}")


SUM_LOSES = 0.05  # a shared W' that misses more than this share of the output: summing loses what concat keeps


def _concat_vs_sum(trace: AttentionTrace, name: str) -> None:
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
    chart(concat_sum_figure(result, trace.query_tokens), "analysis_concat_sum", f"{name}-concat-vs-sum")


def open_head(chart_key: str) -> None:
    """A click on a layers x heads cell opens that head: its layer in the layer control, the head below."""
    event = widget(chart_key)
    picked = picked_head(event.selection.points) if event is not None else None
    if picked is not None:
        put_all(layer=picked[0], head=picked[1])


def _show_head(source: ModelSource, layer: int, head: int, name: str, trace: AttentionTrace | None = None) -> None:
    """The head a click opened: its attention on the source's text (or on the given trace)."""
    trace = trace if trace is not None else source.trace(layer)
    if 0 <= head < trace.num_heads:
        chart(heads_figure(trace, [head], cols=1, cell_px=18, title=f"layer {layer}, head {head}", width=page_width()),
              "analysis_opened_head", f"{name}-L{layer}H{head}")


def _logit_attribution(name: str, source: TraceSource) -> None:
    """Direct logit attribution of the next token after a position: each head's share of its logit."""
    if not source.causal_lm:
        reason = source.model.next_token_unavailable if source.model is not None else (
            "this layer is not part of a language model")
        st.info(f"Logit attribution needs a causal language model: {reason}.")
        return
    tokens = source.model.tokens(source.text)
    T = len(tokens)
    if field_value("dla_position") is None:
        put("dla_position", T - 1)  # "last"
    elif field_value("dla_position") >= T:
        fit("dla_position", T - 1, f"a position from 0 to {T - 1}: this text has {T} tokens")
    a, b = st.columns(2)
    position = a.selectbox("After position", list(range(T)), key="dla_position",
                           format_func=lambda i: f"{i}: {visible_token(tokens[i])}",
                           help="The logits at this position predict the token after it.")
    target = b.text_input("Token whose logit to split", key="dla_token", max_chars=100,
                          placeholder="empty: the model's top prediction").strip()
    try:
        dla = source.logit_attribution(position=position, token=target or None)
    except ValueError as err:
        st.warning(f"Cannot split this logit: {plain(str(err))}")
        return
    chart(logit_attribution_figure(dla.heads, dla.terms, dla.token,
                                   title=f"After {tokens[position]!r} (position {position}): the logit of "
                                   f"{dla.token!r} (p = {dla.probability:.1%})", width=page_width()),
          "analysis_dla", f"{name}-logit-attribution", on_select=lambda: open_head("analysis_dla"))
    open_head_picker("_open_head_dla", *dla.heads.shape)
    error = abs(dla.total - dla.logit)
    st.caption(f"Every head and term adds up to **{dla.total:.4f}**; the model's own logit is **{dla.logit:.4f}** "
               f"(|difference| {error:.1e}{' ≤ 1e-3 ✓' if error <= 1e-3 else ' > 1e-3 ✗'}). The final {dla.norm} is "
               f"frozen at the scale it measured there ({dla.norm_scale:.4g}). Click a head (or pick it above) to open it.")
    layer, head = field_value("layer"), field_value("head")
    _show_head(source, layer, head, name)


def _head_detectors(name: str, source: TraceSource) -> None:
    """Previous-token, duplicate-token and induction scores of every head, on repeated random tokens."""
    if source.model is None or source.model.kind == "encoder-decoder":
        st.info("Head detectors run a model on repeated random tokens of its own vocabulary: they need a pretrained "
                "encoder or decoder-only model.")
        return
    try:
        scores = source.head_scores(seed=0)
    except ValueError as err:
        st.warning(f"Cannot run the head detectors: {plain(str(err))}")
        return
    if scores.sequences < scores.asked:
        st.warning(f"The head detectors stopped at this demo's time budget after {scores.sequences} of their "
                   f"{scores.asked} probe sequences: the scores below average those {scores.sequences}. To "
                   f"{FULL_SIZE}.", icon=":material/timer_off:")
    st.caption(f"Each score is the mean attention a head puts where that kind of head looks, on {scores.sequences} "
               "sequences [BOS] + A + A (A: 32 distinct random tokens of the model's vocabulary, seed 0): previous = "
               "on the token just before; duplicate = on the earlier copy of the same token; induction = on the token "
               "after that earlier copy (Olsson et al. 2022). 1 = always exactly there.")
    kind = st.radio("Kind of head", DETECTORS, key="detector", horizontal=True)
    left, right = st.columns([3, 2])
    with left:
        chart(head_scores_figure(scores[kind], kind, width=column_width(0.6)), "analysis_detectors", f"{name}-{kind}-heads",
              on_select=lambda: open_head("analysis_detectors"))
        open_head_picker("_open_head_detectors", *scores[kind].shape)
    L, H = scores[kind].shape
    rows = {"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
            **{k: np.round(v.ravel(), 3) for k, v in scores.items()}}
    with right:
        st.dataframe(rows, hide_index=True, key="analysis_detector_table")
    layer, head = field_value("layer"), field_value("head")
    ids, start, n = repeated_tokens(source.model, seed=0)  # (B, start + 2n)
    probe = ids[0].tolist()
    tokens = token_labels(source.model.tokenizer, probe)
    weights = source.model.attentions_for_ids(probe)[layer]  # (H, T, T)
    st.caption(f"Click a head above (or pick it in Open head) to open it here, on the first probe sequence: {start} start token, then "
               f"{n} random tokens, then the same {n} again. A previous-token head draws the diagonal just below "
               "the main one; an induction head draws a second diagonal in the repeat, one key after the copy.")
    probe_trace = AttentionTrace(query_tokens=tokens, key_tokens=tokens, weights=weights, causal=source.part == "decoder",
                                 meta={"unavailable": "the model's attention weights on a probe sequence"})
    _show_head(source, layer, head, name, probe_trace)
