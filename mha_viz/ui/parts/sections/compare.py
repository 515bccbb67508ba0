"""Compare: this layer against another sentence, layer or model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import BOOL, MODEL_ID, boolean, choice, model_id, optional_int, short_text
from ....limits import MAX_HEADS, MAX_LAYERS, MAX_MODEL_CHARS, MAX_TEXT_CHARS
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    from ....sources import ModelSource
    from ....trace import AttentionTrace
    from ...analysis import ModelLoader, SectionContext

COMPARE_WITH = ("Another sentence", "Another layer", "Another model")

PART = Part("Compare", EVERY_MODE, f"{__name__}:render", order=60, texts=("other_text",),
            help="This layer against another sentence, layer or model.",
            fields=(choice("compare_with", COMPARE_WITH[0], COMPARE_WITH),
                    StateField("other_text", "", short_text(MAX_TEXT_CHARS), f"at most {MAX_TEXT_CHARS} characters",
                               MAX_TEXT_CHARS),
                    StateField("other_layer", None, optional_int(MAX_LAYERS - 1),
                               f"a layer number from 0 to {MAX_LAYERS - 1}"),
                    StateField("other_model", "", model_id, MODEL_ID, MAX_MODEL_CHARS),
                    StateField("compare_head", None, optional_int(MAX_HEADS - 1),  # None: the mean over heads
                               f"mean or a head number from 0 to {MAX_HEADS - 1}"),
                    StateField("by_position", False, boolean, BOOL)))


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import compare_traces
    from ....figures.analysis import comparison_figure
    from ...analysis import clamp_heads, head_format
    from ...state import confine, fit, put
    from ...state import value as field_value
    from ...text import plain
    from ...views import chart

    trace, source, layer = c.trace, c.source, c.layer
    whole = source if source.model is not None else None  # a whole model behind the layer
    offered = {"Another sentence": True, "Another layer": source.num_layers > 1,
               "Another model": whole is not None and c.other_model is not None}
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
        compared = _trace_other_model(whole, c.other_model, layer)
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
    clamp_heads(trace.num_heads)
    confine("compare_head", heads, None)
    head = st.selectbox("Head", heads, key="compare_head", format_func=head_format)
    chart(comparison_figure(result, head, labels), "analysis_compare", f"{c.name}-compare")


def _trace_other_model(
    source: ModelSource, other_model: ModelLoader, layer: int
) -> tuple[AttentionTrace, tuple[str, str]] | None:
    """The same sentence, part and layer (or the other model's last) in another model; None after a message."""
    import streamlit as st

    from ....pretrained.errors import ModelLoadError
    from ...state import mark_typed
    from ...text import plain

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
