"""The Circuits section: why a head does what it does, from its weights alone (mha_viz.analysis.circuits, drawn).

Every head's copying score (a click opens a head), the open head's singular values of W_QK and W_OV, and its QK or
OV circuit over tokens (or positions). The results are small and kept in the shared cache per model (not per text:
they depend on the weights only); the weights are read at most once a run, when a result is missing, never kept.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np
import streamlit as st

from ..analysis import copying_scores, ov_circuit, qk_circuit, singular_values
from ..analysis.circuits import FULL_VOCAB, TokenCircuit
from ..figures.circuits import copying_figure, singular_values_figure, token_table_figure, top_k_figure
from ..parts import bounds
from ..weights import HeadWeights, head_weights
from .analysis import SectionContext, open_head
from .cache import cached
from .parts.sections.circuits import CIRCUITS
from .state import confine, open_on_best, put
from .state import value as field_value
from .style import column_width, is_narrow, page_width
from .text import plain
from .views import chart, open_head_picker

T = TypeVar("T")
SAMPLE = 32  # rows sampled from a large vocabulary (each keeps its top-k)
CIRCUIT_HELP = {
    "OV": "what the head writes: for each source token it attends to, the output logits its copy raises",
    "QK": "where the head looks: for each query token, which key tokens it scores highest (embeddings alone)",
    "QK positions": "where the head looks by position alone: the learned position embeddings through W_QK",
}


def _kept(source: object, what: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
    """compute() kept in the shared cache per loaded model (the app's CachedModel: `key` names it), as heavy work;
    other sources (a single small layer) compute it at once."""
    key = getattr(source, "key", None)
    if isinstance(key, tuple) and key:
        return cached(("circuits", *what, key, getattr(source, "part", None)), compute,
                      "Reading the heads' weights…", heavy=True)
    return compute()


def render(c: SectionContext) -> None:
    source = c.source
    weights = functools.cache(lambda: head_weights(source))  # read at most once a run, and only on a cache miss
    try:
        info = _kept(source, ("about",), lambda: _about(weights()))
    except (ValueError, TypeError) as err:
        st.info(f"Circuits need the heads' weights: {plain(str(err))}.")
        return
    L, H, embedded, causal_note = info["L"], info["H"], info["embedded"], info["notes"]
    st.caption("A head's circuits, read from its weights alone (Elhage et al. 2021): W_QK = W_Q W_Kᵀ decides where "
               "it looks, W_OV = W_V W_O what it writes. " f"Norms: {plain(info['folded'])}."
               + (" " + " ".join(plain(n) for n in causal_note) if causal_note else ""))
    copying = _kept(source, ("copying",), lambda: copying_scores(weights()))
    if not np.isnan(copying.scores).all() and open_on_best("Circuits", copying.most_copying):
        st.rerun()  # open on the head that copies most (a link that names a head keeps it)
    if field_value("head") >= H:
        put("head", 0)
    layer, head = min(field_value("layer"), L - 1), field_value("head")
    narrow = is_narrow()
    left, right = (st.container(), st.container()) if narrow else st.columns([1, 1])
    with left:
        chart(copying_figure(copying.scores, title="Copying score of every head (share of positive eigenvalues)",
                             width=page_width() if narrow else column_width(0.5)),
              "circuits_copying", f"{c.name}-copying", on_select=lambda: open_head("circuits_copying"))
        if L > 1:
            open_head_picker("_open_head_circuits", L, H)
        else:
            st.selectbox("Open head", list(range(H)), key="head", format_func=lambda h: f"head {h}")
        st.caption(f"Copying score: the share of the eigenvalues of {copying.circuit} with a positive real part "
                   f"(computed from the d_v × d_v matrix {copying.small}, which has the same nonzero eigenvalues). "
                   f"1: the head raises what it reads. Here: {plain(copying.note)}.")
    sv = _kept(source, ("singular values", layer, head), lambda: singular_values(weights(), layer, head))
    with right:
        chart(singular_values_figure(sv.qk, sv.ov, title=f"Layer {layer}, head {head}: singular values",
                                     width=page_width() if narrow else column_width(0.5)),
              "circuits_sv", f"{c.name}-L{layer}H{head}-singular-values")
        st.caption(f"d_model = {sv.d_model}, d_k = {sv.d_k}, d_v = {sv.d_v}: each product has at most "
                   f"{min(sv.d_k, sv.d_model)} (QK) and {min(sv.d_v, sv.d_model)} (OV) nonzero singular values. "
                   f"Copying score of this head: {copying.scores[layer, head]:.3f}.")
    if not embedded:
        st.info("This layer has no token embeddings (its inputs are made up per text), so its circuits exist only "
                "in the residual stream's basis: the singular values above, and the copying score of W_OV itself.")
        return
    options = [k for k in CIRCUITS if k != "QK positions" or info["positions"]]
    confine("circuit", options, "OV")
    a, b = st.columns([3, 1])
    kind = a.radio("Circuit", options, key="circuit", horizontal=True, help="; ".join(
        f"{k}: {v}" for k, v in CIRCUIT_HELP.items() if k in options))
    large = (info["positions"] if kind == "QK positions" else info["vocab"]) > FULL_VOCAB
    k = b.number_input("Top k per row", *bounds("circuit_k"), key="circuit_k", step=1, disabled=not large,
                       help="A large table shows each sampled row's k largest columns.")
    causal = c.trace.causal
    circuit = _kept(source, ("table", layer, head, kind, k if large else None, causal),
                    lambda: _table(weights(), layer, head, kind, k if large else None, causal))
    _draw_table(circuit, kind, c.name)


def _about(w: HeadWeights) -> dict:
    """What the page says about the weights (small: kept instead of the weights)."""
    return {"L": w.num_layers, "H": w.num_heads, "embedded": w.W_E is not None, "folded": w.folded,
            "notes": w.notes, "vocab": 0 if w.W_E is None else w.W_E.shape[0],
            "positions": 0 if w.W_pos is None else w.W_pos.shape[0]}


def _table(w: HeadWeights, layer: int, head: int, kind: str, k: int | None, causal: bool) -> TokenCircuit:
    sample = SAMPLE if k is not None else None
    if kind == "OV":
        return ov_circuit(w, layer, head, top_k=k, sample=sample)
    return qk_circuit(w, layer, head, positional=kind == "QK positions", top_k=k, sample=sample,
                      causal=causal and kind == "QK positions")


def _draw_table(circuit: TokenCircuit, kind: str, name: str) -> None:
    colour = "logit" if circuit.formula.endswith("W_U") else "score" if kind.startswith("QK") else "dot product"
    title = f"Layer {circuit.layer}, head {circuit.head}: {kind} circuit {circuit.formula}"
    width = page_width()
    if circuit.full:
        fig = token_table_figure(circuit.values, circuit.row_labels, circuit.column_vocab, row_axis=circuit.row_axis,
                                 column_axis=circuit.column_axis, colour=colour, title=title, width=width)
    else:
        fig = top_k_figure(circuit.values, circuit.columns, circuit.row_labels, circuit.column_vocab,
                           row_axis=circuit.row_axis, column_axis=circuit.column_axis, colour=colour, title=title,
                           width=width)
    chart(fig, "circuits_table", f"{name}-L{circuit.layer}H{circuit.head}-{kind.replace(' ', '-')}")
    mine = _peaks(circuit) if kind == "QK positions" else _self_share(circuit)
    st.caption(f"Rows: {plain(circuit.sampling)}; " + ("every column." if circuit.full else
               f"each row's {circuit.values.shape[1]} largest columns, largest first.") + mine +
               f" Conventions: {plain(circuit.convention)}.")


def _self_share(circuit: TokenCircuit) -> str:
    share = circuit.top_is_self  # NaN: rows and columns are different things
    return "" if math.isnan(share) else f" In {share:.0%} of the rows the largest entry is the row's own token."


def _peaks(circuit: TokenCircuit) -> str:
    """Where the positional circuit's rows peak: the commonest offset and its share (and the own position's share,
    when that is not the commonest)."""
    peak = circuit.peak_offset()
    said = (f" The rows peak most often at {peak.where} (key − query = {peak.offset:+d}): {peak.share:.1%} of the "
            f"{peak.rows} rows that have one.")
    if peak.offset != 0:
        said += f" {circuit.top_is_self:.1%} of the rows peak at their own position."
    return said
