"""Logit attribution: each head's share of the logit of the next token (direct logit attribution)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import optional_int, short_text
from ....limits import MAX_TOKENS
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Logit attribution", EVERY_MODE, f"{__name__}:render", order=80,
            help="Each head's share of the logit of the next token (direct logit attribution).",
            fields=(StateField("dla_position", None, optional_int(MAX_TOKENS - 1),  # None: the last position
                               f"last or a position from 0 to {MAX_TOKENS - 1}"),
                    StateField("dla_token", "", short_text(100), "a token, at most 100 characters", 100)))


def render(c: SectionContext) -> None:
    """Direct logit attribution of the next token after a position: each head's share of its logit."""
    import streamlit as st

    from ....figures.common import visible_token
    from ....figures.generation import logit_attribution_figure
    from ...analysis import open_head, show_head
    from ...state import fit, put
    from ...state import value as field_value
    from ...style import page_width
    from ...text import plain
    from ...views import chart, open_head_picker

    source, name = c.source, c.name
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
    show_head(source, field_value("layer"), field_value("head"), name)
