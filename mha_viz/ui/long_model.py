"""Pretrained mode on a long text: the whole text's long trace (a progress bar and Cancel while it runs), the chosen
layer's overview and exact zoom, and every layer's heads coloured by a long-range statistic."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from ..checks import failure_message
from ..figures.long_stats import STATS, long_stats_figure
from ..pretrained.long import LongBlocks, LongTraceCancelled, ModelLongTrace
from ..serve.hosting import FULL_SIZE, Budget
from . import views
from .cached_sources import CachedModel
from .fair import TimeSpent, check_time
from .state import keep, kept
from .style import page_width
from .text import plain

CANCELLED = "_cancelled_long_traces"  # session key: digests of the long traces this session cancelled
TIMED_OUT = "_timed_out_long_traces"  # session key: digest -> the notice of a long trace stopped at the time budget


def _digest(key: tuple) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def long_input(source: CachedModel, limits: Budget | None) -> ModelLongTrace | None:
    """The long trace of a text longer than the model's window (None for a shorter text, a model without a long
    trace, or a cancelled one: each says so), with what the page reads of it."""
    if not source.is_long():
        return None
    model, limit = source.model, source.long_limit()
    if limit is not None and len(source.text_tokens()) > limit:
        positions = model.adapter.max_positions()
        why = (f"this public demo traces at most {limit} tokens; to {FULL_SIZE}"
               if limits is not None and (positions is None or limit < positions) else
               f"{model.name} has {positions} positions" if positions == limit else f"the app traces at most {limit}")
        st.warning(f"The text has more than {limit} tokens: {why}. The first {limit} are read.",
                   icon=":material/content_cut:")
    try:
        long = traced(source)
    except ValueError as err:
        st.warning(f"No long trace here: {err}. The views read the text's first {model.max_tokens} tokens.")
        return None
    if long is not None:
        st.info(window_notice(source, long), icon=":material/straighten:")
    return long


def window_notice(source: CachedModel, long: ModelLongTrace) -> str:
    """What the page draws of a long text: all of it in the Heads view, a window in the others (which tokens)."""
    model = source.model
    window = model.encode(source.text).ids
    same = next((i for i, (a, b) in enumerate(zip(window, long.ids)) if a != b), min(len(window), len(long.ids)))
    rows = (f"for this causal model their first {same} rows are exactly those of the long run" if
            model.adapter.causal(source.part) else
            "this model reads both ways, so a window's weights differ from the long run's")
    writes = (" Generate writes after all of them." if source.causal_lm and source.generation_limit() is not None
              else "")
    return (f"A long text: {long.num_tokens} tokens, traced in {long.seconds:.1f} s. The Heads view draws all of them "
            f"(the layer's overview and an exact zoom) and every layer's heads by a long-range statistic.{writes} The "
            f"other views read a window: tokens 0–{len(window) - 1}, the first {len(window)} ({rows}).")


def _trace_again(key: str) -> None:
    keep(CANCELLED, set).discard(key)
    keep(TIMED_OUT, dict).pop(key, None)


def traced(source: CachedModel) -> ModelLongTrace | None:
    """source.long_trace() with a progress bar (per layer) and a Cancel button while it computes; None once this
    session cancelled it or it ran past its time limit (fair.check_time between layers), with a button to trace it
    again. A click on Cancel reruns the page: the pass stops at its next layer (the progress callback raises
    LongTraceCancelled, or Streamlit stops the run at the bar's update)."""
    key = _digest(source.long_key())
    cancelled = keep(CANCELLED, set)
    timed_out = keep(TIMED_OUT, dict)
    if key in cancelled or key in timed_out:
        if key in timed_out:
            st.warning(timed_out[key], icon=":material/timer_off:")
        else:
            st.info("The long trace of this text was cancelled: the views read its first "
                    f"{source.model.max_tokens} tokens.", icon=":material/stop_circle:")
        st.button("Trace the whole text", key="long_again", on_click=_trace_again, args=(key,),
                  icon=":material/play_arrow:")
        return None
    if source.long_cached():
        return source.long_trace()
    slot = st.empty()
    with slot.container():
        bar = st.progress(0.0, text="Tracing every layer over the long text…")
        st.button("Cancel", key="long_cancel", on_click=cancelled.add, args=(key,), icon=":material/stop:")

    reached = [0, 0]  # layers traced, of how many

    def progress(done: int, total: int) -> None:
        if key in kept(CANCELLED, ()):
            raise LongTraceCancelled("cancelled in the app")
        reached[:] = done, total
        check_time()  # past the time limit: TimeSpent stops the pass before its next layer
        bar.progress(done / total, text=f"Traced {done} of {total} layers")

    try:
        return source.long_trace(progress)
    except LongTraceCancelled:
        st.info("The long trace was cancelled.", icon=":material/stop_circle:")
        return None
    except TimeSpent as err:
        timed_out[key] = (f"The long trace {err}. It had traced {reached[0]} of {reached[1]} layers; the views read "
                          f"the text's first {source.model.max_tokens} tokens.")
        return traced(source)  # its notice, and the button to trace it again
    finally:
        slot.empty()


@dataclass(frozen=True)
class _LayerOf:
    """One layer of the long trace that load() returns (the zoom fragment's argument: it holds no data)."""

    load: Callable[[], ModelLongTrace]
    layer: int

    def __call__(self) -> LongBlocks:
        return self.load().layer(self.layer)


def long_model_view(long: ModelLongTrace, layer: int, name: str, load: Callable[[], ModelLongTrace]) -> None:
    """The Heads view of a long text: the layer's overview and zoom, then every layer's heads by one statistic."""
    failed = failure_message(long.layer(layer))
    if failed:  # the rebuilt numbers are not the model's own (BLOOM's own eager pass): said before any is shown
        st.error(plain(failed), icon=":material/error:")
    views.long_heads_view(long.layer(layer), f"{name}-long", _LayerOf(load, layer))
    stats = long.stats()
    stat = st.segmented_control("Colour every layer's heads by", list(STATS), key="long_stat", required=True,
                                format_func=lambda s: STATS[s][0])
    st.caption("Each cell is one head of one layer, averaged over every query of the long text; hover a cell for all "
               "four statistics. Mean distance: how far back a head looks; entropy: how spread its weights are; "
               "first token: the usual attention sink; learned sink: the weight a gpt-oss-style sink logit takes."
               + (" On linear and state-space layers they read |M|, each row scaled to sum to 1 (a mixing matrix is "
                  "signed and its rows are not distributions); a blank cell is a head that layer does not have."
                  if any(one.kind != "softmax" for one in long.layers.values()) else ""))
    views.chart(long_stats_figure(stats, stat, tokens=long.num_tokens, width=page_width()), "long_stats",
                f"{name}-long-stats")
