"""The variants' common ground: LayerVariant (a variant and its parameters), the registry of variant layers, and
variant_layer(). The variant modules import this module, and the package imports them (so they register)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ..config import MHAConfig, divisors
from ..limits import MAX_VARIANT_WIDTH as MAX_WIDTH  # the largest kv_latent, q_latent and rope_dim
from ..names import SINK_KINDS as SINKS  # no sink; a learned sink logit per head (gpt-oss); the first SINK_TOKENS
from ..names import VARIANT_KINDS as KINDS
from ..variants_cost import VariantShape

NAMES = {"mha": "MHA", "gqa": "GQA", "mla": "MLA", "window": "Window", "diff": "Diff", "moh": "MoH"}
SINK_TOKENS = 4  # StreamingLLM keeps the first four tokens of the context visible to every query

# kind -> the parameters it reads (the others are reset to their defaults, so equal layers compare equal)
PARAMETERS = {"mha": (), "gqa": ("kv_heads",), "mla": ("kv_latent", "q_latent", "rope_dim"),
              "window": ("window", "sinks"), "diff": (), "moh": ("moh_k", "moh_shared")}


@dataclass(frozen=True)
class LayerVariant:
    """Which attention variant a configurable layer computes, with its own parameters (URL names as the app's).

    kv_heads    gqa: key/value heads, a divisor of h (1: multi-query attention)
    kv_latent   mla: width of the latent cached per token, from which every head's K and V are up-projected
    q_latent    mla: width of the query latent (0: queries projected directly from x)
    rope_dim    mla: decoupled rotary dims per head (even), in a key part shared by all heads
    window      window: a query sees the keys |i - j| < window (with causal: itself and the window - 1 before it)
    sinks       window: "none", "logit" (a learned logit per head in each softmax, gpt-oss) or "tokens" (the first
                SINK_TOKENS tokens stay visible, StreamingLLM)
    moh_k       moh: routed heads each token uses (its top-k by router score)
    moh_shared  moh: heads every token uses (the first moh_shared heads)
    """

    kind: str = "mha"
    kv_heads: int = 1
    kv_latent: int = 16
    q_latent: int = 0
    rope_dim: int = 4
    window: int = 4
    sinks: str = "logit"
    moh_k: int = 2
    moh_shared: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"variant must be one of {', '.join(KINDS)}, got {self.kind!r}")
        defaults = LayerVariant.__dataclass_fields__
        for f in fields(self):
            if f.name != "kind" and f.name not in PARAMETERS[self.kind]:
                object.__setattr__(self, f.name, defaults[f.name].default)
        if self.sinks not in SINKS:
            raise ValueError(f"sinks must be one of {', '.join(SINKS)}, got {self.sinks!r}")
        for name, lo in (("kv_heads", 1), ("kv_latent", 1), ("q_latent", 0), ("rope_dim", 0), ("window", 1),
                         ("moh_k", 1), ("moh_shared", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"{name} must be a whole number ≥ {lo}, got {value!r}")
        for name in ("kv_latent", "q_latent", "rope_dim"):
            if getattr(self, name) > MAX_WIDTH:
                raise ValueError(f"{name} must be at most {MAX_WIDTH}, got {getattr(self, name)}")
        if self.rope_dim % 2:
            raise ValueError(f"rope_dim must be even (rotary positions turn pairs of dims), got {self.rope_dim}")

    def check(self, cfg: MHAConfig) -> None:
        """ValueError saying why this variant cannot run with these dimensions (nothing when it can)."""
        h = cfg.num_heads
        if self.kind == "gqa" and h % self.kv_heads:
            raise ValueError(f"kv_heads = {self.kv_heads} does not divide h = {h}: each key/value head must serve the "
                             f"same number of query heads. Valid kv_heads: {', '.join(map(str, divisors(h)))}.")
        if self.kind == "diff" and h % 2:
            raise ValueError(f"differential attention pairs heads (two softmax maps a head): h must be even, got {h}")
        if self.kind == "moh" and self.moh_shared >= h:
            raise ValueError(f"moh_shared = {self.moh_shared} leaves no head to route: it must be below h = {h}")
        if self.kind == "moh" and self.moh_k > h - self.moh_shared:
            raise ValueError(f"moh_k = {self.moh_k} is more than the {h - self.moh_shared} routed heads "
                             f"(h - moh_shared): each token picks its top-k among them")

    def config(self, cfg: MHAConfig) -> MHAConfig:
        """cfg with this variant's key/value heads (gqa: kv_heads; every other kind: one K/V head per query head)."""
        self.check(cfg)
        return replace(cfg, kv_heads=self.kv_heads if self.kind == "gqa" else None)

    def shape(self, cfg: MHAConfig) -> VariantShape:
        """The layer of this variant with cfg's sizes, as Shapes & cost prices it (mha_viz.variants_cost)."""
        cfg = self.config(cfg)
        common = dict(head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias)
        if self.kind == "gqa" and cfg.kv_heads < cfg.num_heads:
            return VariantShape("gqa", cfg.d_model, cfg.num_heads, kv_heads=cfg.kv_heads, **common)
        extra = {"mla": dict(kv_latent=self.kv_latent, q_latent=self.q_latent, rope_dim=self.rope_dim),
                 "window": dict(window=self.window, sink_logits=self.sinks == "logit",
                                sink_tokens=SINK_TOKENS if self.sinks == "tokens" else 0),
                 "moh": dict(moh_k=self.moh_k, moh_shared=self.moh_shared)}.get(self.kind, {})
        kind = "mha" if self.kind == "gqa" else self.kind
        return VariantShape(kind, cfg.d_model, cfg.num_heads, **extra, **common)

    def params(self) -> dict[str, Any]:
        """The parameters this kind reads, by name."""
        return {name: getattr(self, name) for name in PARAMETERS[self.kind]}


Builder = Callable[..., nn.Module]
Describer = Callable[[MHAConfig, LayerVariant], str]
LAYERS: dict[str, Builder] = {}
DESCRIPTIONS: dict[str, Describer] = {}


def register_layer(kind: str, build: Builder, describe: Describer) -> Builder:
    """Register the layer class (or function) that builds `kind`: build(cfg, variant, *, seed, dtype), and what it
    computes in a sentence or two for these dimensions: describe(cfg, variant) (the app's caption above the views)."""
    if kind not in KINDS:
        raise ValueError(f"unknown variant {kind!r}: add it to mha_viz.names.VARIANT_KINDS and PARAMETERS first")
    LAYERS[kind] = build
    DESCRIPTIONS[kind] = describe
    return build


def describe(cfg: MHAConfig, variant: LayerVariant) -> str:
    """What the layer of this variant computes, in words, for these dimensions."""
    return DESCRIPTIONS[variant.kind](variant.config(cfg), variant)


def _multi_head(cfg: MHAConfig, variant: LayerVariant, *, seed: int | None = None,
                dtype: torch.dtype = torch.float32) -> MultiHeadAttention:
    return MultiHeadAttention(cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out,
                              d_context=cfg.d_context, bias=cfg.bias, kv_heads=cfg.kv_heads, seed=seed, dtype=dtype)


def _heads_share(cfg: MHAConfig, variant: LayerVariant) -> str:
    """Which query heads read which key/value head, in words."""
    n, G = cfg.group_size, cfg.kv_heads
    if G == cfg.num_heads:
        return ("Multi-head attention: every head has its own queries, keys and values; the concatenation of the "
                "heads' outputs goes through W_O.")
    if G == 1:
        return (f"Multi-query attention: all {cfg.num_heads} query heads read the same keys and values (one K/V head); "
                "each head still has its own queries, so its own attention map. Concat → W_O is unchanged.")
    groups = "; ".join(f"heads {g * n}–{g * n + n - 1} read K/V head {g}" for g in range(G))
    return (f"Grouped-query attention: {cfg.num_heads} query heads share {G} key/value heads, {n} query heads a "
            f"group: {groups}. Each heatmap's title names its K/V head. Concat → W_O is unchanged: one output block "
            "per query head.")


register_layer("mha", _multi_head, _heads_share)
register_layer("gqa", _multi_head, _heads_share)


def variant_layer(cfg: MHAConfig, variant: LayerVariant = LayerVariant(), *, seed: int | None = None,
                  dtype: torch.dtype = torch.float32) -> nn.Module:
    """The layer of this variant with these dimensions, seeded weights; ValueError when they do not fit."""
    cfg = variant.config(cfg)
    build = LAYERS.get(variant.kind)
    if build is None:
        raise ValueError(f"the {variant.kind} variant is not built yet")
    return build(cfg, variant, seed=seed, dtype=dtype)
