"""The baseline: multi-head attention (kind "mha") and grouped-query attention (kind "gqa": kv_heads < h key/value
heads, each read by h / kv_heads query heads; 1 is multi-query attention), both MultiHeadAttention."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..attention import MultiHeadAttention
from ..config import MHAConfig, divisors, nearest_divisor
from ..fields import whole
from ..limits import MAX_HEADS
from ..parts import StateField
from ..variants_cost import VariantShape
from .base import LayerVariant
from .spec import Control, Training, Values, VariantSpec, register, whole_number


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


def _shape(cfg: MHAConfig, variant: LayerVariant) -> VariantShape:
    """cfg after LayerVariant.config: grouped when it has fewer key/value heads than query heads."""
    common: dict[str, Any] = dict(head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias)
    if cfg.kv_heads < cfg.num_heads:
        return VariantShape("gqa", cfg.d_model, cfg.num_heads, kv_heads=cfg.kv_heads, **common)
    return VariantShape("mha", cfg.d_model, cfg.num_heads, **common)


register(VariantSpec(
    "mha", "MHA", _multi_head, _heads_share, _shape,
    Training(lambda v, h: "MHA", grid=lambda h: (LayerVariant(),), colour="#1f77b4"), long=True,
    title=lambda cfg, v: f"Multi-head attention: h = {cfg.num_heads}", stem=lambda cfg, v: "",
    help="MHA: every head has its own keys and values."))


def _check_groups(cfg: MHAConfig, variant: LayerVariant) -> None:
    h = cfg.num_heads
    if h % variant.kv_heads:
        raise ValueError(f"kv_heads = {variant.kv_heads} does not divide h = {h}: each key/value head must serve the "
                         f"same number of query heads. Valid kv_heads: {', '.join(map(str, divisors(h)))}.")


def kv_heads_label(h: int) -> Callable[[int], str]:
    """How the kv_heads control names each choice for h query heads: 1 is MQA, h is plain MHA."""
    return lambda g: f"{g} (MQA)" if g == 1 else f"{g} (= MHA)" if g == h else str(g)


def _fit_groups(values: Values) -> dict[str, Any]:
    h, kv = values["h"], values["kv_heads"]
    return {"kv_heads": nearest_divisor(h, kv)} if isinstance(h, int) and h >= 1 and h % kv else {}


def _gqa_label(v: LayerVariant, h: int) -> str:
    return "MHA" if v.kv_heads == h else "MQA" if v.kv_heads == 1 else f"GQA kv={v.kv_heads}"


KV_HEADS = Control(
    "kv_heads", "Key/value heads kv_heads", "radio", options=lambda v: divisors(v["h"]),
    labels=lambda v: kv_heads_label(v["h"]),
    help=lambda v: (f"The {v['h']} query heads are split into kv_heads groups of h / kv_heads; each group reads one "
                    "key/value head. kv_heads must divide h. 1 is multi-query attention (MQA), h is multi-head "
                    "attention."))

register(VariantSpec(
    "gqa", "GQA", _multi_head, _heads_share, _shape,
    Training(_gqa_label, colour="#17becf", legend="GQA / MQA",
             grid=lambda h: [LayerVariant("gqa", kv_heads=g) for g in sorted(divisors(h), reverse=True) if g < h]),
    fields=(StateField("kv_heads", 1, lambda r: whole(r, 1, MAX_HEADS),
                       f"a number of key/value heads from 1 to {MAX_HEADS} that divides h"),),
    validate=lambda p: whole_number("kv_heads", p["kv_heads"], 1),
    check=_check_groups,
    kv_heads=lambda v: v.kv_heads, long=True,
    title=lambda cfg, v: f"Grouped-query attention: h = {cfg.num_heads}, kv_heads = {cfg.kv_heads}",
    stem=lambda cfg, v: f"-kv{cfg.kv_heads}",
    controls=(KV_HEADS,),
    fit=_fit_groups,
    unfit=lambda v: (None if v["kv_heads"] in divisors(v["h"]) else f"kv_heads = {v['kv_heads']} (from the link) "
                     f"does not divide h = {v['h']}: pick a valid kv_heads on the page."),
    notice=lambda old, new: (f"kv_heads = {old['kv_heads']} does not divide h = {old['h']}, so kv_heads is now "
                             f"{new['kv_heads']} ({old['h'] // new['kv_heads']} query heads per key/value head)."),
    example={"kv_heads": "2"},
    help="GQA (Llama 3, Qwen3, Mistral): groups of query heads share one key/value head (1 is MQA)."))
