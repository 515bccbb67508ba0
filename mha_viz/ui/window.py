"""The Window & sinks view (configurable mode, the window variant): the band of keys each query sees, the mass each
head gives its sink, and what a token reaches after L stacked windowed layers."""

from __future__ import annotations

import numpy as np
import streamlit as st

from ..analysis.reach import reach, reach_back
from ..figures.window import band_figure, reach_back_figure, reach_figure, sink_mass_figure
from ..parts import bounds
from ..trace import AttentionTrace
from ..variants.window import visible_keys
from .style import page_width
from .view_parts import ViewContext
from .views import chart

SINKS_EXPLAINED = (
    "**Why does every token attend to the first one?** A softmax row must sum to 1, so a head with nothing useful to "
    "read still has to put its attention somewhere. Trained models learn to park it on the first token, which every "
    "query can see: an *attention sink* (Xiao et al. 2023, StreamingLLM). A sliding-window cache that drops that "
    "token breaks the model; keeping the first 4 tokens visible (sinks = first tokens) fixes it. gpt-oss gives each "
    "head a learned *sink logit* instead (sinks = logit): one more entry in every softmax with no value behind it, "
    "dropped afterwards, so a head can attend to nothing and its rows sum to less than 1. The weights here are random, "
    "so the sink mass shows each head's random logit against its scores; in trained models it is large."
)


def sink_mass(trace: AttentionTrace, sink_tokens: int) -> tuple[np.ndarray, str, str]:
    """[H, T] mass each head puts on its sink per query, a title and the colour bar's name: the sink logit's share
    (1 - row sum), the weights on the sink tokens, or (no sinks) the weights on the first key."""
    if trace.sink_mass is not None:
        return trace.sink_mass, "Sink mass: the share of each query's softmax its head's sink logit takes", "sink"
    first = min(sink_tokens or 1, trace.weights.shape[-1])
    if sink_tokens:
        title = f"Attention on the first {first} tokens (the sink tokens), per head and query"
        return trace.weights[..., :first].sum(-1), title, "on sinks"
    return trace.weights[..., 0], "Attention on the first token, per head and query (no sinks kept)", "on token 0"


def render(c: ViewContext) -> None:
    trace = c.trace
    window, sink_tokens = int(trace.meta.get("window", 1)), int(trace.meta.get("sink_tokens", 0))
    T, S = trace.weights.shape[1:]
    width = page_width()
    in_window = visible_keys(T, S, window, causal=trace.causal).numpy()  # (T, S)
    kept = visible_keys(T, S, window, causal=trace.causal, sink_tokens=sink_tokens).numpy() & ~in_window  # (T, S)
    st.caption(f"Each query sees the keys fewer than {window} positions away"
               + (f": itself and the {window - 1} before it (causal)." if trace.causal else ", on both sides.")
               + (f" The first {sink_tokens} tokens stay visible to every query." if sink_tokens else "")
               + (" A query past the end of the shorter second sentence sees no key: it attends to nothing."
                  if trace.cross and (~(in_window | kept)).all(-1).any() else ""))
    chart(band_figure(in_window, kept, trace.query_tokens, trace.key_tokens, width=width), "window_band",
          f"{c.name}-window")

    mass, title, bar = sink_mass(trace, sink_tokens)
    chart(sink_mass_figure(mass, trace.query_tokens, title=title, colorbar=bar, width=width), "sink_mass",
          f"{c.name}-sink-mass")
    means = ", ".join(f"head {h}: {m:.2f}" for h, m in enumerate(mass.mean(1)))
    st.caption(f"Mean per head: {means}.")
    st.markdown(SINKS_EXPLAINED)

    st.subheader("What a token reaches through L layers")
    layers = st.slider("Layers L", *bounds("reach_layers"), key="reach_layers",
                       help="Stack L self-attention layers with this window: position i holds information from token j "
                       "when a chain of visible keys leads from j to i, one step a layer.")
    n = len(trace.query_tokens)
    R = reach(n, window, layers, causal=trace.causal, sink_tokens=sink_tokens)  # (n, n)
    back = reach_back(window, layers)
    st.caption(f"One layer lets a token read {window - 1} tokens back; {layers} layers reach {layers} · ({window} − 1) "
               f"= {back} tokens back" + ("" if trace.causal else ", and as many ahead (no causal mask)")
               + (", plus the sink tokens at any distance." if sink_tokens else ".")
               + (" Reach stacks self-attention layers, so it is drawn over the query tokens." if trace.cross else ""))
    chart(reach_figure(R, trace.query_tokens, layers, width=width), "window_reach", f"{c.name}-reach")
    counts = list(range(1, int(bounds("reach_layers")[1]) + 1))
    chart(reach_back_figure(counts, np.array([reach_back(window, L) for L in counts]), window=window,
                            chosen=layers, width=width),
          "window_reach_back", f"{c.name}-reach-back")
