"""Knockout: switch heads off and measure what changes, in the layer and (a model's) through the whole model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import BOOL, boolean, choice, heads, short_text
from ....limits import MAX_HEADS, MAX_TEXT_CHARS
from ....names import ABLATION_KINDS
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    import numpy as np

    from ....sources import TraceSource
    from ...analysis import SectionContext

PART = Part("Knockout", EVERY_MODE, f"{__name__}:render", order=40, arrays=("head_outputs", "W_O", "output"),
            help="Switch heads off and measure what changes.",
            fields=(StateField("off", (), heads(MAX_HEADS), f"head numbers from 0 to {MAX_HEADS - 1}, comma-separated"),
                    StateField("rank_final", False, boolean, BOOL),
                    choice("ablation", "zero", ABLATION_KINDS),
                    StateField("ablation_text", "", short_text(MAX_TEXT_CHARS), f"at most {MAX_TEXT_CHARS} characters",
                               MAX_TEXT_CHARS)))
ABLATION_LABELS = {"zero": "zero", "mean": "mean over a reference", "resample": "resample from another text"}


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import knockout_effect, knockout_ranking
    from ...analysis import clamp_heads, head_format
    from ...text import plain
    from ...views import labelled_value

    trace = c.trace
    H = trace.num_heads
    clamp_heads(H)
    off = st.multiselect("Switch heads off", list(range(H)), key="off", format_func=head_format,
                         placeholder="Pick heads to knock out…",
                         help="A head switched off has its block of the concat zeroed before W_O.")
    whole = c.source if c.source.model is not None else None  # a whole model behind the layer
    ablation, reference = _ablation_choice(whole)
    where = ("inside the real model (its concat block is zeroed before W_O, so later layers see the change)"
             if whole is not None else "from the trace: output = sum of the kept heads' contributions + b_O")
    st.caption(f"Relative change ‖out − out_knocked‖ / ‖out‖, computed {where}.")
    per_token = {"this layer's output (after W_O)": (trace.query_tokens, knockout_effect(trace, off, axis=-1))}
    cols = st.columns(2)
    labelled_value(cols[0], "Change in this layer's output", f"{knockout_effect(trace, off):.1%}")
    try:
        _model_knockout(whole, c.name, c.layer, H, off, ablation, reference, c.max_passes, cols[1], per_token,
                        knockout_ranking(trace))
    except ValueError as err:
        st.warning(f"Cannot {ablation}-ablate: {plain(str(err))}")


def _ablation_choice(whole: TraceSource | None) -> tuple[str, str | None]:
    """The ablation through the model (zero, mean or resample) and its reference text (None: the text itself)."""
    import streamlit as st

    from ....analysis import ABLATIONS

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


def _model_knockout(whole: TraceSource | None, name: str, layer: int, H: int, off: list[int], ablation: str,
                    reference: str | None, max_passes: int | None, column, per_token: dict,
                    layer_ranking: np.ndarray) -> None:
    """Knockout through the whole model with the chosen ablation, said in every label."""
    import functools

    import streamlit as st

    from ....analysis import model_knockout, model_knockout_ranking, next_token_knockout
    from ....figures.analysis import knockout_figure, next_token_figure, ranking_figure
    from ....serve.hosting import FULL_SIZE
    from ....token_labels import vocab_labels
    from ...fair import TimeSpent, check_time, heavy
    from ...text import plain
    from ...views import chart, labelled_value

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
