"""The Latent (MLA) view: what a multi-head latent attention layer caches per token, how one head rebuilds its keys
and values from it, the cache beside MHA's, and why the rotary part of the key is kept apart."""

from __future__ import annotations

import numpy as np
import streamlit as st

from ..figures.cost import kv_cache_figure
from ..figures.latent import latent_cache_figure, rebuilt_kv_figure, up_projections_figure
from ..trace import AttentionTrace
from ..variants.latent import absorbed_scores
from .state import put
from .state import value as field_value
from .style import is_narrow, page_width
from .view_parts import ViewContext
from .views import chart

CONTEXTS = (8_192, 131_072)  # long contexts beside this text, for the cache bars
BYTES = 2  # a cached number in bf16


def _head(num_heads: int) -> int:
    """The head picker (the page's `head` field), a head this layer has."""
    if field_value("head") >= num_heads:
        put("head", 0)
    return st.selectbox("Head", list(range(num_heads)), key="head", format_func=lambda h: f"head {h}")


def _cache(trace: AttentionTrace, latent: np.ndarray, r: int) -> None:
    """Numbers cached per token, MLA beside MHA with the same h and query/key and value widths, as bars."""
    H, S = trace.num_heads, latent.shape[0]
    ours = latent.shape[1] + r
    mha = H * (trace.d_k + trace.d_v)  # keys as wide as MLA's queries: r + d_k
    st.markdown(f"**The cache per token:** {latent.shape[1]} latent + {r} rotary = **{ours} numbers**, where MHA with "
                f"the same {H} heads and widths caches a key and a value per head: h·(d_k + r + d_v) = {H}·("
                f"{trace.d_k - r} + {r} + {trace.d_v}) = **{mha}** ({ours / mha:.3g}×; in bf16 {ours * BYTES} against "
                f"{mha * BYTES} bytes a token and layer).")
    tokens = (1, S, *CONTEXTS)
    labels = ["one token", f"this text ({S} tokens)", *(f"{n:,} tokens" for n in CONTEXTS)]
    fig = kv_cache_figure(labels, np.array([n * ours * BYTES for n in tokens]),
                          np.array([n * mha * BYTES for n in tokens]), context=S,
                          title="One layer's cache (bf16): MLA (variant) beside MHA", width=page_width())
    chart(fig, "mla_cache", "mla-cache")


def _why_rope_apart(trace: AttentionTrace, r: int) -> None:
    """The absorption argument, with this input's numbers where the trace carries W_UK."""
    st.markdown(
        "**Why the rotary part is kept apart.** Without positions, head h's score needs no key at all: "
        "q_nope·k_nope = q_nope·(c W_UK) = (q_nope W_UKᵀ)·c, so at decoding W_UK is folded into the query (the "
        "absorbed W_UKᵀ W_Q; W_UV likewise into W_O) and "
        "every head reads the cached latent c directly. Rotary positions turn the query by its position i and the "
        "key by j: (R_i q)·(R_j k) = q·R_(j−i) k. That rotation sits *between* the query and the latent and "
        "changes with i − j, so no one fixed matrix W_UKᵀ W_Q can absorb it. DeepSeek therefore gives positions a "
        f"separate small key part, k_rope ({r} dims here), rotated once, shared by every head and cached beside "
        "the latent: score = scale · (q_rope·k_rope + (q_nope W_UKᵀ)·c)."
        if r else
        "**Why a rotary part is kept apart (none here, rope_dim = 0).** Without positions, q_nope·k_nope = (q_nope W_UKᵀ)·c: W_UK "
        "is folded into the query and every head reads the cached latent directly. Rotary positions would put "
        "a rotation R_(j−i) between the query and the latent, which no fixed matrix can absorb, so MLA keeps a "
        "separate rotated key part (rope_dim) beside the latent. With rope_dim = 0 the scores do not see positions.")
    if "W_UK" in trace.meta:
        nope = trace.scores / trace.score_scale - trace.queries[..., :r] @ trace.keys[..., :r].transpose(0, 2, 1)
        visible = np.isfinite(trace.scores)
        gap = float(np.abs(absorbed_scores(trace) - nope)[visible].max(initial=0.0))
        st.caption(f"Checked on this input: the absorbed (q_nope W_UK[h]ᵀ)·c equals the scores' position-free part "
                   f"q_nope·k_nope of every head within {gap:.1e}.")


def render(c: ViewContext) -> None:
    trace = c.trace
    latent, k_rope = trace.meta.get("kv_latent"), trace.meta.get("k_rope")
    if latent is None or k_rope is None:
        st.info("This layer is not multi-head latent attention: there is no latent to show.")
        return
    r = k_rope.shape[1]
    compact = is_narrow()
    st.caption(f"What the cache holds for each of the {len(trace.key_tokens)} key tokens: one latent c_KV of "
               f"{latent.shape[1]} numbers (after its RMSNorm) and the rotated key part k_rope of {r} numbers that "
               "every head shares. Keys and values are not cached: each head rebuilds them from c_KV.")
    chart(latent_cache_figure(latent, k_rope, trace.key_tokens, compact=compact), "mla_latent", f"{c.name}-latent")
    head = _head(trace.num_heads)
    if "W_UK" in trace.meta:
        W_UK, W_UV = trace.meta["W_UK"][head], trace.meta["W_UV"][head]  # (d_c, d_k), (d_c, d_v)
        st.caption(f"Head {head}'s up-projections: row i is what latent dimension i adds to each of its key and "
                   "value dimensions.")
        chart(up_projections_figure(W_UK, W_UV, head, compact=compact), "mla_up", f"{c.name}-head{head}-W_UK-W_UV")
        keys = np.concatenate((k_rope, latent @ W_UK), axis=1)  # (S, r + d_k)
        values = latent @ W_UV  # (S, d_v)
        gap = max(float(np.abs(keys - trace.keys[head]).max()), float(np.abs(values - trace.values[head]).max()))
        note = f" They equal the keys and values the head attended with within {gap:.1e}."
    else:  # a real model's trace: its kv_b_proj rebuilt them (its adapter checks that)
        keys, values, note = trace.keys[head], trace.values[head], ""
    st.caption(f"Head {head}'s keys and values rebuilt from the cache: K = [k_rope | c_KV W_UK] (the rotary dims "
               "left of the line, the same in every head) and V = c_KV W_UV." + note)
    chart(rebuilt_kv_figure(keys, values, r, trace.key_tokens, head, compact=compact), "mla_kv",
          f"{c.name}-head{head}-K-V")
    _cache(trace, latent, r)
    _why_rope_apart(trace, r)
