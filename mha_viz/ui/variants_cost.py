"""Shapes & cost, second part: an attention variant of the page's layer and six real models (one a hybrid), each beside MHA
(mha_viz.variants_cost), as a table and a bar chart of the KV cache for a context length."""

from __future__ import annotations

import numpy as np
import streamlit as st

from ..config import MHAConfig
from ..figures.cost import kv_cache_figure
from ..params import SINKS
from ..parts import bounds
from ..variants import NAMES as LAYER_NAMES
from ..variants import SINK_TOKENS, LayerVariant
from ..variants_cost import PRESETS, VARIANT_NAMES, VARIANTS, CostRow, VariantShape, comparison, parameters, preset_rows
from .parts.views.shapes import CONTEXTS
from .state import fit
from .state import value as field_value
from .style import page_width
from .views import chart

SINK_NAMES = {"none": "no sinks", "logit": "a learned sink logit per head (gpt-oss)",
              "tokens": f"keep the first {SINK_TOKENS} tokens (StreamingLLM)"}


def _keep_valid(key: str, options: list[int], what: str) -> None:
    """A value (from a link) that no option offers moves to the nearest one, and the page says so."""
    value = field_value(key)
    if value not in options:
        new = min(options, key=lambda o: (abs(o - value) if isinstance(value, int) else 0, o))
        fit(key, new, f"{what}: one of {', '.join(map(str, options))} here")


def _variant_shape(cfg: MHAConfig) -> VariantShape | None:
    """The page's layer as the picked variant, with that variant's controls; None (and why) when this h cannot."""
    d, h = cfg.d_model, cfg.num_heads
    variant = st.segmented_control("Variant", VARIANTS, key="cost_variant", required=True,
                                   format_func=lambda v: VARIANT_NAMES[v])
    common = dict(head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias)
    if variant == "mha":
        return VariantShape("mha", d, h, **common)
    if variant == "mla":
        cols = st.columns(3)
        with cols[0]:
            latent = st.number_input("KV latent width (cached)", *bounds("cost_kv_latent"), key="cost_kv_latent")
        with cols[1]:
            q_latent = st.number_input("Query latent width (0: none)", *bounds("cost_q_latent"), key="cost_q_latent")
        with cols[2]:
            rope = st.number_input("Rotary dimensions (decoupled)", *bounds("cost_rope_dim"), key="cost_rope_dim")
        st.caption("Keys and values are rebuilt per head from one cached latent; the rotary part of the key is cached "
                   "apart because the absorbed W_UKᵀ W_Q cannot carry a position-dependent rotation.")
        return VariantShape("mla", d, h, kv_latent=latent, q_latent=q_latent, rope_dim=rope, **common)
    if variant == "moh":
        _keep_valid("cost_moh_k", list(range(1, h + 1)), "moh_k")
        k = st.slider("Heads each token uses (top-k of h)", 1, h, key="cost_moh_k") if h > 1 else 1
        st.caption("The router scores every head per token; only the top-k heads' queries, scores and outputs are "
                   "computed, but every head's keys and values are cached, since any later token may pick any head.")
        return VariantShape("moh", d, h, moh_k=k, **common)
    even = variant == "diff"
    kv_options = [g for g in range(1, h + 1) if h % g == 0 and (not even or g % 2 == 0)
                  and (variant != "gqa" or g < h)]
    if not kv_options:
        st.info(f"With h = {h}: " + ("differential attention pairs heads into two maps, so it needs an even h."
                                     if even else "grouped-query attention shares K/V heads, so it needs h ≥ 2.")
                + " Pick another h on the left or another variant.")
        return None
    _keep_valid("cost_kv_heads", kv_options, "kv_heads")
    kv = st.radio("Key/value heads (1 is multi-query attention)", kv_options, key="cost_kv_heads", horizontal=True)
    if variant == "gqa":
        return VariantShape("gqa", d, h, kv_heads=kv, **common)
    if variant == "diff":
        st.caption(f"The {h} maps pair into {h // 2} differential heads: softmax(Q₁K₁ᵀ) - λ·softmax(Q₂K₂ᵀ), "
                   "λ from four learned vectors.")
        return VariantShape("diff", d, h, kv_heads=kv, **common)
    cols = st.columns(2)
    with cols[0]:
        window = st.number_input("Window (tokens a query reaches)", *bounds("cost_window"), key="cost_window")
    with cols[1]:
        sinks = st.radio("Sinks", SINKS, key="cost_sinks", format_func=lambda s: SINK_NAMES[s])
    return VariantShape("window", d, h, kv_heads=kv, window=window,
                        sink_logits=sinks == "logit", sink_tokens=SINK_TOKENS if sinks == "tokens" else 0, **common)


def variant_parameters(cfg: MHAConfig, variant: LayerVariant) -> None:
    """The page's variant layer's own parameters, block by block (the shapes above are classic MHA's)."""
    counts = parameters(variant.shape(cfg))
    st.subheader(f"This {LAYER_NAMES[variant.kind]} layer's parameters")
    st.caption(f"The shapes above are classic MHA's with these sizes; the {LAYER_NAMES[variant.kind]} layer the page "
               f"computes has {sum(counts.values()):,} parameters, block by block (the same count as its torch module):")
    st.table({"block": list(counts), "parameters": [f"{n:,}" for n in counts.values()]})


def _cells(table: dict[str, list]) -> dict[str, list[str]]:
    whole = ("parameters / layer", "MHA parameters / layer", "FLOPs / token / layer", "MHA FLOPs / token / layer",
             "KV bytes / token / layer", "MHA KV bytes / token / layer")
    shown = {k: v for k, v in table.items() if k not in ("cache bytes", "MHA cache bytes")}
    shown |= {k: [f"{n:,}" for n in shown[k]] for k in whole}
    shown["MHA / variant cache"] = [f"{r:.3g}×" for r in table["MHA / variant cache"]]
    return shown


def variants_cost_view(cfg: MHAConfig, variant: LayerVariant | None = None) -> None:
    """The variants beside MHA; variant: the page's own layer's (its row comes first when it is not plain MHA)."""
    st.subheader("Attention variants beside MHA")
    st.caption("Each row: a variant's layer and classic MHA with the same d_model, h and head widths. FLOPs are for one "
               "new token reading the context; the KV cache is bf16 (2 bytes a number), for every layer of the model. A "
               "hybrid's linear-attention layers keep no KV cache but a state of fixed size (also bf16), the same at "
               "every context: it is counted in its cache.")
    own = None if variant is None or variant.kind == "mha" else variant.shape(cfg)
    if own is not None:
        st.caption(f"The first row is the page's own layer ({LAYER_NAMES[variant.kind]}); pick another variant to "
                   "price it beside it.")
    shape = _variant_shape(cfg)
    context = st.select_slider("Context length (tokens)", CONTEXTS, key="cost_context",
                               format_func=lambda n: f"{n:,}")
    rows = [] if own is None else [CostRow(f"the page's layer ({LAYER_NAMES[variant.kind]})", own)]
    rows += ([CostRow(f"this layer (d_model {cfg.d_model}, h {cfg.num_heads})", shape)] if shape is not None else [])
    rows += preset_rows()
    table = comparison(rows, context)
    st.table(_cells(table))
    chart(kv_cache_figure(table["model"], np.array(table["cache bytes"], dtype=np.float64),
                          np.array(table["MHA cache bytes"], dtype=np.float64), context=context, width=page_width()),
          "kv_cache", "kv-cache")
    with st.expander("Where the presets' numbers come from"):
        st.markdown("\n".join(f"- **{p.name}**: {p.source}" for p in PRESETS.values()))
