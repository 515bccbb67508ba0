"""The analysis view: its section menu, the context every section's render function takes, and what the sections
(mha_viz/ui/parts/sections/, one module each) share: head numbers kept to the layer, a click that opens a head.

Every widget's key is a ViewState field (mha_viz.params), so a shared link reopens the same section
with the same heads switched off, the same comparison, and so on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from ..figures import heads_figure
from ..figures.overview import picked_head
from ..parts import SECTIONS
from ..sources import ModelSource, TraceSource
from ..trace import AttentionTrace
from .state import confine, fit, put_all, put_default, widget
from .state import value as field_value
from .style import page_width
from .text import plain
from .views import chart, heads_here

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel

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


def head_format(h: int | None) -> str:
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

def clamp_heads(num_heads: int) -> None:
    """Drop head numbers this layer lacks, and say so (state.fit)."""
    fit("off", tuple(h for h in field_value("off") if h < num_heads), heads_here(num_heads))
    if field_value("head") >= num_heads:
        fit("head", 0, heads_here(num_heads))
    if (field_value("compare_head") or 0) >= num_heads:
        fit("compare_head", None, heads_here(num_heads), "the mean over heads")


def open_head(chart_key: str) -> None:
    """A click on a layers x heads cell opens that head: its layer in the layer control, the head below."""
    event = widget(chart_key)
    picked = picked_head(event.selection.points) if event is not None else None
    if picked is not None:
        put_all(layer=picked[0], head=picked[1])


def show_head(source: ModelSource, layer: int, head: int, name: str, trace: AttentionTrace | None = None) -> None:
    """The head a click opened: its attention on the source's text (or on the given trace)."""
    trace = trace if trace is not None else source.trace(layer)
    if 0 <= head < trace.num_heads:
        chart(heads_figure(trace, [head], cols=1, cell_px=18, title=f"layer {layer}, head {head}", width=page_width()),
              "analysis_opened_head", f"{name}-L{layer}H{head}")
