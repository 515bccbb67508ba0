"""Sliding-window attention with sinks (Mistral, Gemma 2, gpt-oss; StreamingLLM).

    visible(i, j) = |i - j| < window                  (with causal also j <= i: the query and the window - 1 before it)
    sinks "logit":  weights = softmax([scores | sink_h])[:, :S]   one learned logit per head joins every row's softmax
                    and is dropped, so a head can put mass on "nothing" (gpt-oss); a row sums to 1 - sink mass
    sinks "tokens": the first SINK_TOKENS keys stay visible to every query (still j <= i with causal), as StreamingLLM
                    keeps them in its cache
    sinks "none":   the window alone

A query with no visible key (cross-attention past the end of a shorter context, sinks "none") attends to nothing:
its weights and head output are 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import Attended, MultiHeadAttention, Variations, causal_mask, window_mask
from ..config import MHAConfig
from ..fields import choice, ranged
from ..limits import MAX_WINDOW
from ..names import SINK_KINDS
from ..trace import AttentionTrace
from ..variants_cost import VariantShape
from .base import SINK_TOKENS, LayerVariant
from .spec import Control, Training, Values, VariantSpec, register, whole_number


def visible_keys(T: int, S: int, window: int, *, causal: bool = False, sink_tokens: int = 0,
                 device: torch.device | None = None) -> Tensor:
    """(T, S) bool, True where query i sees key j: inside the window (and j <= i with causal), or among the first
    sink_tokens keys (j <= i still holds with causal)."""
    hidden = window_mask(T, S, window, device)  # (T, S)
    if sink_tokens:
        hidden = hidden & (torch.arange(S, device=device) >= sink_tokens)[None, :]  # (T, S)
    if causal:
        hidden = hidden | causal_mask(T, S, device)  # (T, S)
    return ~hidden


class WindowAttention(MultiHeadAttention):
    """Multi-head attention within a sliding window of `variant.window` keys, with `variant.sinks` sinks.

    sinks: a parameter (H,) with sinks "logit" (seeded normal init), else None.
    """

    def __init__(self, cfg: MHAConfig, variant: LayerVariant, *, seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out,
                         d_context=cfg.d_context, bias=cfg.bias, kv_heads=cfg.kv_heads, seed=seed, dtype=dtype)
        self.window = variant.window
        self.sink_kind = variant.sinks
        self.sink_tokens = SINK_TOKENS if variant.sinks == "tokens" else 0
        if variant.sinks == "logit":
            gen = torch.Generator().manual_seed(seed + 1) if seed is not None else None  # apart from W_Q ... W_O
            self.sinks = nn.Parameter(torch.randn(cfg.num_heads, generator=gen, dtype=dtype))
        else:
            self.register_parameter("sinks", None)

    def variations(self, x: Tensor, T: int, S: int, causal: bool) -> Variations:
        """What attend() applies: the window (or, with sink tokens, the mask that keeps them), causal, sink logits."""
        scale = self.config.d_k ** -0.5
        if self.sink_tokens:
            hidden = ~visible_keys(T, S, self.window, sink_tokens=self.sink_tokens, device=x.device)  # (T, S)
            return Variations(scale=scale, mask=hidden, causal=causal)
        return Variations(scale=scale, window=self.window, causal=causal, sinks=self.sinks)

    def attended(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                 head_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Attended, Tensor]:
        """MultiHeadAttention.attended, with a query that sees no key attending to nothing (0, not NaN)."""
        q, k, v, a, _ = super().attended(x, context, causal=causal, head_mask=head_mask)
        T, S = q.shape[-2], k.shape[-2]
        a = _nothing_visible_is_zero(a, visible_keys(T, S, self.window, causal=causal, sink_tokens=self.sink_tokens,
                                                     device=q.device))
        return q, k, v, a, self.project_out(a.concat)

    @torch.no_grad()
    def forward(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                head_mask: Tensor | None = None) -> AttentionTrace:
        """Trace one input, as MultiHeadAttention does, with trace.sinks (sinks "logit") and meta["window"],
        meta["sink_tokens"]."""
        trace = super().forward(x, context, causal=causal, query_tokens=query_tokens, key_tokens=key_tokens,
                                head_mask=head_mask)
        sinks = None if self.sinks is None else self.sinks.detach().cpu().numpy().copy()
        return replace(trace, sinks=sinks, meta={**trace.meta, "variant": "window", "window": self.window,
                                                 "sink_tokens": self.sink_tokens})


def _nothing_visible_is_zero(a: Attended, visible: Tensor) -> Attended:
    """Rows whose query sees no key (softmax over nothing: NaN) set to 0 in the maps, weights and head outputs."""
    empty = ~visible.any(-1)  # (T,)
    if not bool(empty.any()):
        return a
    rows = empty[:, None]  # (T, 1): broadcasts over [..., H, T, S | d_v] and [..., T, H*d_v]
    return a._replace(**{name: getattr(a, name).masked_fill(rows, 0.0)
                         for name in ("weights", "maps", "mixed", "head_outputs", "concat")})


def _describe(cfg: MHAConfig, variant: LayerVariant) -> str:
    w = variant.window
    sinks = {
        "none": "No sinks: every row's weights sum to 1 over the keys in its window.",
        "logit": (f"Each of the {cfg.num_heads} heads has a learned sink logit that joins every row's softmax and is "
                  "then dropped (gpt-oss): a row sums to 1 minus its sink mass, so a head can attend to nothing."),
        "tokens": (f"The first {SINK_TOKENS} tokens stay visible to every query (StreamingLLM's attention sinks), "
                   "beside the window."),
    }[variant.sinks]
    return (f"Sliding-window attention: each query sees the keys fewer than {w} positions away (with the causal "
            f"mask: itself and the {w - 1} before it). {sinks} Stacked, L such layers reach L·(window − 1) tokens "
            "back.")


def _formulas(cfg: MHAConfig, T: int, S: int | None = None, *, causal: bool = False, **params: Any) -> list[str]:
    """LaTeX lines of what this variant changes, with live dimensions (mha_viz.formulas.variant_formulas)."""
    w, sinks = params["window"], params["sinks"]
    near = rf"i - {w} < j \le i" if causal else rf"|i - j| < {w}"
    lines = [(rf"M_{{ij}} = 0 \text{{ if }} {near} \text{{ else }} -\infty \quad \text{{(each query sees at most "
             rf"{w if causal else 2 * w - 1} keys)}}")]
    if sinks == "logit":
        lines.append(r"A_{h,ij} = \frac{e^{s_{h,ij}}}{e^{z_h} + \sum_{j'} e^{s_{h,ij'}}}, \quad \sum_j A_{h,ij} = "
                     r"1 - \frac{e^{z_h}}{e^{z_h} + \sum_{j'} e^{s_{h,ij'}}} \quad \text{(a learned sink logit }"
                     r"z_h\text{ per head)}")
    elif sinks == "tokens":
        lines.append(r"M_{ij} = 0 \text{ also for } j < 4" + (r" \text{ with } j \le i" if causal else "")
                     + r" \quad \text{(the first 4 tokens stay visible: attention sinks, StreamingLLM)}")
    return lines


def _validate(params: Values) -> None:
    whole_number("window", params["window"], 1)
    if params["sinks"] not in SINK_KINDS:
        raise ValueError(f"sinks must be one of {', '.join(SINK_KINDS)}, got {params['sinks']!r}")


def _shape(cfg: MHAConfig, v: LayerVariant) -> VariantShape:
    return VariantShape("window", cfg.d_model, cfg.num_heads, head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias,
                        window=v.window, sink_logits=v.sinks == "logit",
                        sink_tokens=SINK_TOKENS if v.sinks == "tokens" else 0)


SINK_LABELS = {"none": "None", "logit": "Logit per head", "tokens": "First tokens"}

register(VariantSpec(
    "window", "Window", WindowAttention, _describe, _shape,
    Training(lambda v, h: f"Window w={v.window}" + ("" if v.sinks == "none" else f" ({v.sinks} sinks)"),
             grid=lambda h: [LayerVariant("window", window=w, sinks="logit") for w in (2, 4)],
             colour="#9467bd", step_cost=(1.4, 1.0), legend="window"),  # step_cost: the band's mask
    fields=(ranged("window", 4, 1, MAX_WINDOW, "a window from {lo} to {hi} tokens"),
            choice("sinks", "logit", SINK_KINDS)),
    validate=_validate, formulas=_formulas, flag="windowed",
    controls=(
        Control("window", "Window (tokens a query sees)", "slider",
                help="Each query sees the keys fewer than window positions away (with the causal mask: itself and "
                "the window − 1 tokens before it). Mistral: 4096; gpt-oss: 128 on every other layer."),
        Control("sinks", "Sinks", "radio", options=lambda v: SINK_KINDS, labels=lambda v: SINK_LABELS.get,
                help="Logit: each head has one learned logit that joins every softmax and is then dropped, so a head "
                "can attend to 'nothing' (gpt-oss). First tokens: the first 4 tokens stay visible to every query, "
                "as StreamingLLM keeps them.")),
    example={"window": "3", "sinks": "tokens", "causal": "true"},
    help="Window (Mistral, Gemma 2, gpt-oss): each query sees only nearby keys, with sinks that soak up attention."))
