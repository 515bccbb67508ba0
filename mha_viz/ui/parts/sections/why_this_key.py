"""Why this key: one attention score split into (query source x key source) terms of the residual stream, the margin
over the runner-up key, and what taking each source out does to the key's weight (analysis.score_attribution)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....fields import optional_int
from ....limits import MAX_TOKENS
from ....parts import EVERY_MODE, Part, StateField

if TYPE_CHECKING:
    from ....analysis import ScoreAttribution
    from ...analysis import SectionContext

MAX_CLICKABLE = 96  # tokens up to which the head's pattern is drawn with a click target on every cell
PART = Part("Why this key", EVERY_MODE, f"{__name__}:render", order=85,
            help="Why a query puts its weight on a key: its score split by where the query and the key came from.",
            fields=(StateField("why_query", None, optional_int(MAX_TOKENS - 1),  # None: the last position
                               f"last or a position from 0 to {MAX_TOKENS - 1}"),
                    StateField("why_key", None, optional_int(MAX_TOKENS - 1),  # None: the query's top key
                               f"auto or a position from 0 to {MAX_TOKENS - 1}")))


def render(c: SectionContext) -> None:
    import numpy as np
    import streamlit as st

    from ....analysis import score_attribution, score_attribution_unavailable
    from ....figures import heads_figure
    from ....figures.common import visible_token
    from ....figures.score_attribution import score_attribution_figure, with_cell_picker
    from ...analysis import clamp_heads
    from ...state import fit, put
    from ...state import value as field_value
    from ...style import page_width
    from ...text import plain
    from ...views import chart

    model = c.source.model
    by_input = getattr(c.source, "score_attribution", None)  # a single layer: its input's parts
    if model is None and by_input is None:
        st.info("Why this key needs a model's residual stream, or a layer whose input it knows the parts of: it "
                "splits a score by where the query and the key came from. This layer reads one input, X: the Heads "
                "view's *Why one score* splits its q·k dimension by dimension.")
        return
    reason = None if model is None else score_attribution_unavailable(model)
    if reason is not None:
        st.info(f"Why this key is unavailable: {plain(reason)}.")
        return
    split = {} if model is None or model.kind != "encoder-decoder" else {  # an encoder-decoder's part
        "part": c.source.part, "decoder_text": c.source.decoder_text}
    kinds = ("softmax",) if model is None else model.layer_kinds(split.get("part"))
    if kinds[c.layer] != "softmax":
        attention = [i for i, kind in enumerate(kinds) if kind == "softmax"]
        st.info(f"Why this key splits softmax attention scores: layer {c.layer} is a {kinds[c.layer]} mixer. "
                f"Pick an attention layer ({', '.join(map(str, attention))}) with the Layer control.")
        return
    trace, tokens, key_tokens = c.trace, c.trace.query_tokens, c.trace.key_tokens  # cross-attention: two texts
    T, S = len(tokens), len(key_tokens)
    clamp_heads(trace.num_heads)
    for name, default, n in (("why_query", T - 1, T), ("why_key", None, S)):
        if field_value(name) is not None and field_value(name) >= n:
            fit(name, default, f"a position from 0 to {n - 1}: this text has {n} tokens")
    if field_value("why_query") is None:
        put("why_query", T - 1)  # "last"

    def label(i: int) -> str:
        return f"{i}: {visible_token(tokens[i])}"

    def key_label(j: int) -> str:
        return f"{j}: {visible_token(key_tokens[j])}"

    a, b, d = st.columns(3)
    head = a.selectbox("Head", list(range(trace.num_heads)), key="head", format_func=lambda h: f"head {h}")
    query = b.selectbox("Query", list(range(T)), key="why_query", format_func=label,
                        help="The token whose attention row is explained.")
    row = trace.weights[head, query]
    seen = [j for j in range(S) if trace.scores is None or trace.scores[head, query, j] > float("-inf")]
    if field_value("why_key") is not None and field_value("why_key") not in seen:
        fit("why_key", None, f"a key query {query} sees (0 to {seen[-1]})", "its top key")
    top = f"top: {key_label(int(row.argmax()))}"  # None: the key the query weights most (shown as the placeholder)
    key = d.selectbox("Key", [None, *seen], key="why_key", format_func=lambda j: top if j is None else key_label(j),
                      placeholder=top, help="The key whose score is explained; by default the one the query weights "
                      "most.")
    try:
        sa = by_input(head, query) if model is None else c.source.memo(
            ("score attribution", c.layer, head, query),
            lambda: score_attribution(model, c.source.text, layer=c.layer, head=head, query=query, **split))
    except ValueError as err:
        st.warning(f"Cannot split this score: {plain(str(err))}")
        return
    key = int(np.argmax(trace.weights[head, query])) if key is None else key  # a differential head: both maps'
    if T <= MAX_CLICKABLE:
        allowed = np.isfinite(trace.scores[head]) if trace.scores is not None else np.ones((T, S), dtype=bool)
        fig = heads_figure(trace, [head], cols=1, cell_px=18, width=page_width(),
                           title=f"Layer {c.layer}, head {head}: click a cell to explain its score")
        chart(with_cell_picker(fig, trace.weights[head], allowed, (query, key)), "analysis_why_pattern",
              f"{c.name}-L{c.layer}H{head}-pattern", on_select=lambda: _on_cell_click(T, S))
    maps = [(sa, "")]  # a differential head (DiffLlama, the diff variant): its two maps, query heads h and h + H
    if trace.maps is not None:
        second = by_input(head + trace.num_heads, query) if model is None else c.source.memo(
            ("score attribution", c.layer, head + trace.num_heads, query), lambda: score_attribution(
                model, c.source.text, layer=c.layer, head=head + trace.num_heads, query=query, **split))
        lam = float(trace.lambdas[head])
        maps = [(sa, f"**Map 1** of differential head {head} (its weights count once):"),
                (second, f"**Map 2** (its weights count −λ = −{lam:.3f} times; weights = map 1 − λ map 2):")]
    for i, (part, words) in enumerate(maps):
        said = _sentence(part, key, lambda i: f"{i} (**{plain(visible_token(tokens[i]))}**)",
                         lambda j: f"{j} (**{plain(visible_token(key_tokens[j]))}**)")
        st.markdown(f"{words} {said}" if words else said)
        chart(score_attribution_figure(
            part.table(key), part.sources, part.removed[:, key], float(part.weights[key]), width=page_width(),
            removed_from="the input" if part.norm == "none" else "the stream", key_sources=part.key_sources,
            title=f"Layer {c.layer}, head {head}{f', map {i + 1}' if words else ''}: why {query} "
                  f"({visible_token(tokens[query])}) looks at {key} ({visible_token(key_tokens[key])})"),
            "analysis_why_key" if i == 0 else "analysis_why_key_map2",
            f"{c.name}-L{c.layer}H{head}-q{query}-k{key}" + (f"-map{i + 1}" if words else ""))
    error = abs(sa.total(key) - sa.scores[sa.keys.index(key)])
    if model is None:
        latent = ("MLA's latent RMSNorms, frozen at the scales they measured on X, keep its queries and keys "
                  "affine in X. " if "kv_latent" in trace.meta else "")
        st.caption(f"The terms add up to **{sa.total(key):.5f}**; the layer's own score is "
                   f"**{sa.scores[sa.keys.index(key)]:.5f}** (|difference| {error:.1e}). The layer reads its input X "
                   "directly, no norm before it: X is a token part plus a position part (here the token vectors and "
                   "the sinusoidal encoding; in a trained layer its token and position embeddings), so each query and "
                   f"key is a token part, a position part and *bias* (the projections' biases). {latent}The bars "
                   "rerun the layer with each part taken out of X.")
        return
    if sa.norm != "no norm":
        head_words = (f"Each side reads the stream through the layer's {sa.norm}, frozen at the scale it measured at "
                      f"each position (at the query: {sa.norm_scales[query]:.4g}); *bias* is what does not depend on "
                      "the input (the norm's shift and the projection's bias). The bars recompute the row exactly, "
                      "norm included.")
    elif "biases (norms, W_O)" in sa.sources:  # a post-norm encoder's constant source
        head_words = ("The layer reads the stream with no norm before it: in this post-norm stack each LayerNorm "
                      "comes after a sublayer, and every one on the way was frozen at its scale at each position, so "
                      "each source went through them; *biases (norms, W_O)* is their shifts and the output "
                      "projections' biases, *bias* the projection's. The bars rerun the layer with each source taken "
                      "out of its input.")
    else:  # ModernBERT's layer 0: the embeddings arrive normed
        head_words = ("The layer reads the stream with no norm of its own (the embeddings arrive normed); *bias* is "
                      "the projection's. The bars rerun the layer with each source taken out of its input.")
    if "relative position" in sa.sources:  # DeBERTa (analysis.score_streams)
        head_words += (" *relative position* is DeBERTa's position terms: its column content→position (c2p) by query "
                       "source, its row position→content (p2c) by key source; taken out, the row is the content "
                       "score's alone.")
    if sa.key_tokens is not None:
        head_words += (" Cross-attention: the rows are the decoder's sources, the columns the encoder output's (the "
                       "keys read the encoder's last layer, through its final norm where it has one, frozen too); each "
                       "bar takes a source out of one side only.")
    elif sa.key_sources is not None:  # Gemma 3n's KV-shared layers
        head_words += (f" The keys are those layer {trace.meta['kv_from']} computed (KV sharing): the columns are the "
                       "sources of that layer's stream, through its own norm and key norm, frozen too; each bar takes "
                       "a source out of one side only.")
    st.caption(f"The terms add up to **{sa.total(key):.5f}**; the score the trace rebuilds (checked against the "
               f"model's own weights) is **{sa.scores[sa.keys.index(key)]:.5f}** (|difference| {error:.1e}). "
               + head_words)


def _on_cell_click(T: int, S: int) -> None:
    """A click on the head's pattern picks that cell's query and key."""
    from ....figures.score_attribution import picked_cell
    from ...state import put_all, widget

    event = widget("analysis_why_pattern")
    picked = picked_cell(event.selection.points, T, S) if event is not None else None
    if picked is not None:
        put_all(why_query=picked[0], why_key=picked[1])


def _sentence(sa: ScoreAttribution, key: int, label, key_label) -> str:
    """What the numbers say: the key's weight and score, its largest terms and their share, its margin over the
    runner-up and where that margin comes from, and the source whose removal moves its weight most. label(i) names a
    query position, key_label(j) a key position (cross-attention: of the encoder's text)."""
    import numpy as np

    columns = sa.key_sources or sa.sources  # cross-attention: the key side's own sources
    removals = list(sa.sources[:len(sa.removed)]) if sa.key_sources is None else [  # each side's but "bias"
        *(f"{s} (query side)" for s in sa.sources[:-1]), *(f"{s} (key side)" for s in columns[:-1])]
    i = sa.keys.index(key)
    score, weight = float(sa.scores[i]), float(sa.weights[key])
    terms = sa.largest(key, 2)
    parts = [f"Query {label(sa.query)} gives key {key_label(key)} weight **{weight:.3f}** (score {score:.3f})."]
    described = [f"(query: **{a}**) × (key: **{b}**) = {t:+.3f}" + (
        f" ({t / score:.0%} of the score)" if score > 0 and t > 0 else "") for a, b, t in terms]
    parts.append(f"Its largest terms: {' and '.join(described)}.")
    others = [j for j in sa.keys if j != key]
    if others:
        runner = max(others, key=lambda j: sa.scores[sa.keys.index(j)])
        margin = float(sa.scores[i] - sa.scores[sa.keys.index(runner)])
        diff = sa.versus(key, runner)
        a, b = np.unravel_index(np.argmax(diff if margin >= 0 else -diff), diff.shape)
        parts.append(f"Against the next-highest key {key_label(runner)} it scores {margin:+.3f}; the largest part of "
                     f"that margin is (query: **{sa.sources[a]}**) × (key: **{columns[b]}**), {diff[a, b]:+.3f}.")
    change = sa.removed[:, key] - weight
    drop = int(np.argmin(change))
    if change[drop] < -1e-3:
        where = "the input" if sa.norm == "none" else "the stream"  # a single layer reads its input, no stream
        parts.append(f"Taking **{removals[drop]}** out of {where} moves its weight most: {weight:.3f} → "
                     f"{sa.removed[drop, key]:.3f}.")
    return " ".join(parts)
