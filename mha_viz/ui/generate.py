"""Generate: a causal language model writes after the sentence, one token at a time; each step shows the
distribution the token came from, which heads wrote its logit, and where the predicting query looked."""

from __future__ import annotations

import functools
from contextlib import nullcontext

import numpy as np
import streamlit as st

from ..figures import heads_figure
from ..figures.generation import logit_attribution_figure, next_token_figure, step_attention_figure
from ..figures.overview import picked_head
from ..limits import MAX_NEW_TOKENS
from ..parts import bounds, capable
from ..pretrained.generation import Generation
from ..sampling import Sampling
from ..serve.hosting import FULL_SIZE, Budget, heavy_generation
from ..sources import ModelSource
from ..token_labels import spelled, token_labels, vocab_labels
from ..trace import AttentionTrace
from .fair import heavy
from .state import current, fit, put, put_all, take, widget, write_url
from .state import value as field_value
from .style import column_width, is_narrow, page_width
from .text import plain
from .views import chart, open_head_picker

PLAY_SECONDS = 0.8  # between two steps while playing
RERUN_APP = "_rerun_app"  # session key: the fragment's next run reruns the whole page
PLAY_FROM_START = "_play_from_start"  # session key: the first playing run shows step 1
DLA_TOLERANCE = 1e-3  # the terms must add up to the model's logit within this (float32)
PROMPT_SHOWN = 120  # the written text shows at most this many of a long prompt's tokens, the last ones


def _step(by: int, last: int) -> None:
    put("gen_step", min(max(1, field_value("gen_step") + by), last))


def _play_changed(last: int) -> None:
    """The Play toggle lives in the fragment, whose own rerun cannot start the timer (run_every is set when the whole
    page runs): rerun the page. Play at the last token starts again from the first."""
    if widget("gen_play") and field_value("gen_step") >= last:
        put("gen_step", 1)
        put(PLAY_FROM_START, True)
    put(RERUN_APP, True)


def _open_head(chart_key: str) -> None:
    """A click on a layers x heads cell opens that head below (layer and head go to the layer control and the URL)."""
    event = widget(chart_key)
    picked = picked_head(event.selection.points) if event is not None else None
    if picked is not None:
        put_all(layer=picked[0], head=picked[1])
        put(RERUN_APP, True)  # the layer control above the page lives outside the fragment


def _rerun_app() -> None:
    put(RERUN_APP, True)  # the sidebar's layer slider lives outside the fragment


def _written(gen: Generation, step: int, model) -> str:
    """The prompt (its last PROMPT_SHOWN tokens, where it is longer), then the tokens written up to this step, the
    newest highlighted (Markdown, user text escaped)."""
    prompt = len(gen.prompt_ids)
    ids = gen.input_ids(step - 1) + gen.token_ids[step - 1:step]  # the prompt and the tokens written up to this step
    skipped = max(0, prompt - PROMPT_SHOWN)
    read, earlier, newest = (plain(p) for p in spelled(model.tokenizer, ids[skipped:],
                                                        (prompt - skipped, prompt - skipped + step - 1)))
    if skipped:
        read = f"*(… {skipped:,} earlier tokens of the prompt)* … {read}"
    before = read + " **" + earlier + "**" if step > 1 else read
    return f"{before} :red-background[**{newest}**]"


def generate_controls(max_new_tokens: int = MAX_NEW_TOKENS) -> Sampling:
    """The sampling widgets (keys are ViewState fields); returns the Sampling they set."""
    cols = st.columns([2, 2, 1, 2, 1])
    # a public demo writes fewer: hosting.within_budget's notice on the page says so
    put("new_tokens", min(field_value("new_tokens"), max_new_tokens))
    cols[0].slider("New tokens", 1, max_new_tokens, key="new_tokens")
    temperature = cols[1].slider("Temperature", *bounds("temperature"), step=0.05, key="temperature",
                                 help="0: greedy, always the most likely token. Above 0: sample from "
                                 "softmax(logits / temperature); higher flattens the distribution.")
    sampling = temperature > 0
    cols[2].number_input("Top-k", *bounds("top_k"), key="top_k", disabled=not sampling,
                         help="Keep only the k most likely tokens before sampling (0: off).")
    cols[3].slider("Top-p", *bounds("top_p"), step=0.01, key="top_p", disabled=not sampling,
                   help="Keep the smallest set of most likely tokens whose probabilities reach p (1: off).")
    cols[4].number_input("Seed", *bounds("gen_seed"), key="gen_seed", disabled=not sampling, help="Sampling is reproducible.")
    return Sampling.from_settings(temperature, field_value("top_k"), field_value("top_p"),
                                  int(field_value("gen_seed")))


def generate_view(source: ModelSource, name: str, limits: Budget | None = None) -> None:
    """limits: a public demo's Budget (it caps the tokens to write)."""
    model = source.model
    if model.next_token_unavailable is not None:
        st.info(f"Generation needs a causal language model: {model.next_token_unavailable}.")
        return
    hybrid = capable(source, "hybrid")
    st.caption("The model writes after your sentence one token at a time, reading its own output through the "
               + ("whole sequence again at every step (a linear or state-space layer's mixing matrix needs it)"
                  if hybrid else "key/value cache") + ". Each step shows the distribution the token was drawn from, which heads wrote "
               "that token's logit, and where the query that predicted it looked in every layer and head.")
    sampling = generate_controls(MAX_NEW_TOKENS if limits is None else limits.max_new_tokens)
    try:
        gen = source.generate(field_value("new_tokens"), sampling)
    except ValueError as err:
        st.warning(f"Cannot generate: {plain(str(err))}")
        return
    n = len(gen.steps)
    if gen.stop_reason == "stopped":
        st.warning(f"The generation stopped at this demo's time budget: it wrote {n} of the "
                   f"{field_value('new_tokens')} tokens asked for, and the steps below are those {n}. Ask for "
                   f"fewer tokens or a shorter text, or {FULL_SIZE}.", icon=":material/timer_off:")
    if field_value("gen_step") > n:
        fit("gen_step", n, f"a step from 1 to {n}: {n} tokens were written")
    put("gen_step", max(1, field_value("gen_step")))
    playing = widget("gen_play", False)
    fragment = st.fragment(_show_step, run_every=PLAY_SECONDS if playing else None)
    fragment(source, gen, name)


def _show_step(source: ModelSource, gen: Generation, name: str) -> None:
    """One step of the generation; while playing, each run of this fragment moves on by one token. Its model passes
    are heavy work when the generation is (serve.hosting.heavy_generation): a rerun of this fragment alone then takes
    the heavy turn (fair.heavy); a few tokens of a short text are light."""
    with heavy("Writing") if heavy_generation(len(gen.steps), getattr(source, "text", "")) else nullcontext():
        _draw_step(source, gen, name)


def _draw_step(source: ModelSource, gen: Generation, name: str) -> None:
    model, n = source.model, len(gen.steps)
    if take(RERUN_APP, False):
        st.rerun()  # scope "app": redraw the sidebar too
    if widget("gen_play") and not take(PLAY_FROM_START, False):  # playing: each run writes one more token
        if field_value("gen_step") >= n:
            put("gen_play", False)
            st.rerun()  # a full rerun: the fragment stops running every PLAY_SECONDS
        put("gen_step", field_value("gen_step") + 1)
    nav = st.columns([1, 5, 1, 2.4])  # the last: room for the Play label at 1024 px
    nav[0].button("◀", key="step_back", on_click=_step, args=(-1, n), disabled=field_value("gen_step") <= 1,
                  help="The previous token")
    if n > 1:
        nav[1].slider("Step (token written)", 1, n, key="gen_step")
    nav[2].button("▶", key="step_next", on_click=_step, args=(1, n), disabled=field_value("gen_step") >= n,
                  help="The next token")
    nav[3].toggle("Play", key="gen_play", on_change=_play_changed, args=(n,),
                  help=f"Step through the tokens, one every {PLAY_SECONDS:g} s.")
    step = field_value("gen_step")
    write_url(current())  # a fragment rerun (a step, a click on a head) skips the app's own URL update
    chosen = gen.steps[step - 1]
    stop = " The model ended the text." if gen.stop_reason == "eos" and step == n else ""
    st.markdown(_written(gen, step, model) + stop)
    how = gen.sampling.describe()
    narrow = is_narrow()
    left, right = (st.container(), st.container()) if narrow else st.columns([2, 3])
    with left:
        chart(next_token_figure(chosen.probs, functools.partial(vocab_labels, model.tokenizer), chosen.token_id,
                                title=f"Step {step}: next token ({how})",
                                width=page_width() if narrow else column_width(0.4)),
              "gen_probs", f"{name}-step{step}-next-token")
    with right:
        _attribution(source, gen, step, name, page_width() if narrow else column_width(0.6))
    keys = gen.key_tokens(step - 1)
    chart(step_attention_figure(chosen.attentions, keys,
                                title=f"Where the query that wrote {chosen.token!r} looked: {len(keys)} keys, one more "
                                "each step (the KV cache)", width=page_width()),
          "gen_attention", f"{name}-step{step}-attention")
    if capable(source, "hybrid"):
        st.caption("The rows of linear and state-space layers (lin, ssm) are the last row of each head's exact mixing "
                   "matrix: signed (red below 0) and not a share of 1; one colour scale centred at 0, as in the Heads "
                   "view.")
    elif (chosen.attentions < 0).any():
        st.caption("Differential attention: each head's weight is map₁ − λ·map₂, two softmax maps subtracted, so it "
                   "can be negative (red); one colour scale centred at 0, as in the Heads view.")
    outside = _outside_window(gen, step)
    if outside:
        st.caption(outside)
    _opened_head(source, gen, step, name)


def _outside_window(gen: Generation, step: int) -> str:
    """What a sliding window hides at this step ("" if nothing): which layers, their window, how many keys are 0."""
    hidden = gen.outside_window(step - 1)  # layer -> keys outside its window
    if not hidden:
        return ""
    by_window: dict[tuple[int, int], list[int]] = {}
    for layer, count in hidden.items():
        by_window.setdefault((gen.windows[layer], count), []).append(layer)
    parts = [f"layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}: a window of {window} keys, so the "
             f"{count} earliest key{'s are' if count > 1 else ' is'} outside it (weight 0)"
             for (window, count), layers in sorted(by_window.items())]
    return ("**Sliding window.** On a windowed layer a query sees only itself and the keys just before it: the "
            "others get weight 0 (the KV cache may not even keep them), and the row above puts every weight at its "
            "real key. " + "; ".join(parts) + ".")


def _attribution(source: ModelSource, gen: Generation, step: int, name: str, width: int) -> None:
    """Direct logit attribution of the chosen token at this step, with the check that its terms add up (its chart
    drawn width px wide)."""
    chosen = gen.steps[step - 1]
    try:
        dla = source.logit_attribution(ids=gen.input_ids(step - 1), token=chosen.token_id)
    except ValueError as err:
        st.info(f"Which heads wrote the logit: {plain(str(err))}.")
        return
    chart(logit_attribution_figure(dla.heads, dla.terms, dla.token, width=width), "gen_dla", f"{name}-step{step}-logit-attribution",
          on_select=lambda: _open_head("gen_dla"))
    open_head_picker("_open_head_gen", *dla.heads.shape, on_pick=_rerun_app)
    error = abs(dla.total - dla.logit)
    verdict = "✓ equal" if error <= DLA_TOLERANCE else "✗ differs"
    st.caption(f"Heads {np.nansum(dla.heads):+.3f} + other terms {sum(dla.terms.values()):+.3f} = **{dla.total:.4f}**; "
               f"the model's own logit for {plain(repr(dla.token))}: **{dla.logit:.4f}** ({verdict}, |difference| "
               f"{error:.1e} ≤ {DLA_TOLERANCE:g}). The final {dla.norm} is frozen at its measured scale "
               f"{dla.norm_scale:.4g}, which makes each head's share exact. Click a head (or pick it above) to open it.")


def _opened_head(source: ModelSource, gen: Generation, step: int, name: str) -> None:
    """The picked head's whole attention pattern on what the model had read at this step."""
    model = source.model
    layer, head = field_value("layer"), field_value("head")
    if not (0 <= layer < model.num_layers["decoder"] and 0 <= head < model.num_heads["decoder"]):
        return
    ids = gen.input_ids(step - 1)
    if len(ids) > model.max_tokens:  # a long prompt: the step's row is exact, a whole [T, T] pattern is not drawn
        row, keys = gen.steps[step - 1].attentions[layer, head], gen.key_tokens(step - 1)  # (T,)
        top = int(np.nanargmax(row))
        st.info(f"**Layer {layer}, head {head}** at step {step}: its last query (which predicted "
                f"{plain(repr(gen.steps[step - 1].token))}) puts {row[top]:.0%} of its attention on position {top:,}, "
                f"**{plain(keys[top])}** (row L{layer} H{head} of the chart above). Its whole pattern is drawn here "
                f"for texts of up to {model.max_tokens} tokens; the model has read {len(ids):,} at this step. The "
                "Heads view draws any block of a long text's pattern exactly.")
        return
    weights = model.attentions_for_ids(list(ids))[layer]  # (H, T, T)
    tokens = token_labels(model.tokenizer, ids)
    trace = AttentionTrace(query_tokens=tokens, key_tokens=tokens, weights=weights, causal=True,
                           meta={"unavailable": "attention weights of the model on the text at this step"})
    row = weights[head, -1]  # (T,) the predicting query's row
    top = int(np.argmax(row))
    st.markdown(f"**Layer {layer}, head {head}** (click a head above to open another) on the text at step {step}: "
                f"the last query (which predicted "
                f"{plain(repr(gen.steps[step - 1].token))}) puts {row[top]:.0%} of its attention on position {top}, "
                f"**{plain(tokens[top])}**.")
    chart(heads_figure(trace, [head], cols=1, cell_px=18, title=f"layer {layer}, head {head}", width=page_width()),
          "gen_opened",
          f"{name}-L{layer}H{head}-step{step}")
