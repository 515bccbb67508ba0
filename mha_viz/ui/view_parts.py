"""The views as registered parts (mha_viz.parts.VIEWS): the context every view's render function takes, the view
menu, and the render functions the Heads, Lines, Overview, Shapes & cost and Training parts (mha_viz/ui/parts/views/)
point to (each draws with mha_viz/ui/views.py and friends)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import streamlit as st

from ..analysis import without_tokens
from ..config import MHAConfig
from ..layer_payload import fitting_payload
from ..long import LongTrace
from ..mixers import layer_marks
from ..params import ViewState
from ..parts import VIEWS, capable, shown
from ..pretrained.errors import MixerSizeError
from ..serve.hosting import Budget
from ..sources import ModelSource, TraceSource
from ..trace import AttentionTrace
from ..variants import LayerVariant
from . import views
from .analysis import ModelLoader
from .state import confine, put_default
from .state import value as field_value
from .style import column_width, is_narrow
from .training import training_page
from .variants_cost import variant_parameters, variants_cost_view


@dataclass(frozen=True)
class ViewContext:
    """What a page hands the view it shows.

    trace: the layer's trace (special tokens kept; None for a long input's Heads view, which draws `long`); shown:
    the trace as drawn (hidden tokens removed); hidden: the tokens hidden; cfg: the configurable layer's sizes;
    accuracy: draws the accuracy of every h beside the heads (trained weights); other_model: loads another model
    for comparison (pretrained mode).
    """

    state: ViewState
    name: str
    source: TraceSource | None = None  # None: the view makes its own (Training)
    trace: AttentionTrace | None = None
    shown: AttentionTrace | None = None
    layer: int = 0
    cfg: MHAConfig | None = None
    long: LongTrace | None = None
    limits: Budget | None = None
    hidden: frozenset[str] = frozenset()
    accuracy: Callable[[], None] | None = None
    other_model: ModelLoader | None = None
    grid_drawn: bool = False  # the layer control above drew every head of the layer (mha_viz/renderer.js)

    @property
    def drawn(self) -> AttentionTrace:
        return self.trace if self.shown is None else self.shown

    def sizes(self) -> tuple[int, int]:
        """Query and key tokens (a long input: all of them)."""
        return tuple((self.trace.weights.shape if self.long is None else self.long.shape)[1:])


def view_picker(options: tuple[str, ...]) -> str:
    """The view menu (its widget key is the `view` field); a view this page does not offer becomes the first."""
    confine("view", options)
    return st.segmented_control("View", options, key="view", required=True, label_visibility="collapsed")


def render_view(view: str, context: ViewContext) -> AttentionTrace | None:
    """Draw the registered view; a trace lacking an array the view draws gets a message instead. Returns what the
    view's function returns (Training: the trained layer's trace, for Export)."""
    part = VIEWS.part(view)
    for f in part.fields:  # its widgets' keys hold their registered defaults (a page not seeded from a URL, too)
        put_default(f.name)
    lacking = context.trace.lacks(*part.arrays) if context.trace is not None else ()
    if lacking:
        st.info(f"The {view} view needs {', '.join(lacking)} of this layer: {context.trace.meta.get('unavailable')}")
        return None
    try:
        return part.renderer()(context)
    except MixerSizeError as err:  # a hybrid's every layer at once (Overview, Analysis) would not fit
        st.info(f"The {view} view reads every layer of this model at once, which is too large here: {err}.")
        return None


def shown_parts() -> dict[str, str]:
    """The report's notes naming the view shown (and its analysis section) with their help, from the registry."""
    parts = shown(field_value("view"), field_value("section"))
    return dict(zip(("view", "analysis section"), (f"{p.name}: {p.help}" for p in parts), strict=False))


def hide(trace: AttentionTrace, hidden: frozenset[str]) -> AttentionTrace | None:
    """The trace without the hidden tokens (analysis.without_tokens), or None if nothing would be left."""
    if not hidden:
        return trace
    try:
        return without_tokens(trace, hidden)
    except ValueError:
        return None


def layer_payload(source: ModelSource, hidden: frozenset[str]) -> tuple[bytes, list[str], list[str]] | None:
    """Every layer of the Heads view (what heads_figure draws: pooled, the hidden tokens removed) for the renderer to
    switch between (layer_payload.fitting_payload: None when that is more than layer_payload.MAX_BYTES)."""
    def pack() -> tuple[bytes, list[str], list[str]] | None:
        traces = [hide(t, hidden) or t for t in (source.trace(i) for i in range(source.num_layers))]
        return fitting_payload(traces)

    return source.memo(("layer payload", hidden), pack)


# The render functions of the parts mha_viz/ui/parts/views/heads.py, lines.py, overview.py, shapes.py, training.py.

def heads(c: ViewContext) -> None:
    if c.long is not None:
        views.long_heads_view(c.long, c.name, c.source.long_trace)
    elif c.accuracy is None:
        views.heads_view(c.drawn, c.name, grid_drawn=c.grid_drawn)
    else:
        narrow = is_narrow()  # the accuracy chart needs ~200 px beside the heads, else it goes under them
        left, right = (st.container(), st.container()) if narrow else st.columns([3, 1])
        with left:
            views.heads_view(c.drawn, c.name, width=None if narrow else column_width(0.75))
        with right:
            c.accuracy()


def lines(c: ViewContext) -> None:
    if c.trace.mixes:
        st.info(f"Lines draw softmax weights as opacities, each a share of its row. A {c.trace.meta['mixer']} layer's "
                "mixing matrix is signed and its rows do not sum to 1, so it has no lines here: Heads and Overview "
                "draw it on a scale centred at 0.")
        return
    views.lines_view(c.drawn, c.name)


def layer_windows(source: ModelSource) -> list[int | None]:
    """Each layer's sliding window (None: full attention), from its trace, for the overview's row labels."""
    return source.memo("layer windows", lambda: [source.trace(i).meta.get("window") for i in range(source.num_layers)])


def overview_attentions(source: ModelSource, trace: AttentionTrace) -> np.ndarray:
    """[L, H, T, S] for the overview: the model's own attention weights, or for differential attention (whose own
    are the two softmax maps of each head) every layer's signed weights map1 - lambda * map2."""
    if trace.lambdas is None:
        return source.attentions()
    return source.memo("signed weights", lambda: np.stack([source.trace(i).weights for i in range(source.num_layers)]))


def overview(c: ViewContext) -> None:
    views.overview_view(overview_attentions(c.source, c.trace), c.drawn, c.layer, c.name,
                        windows=layer_windows(c.source), marks=layer_marks(c.source.layer_kinds) if capable(c.source, "hybrid") else None)


def shapes(c: ViewContext) -> None:
    views.cost_view(c.cfg, *c.sizes(), cross=c.trace.cross)
    variant = getattr(c.source, "variant", None)
    if variant is not None and variant.shape(c.cfg).variant not in ("mha", "gqa"):  # not MHA's shapes above
        variant_parameters(c.cfg, variant)
    variants_cost_view(c.cfg, variant)


def training(c: ViewContext) -> AttentionTrace | None:
    s = c.state
    variant = LayerVariant.of(s)
    return training_page(s.h, s.d_model, s.steps, s.seed, s.task, variant, s.diversity)
