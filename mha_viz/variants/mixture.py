"""Mixture-of-heads attention (MoH: Jin, Zhu, Yan, Yuan 2024, "MoH: Multi-Head Attention as Head-Routing
Mixture-of-Experts", arXiv:2410.11842).

Multi-head attention is a sum over heads, O_t = sum_i H^i_t W_O^i (W_O^i: head i's column block of W_O). MoH gives
each head a per-token gate, so that a token uses some heads only:

    O_t = sum_i g_{i,t} H^i_t W_O^i + b_O

The first h_s = moh_shared heads are shared (every token uses them); the other h_r = h - h_s are routed:

    g_i = alpha_1 * softmax(W_s x_t)_i       i < h_s                               (softmax over the h_s shared heads)
    g_i = alpha_2 * softmax(W_r x_t)_i       i routed and (W_r x_t)_i is among the top k = moh_k of W_r x_t
    g_i = 0                                  otherwise
    [alpha_1, alpha_2] = softmax(W_h x_t)    how much the token leans on shared vs routed heads

W_s [d_model, h_s], W_r [d_model, h_r], W_h [d_model, 2], no biases; x_t is the query-side token. Where the paper
leaves a choice, this module takes the paper's Eq. (written as above): the routed softmax runs over ALL h_r routed
scores and the top-k picks from it without renormalising (a token's routed gates sum to alpha_2 times the
probability mass of its picked heads, at most alpha_2). With h_s = 0 there are no W_s, W_h and alpha_2 = 1. Each head's
attention map is unchanged; the gate scales its output before the concat (mha_viz.attention.attend, Variations.gates),
so trace.head_outputs are the gated outputs and concat @ W_O^T + b_O is the layer's output. Top-k is not
differentiable, but the gate values are: the router learns through them. load_balance_loss is the paper's L_b.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import MultiHeadAttention, Variations
from ..config import MHAConfig
from ..fields import whole
from ..limits import MAX_HEADS
from ..parts import StateField
from ..trace import AttentionTrace
from ..variants_cost import VariantShape
from .base import LayerVariant
from .spec import Control, Training, Values, VariantSpec, register, whole_number

ROUTER_SEED = 7919  # the router's generator is seeded with seed + ROUTER_SEED: its own stream, not W_Q's


class Routing(NamedTuple):
    """The router's decisions for every token; leading batch dims allowed. Heads in layer order: shared first."""

    scores: Tensor  # (..., H, T) router logits: W_s x_t for the shared heads, W_r x_t for the routed ones
    probs: Tensor  # (..., H, T) softmax within each group: over the shared heads, over the routed heads
    alpha: Tensor  # (..., 2, T) [alpha_1, alpha_2] = softmax(W_h x_t); [0, 1] without shared heads
    picked: Tensor  # (..., H, T) bool: the shared heads and each token's top-k routed heads
    gates: Tensor  # (..., H, T) g_i: alpha_1 * probs (shared), alpha_2 * probs where picked (routed), else 0


class MixtureOfHeads(MultiHeadAttention):
    """Multi-head attention whose heads a per-token router weights (and switches off) before W_O."""

    def __init__(self, cfg: MHAConfig, variant: LayerVariant, *, seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out,
                         d_context=cfg.d_context, bias=cfg.bias, seed=seed, dtype=dtype)
        variant.check(self.config)
        self.moh_k, self.moh_shared = variant.moh_k, variant.moh_shared
        routed, shared = cfg.num_heads - self.moh_shared, self.moh_shared
        self.W_r = nn.Parameter(torch.empty(cfg.d_model, routed, dtype=dtype))
        self.W_s = nn.Parameter(torch.empty(cfg.d_model, shared, dtype=dtype)) if shared else None
        self.W_h = nn.Parameter(torch.empty(cfg.d_model, 2, dtype=dtype)) if shared else None
        self.reset_router(seed)

    @torch.no_grad()
    def reset_router(self, seed: int | None = None) -> None:
        """Xavier-uniform router weights from their own seeded generator (a fresh random seed when seed is None)."""
        gen = torch.Generator()
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(seed + ROUTER_SEED)
        for W in (self.W_r, self.W_s, self.W_h):
            if W is not None:
                bound = math.sqrt(6.0 / (W.shape[0] + W.shape[1]))
                W.copy_(torch.rand(W.shape, generator=gen, dtype=W.dtype) * 2 * bound - bound)

    def route(self, x: Tensor) -> Routing:
        """The gates of every head for every token of x (..., T, d_model)."""
        r = x @ self.W_r  # (..., T, h_r)  W_r x_t
        probs_r = r.softmax(dim=-1)  # (..., T, h_r)  over all routed heads
        top = r.topk(self.moh_k, dim=-1).indices  # (..., T, k)
        picked_r = torch.zeros_like(r, dtype=torch.bool).scatter(-1, top, True)  # (..., T, h_r)
        if self.moh_shared:
            s = x @ self.W_s  # (..., T, h_s)
            probs_s = s.softmax(dim=-1)  # (..., T, h_s)
            alpha = (x @ self.W_h).softmax(dim=-1)  # (..., T, 2)
        else:
            s = probs_s = r[..., :0]  # (..., T, 0)
            alpha = torch.stack((torch.zeros_like(r[..., 0]), torch.ones_like(r[..., 0])), dim=-1)  # (..., T, 2)
        gates = torch.cat((alpha[..., :1] * probs_s, alpha[..., 1:] * probs_r * picked_r), dim=-1)  # (..., T, H)
        picked = torch.cat((torch.ones_like(probs_s, dtype=torch.bool), picked_r), dim=-1)  # (..., T, H)
        scores, probs = torch.cat((s, r), dim=-1), torch.cat((probs_s, probs_r), dim=-1)  # (..., T, H) each
        return Routing(*(t.transpose(-1, -2) for t in (scores, probs, alpha, picked, gates)))

    def variations(self, x: Tensor, T: int, S: int, causal: bool) -> Variations:
        """MHA's, with each head's output at each token scaled by its gate (head_outputs and concat are the gated
        ones)."""
        return replace(super().variations(x, T, S, causal), gates=self.route(x).gates)  # gates (..., H, T)

    @torch.no_grad()
    def forward(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                head_mask: Tensor | None = None) -> AttentionTrace:
        """MultiHeadAttention.forward, with trace.gates [H, T] and the router's decisions in meta: router_scores,
        router_probs [H, T], router_alpha [2, T], picked [H, T] (bool), moh_k, moh_shared."""
        trace = super().forward(x, context, causal=causal, query_tokens=query_tokens, key_tokens=key_tokens,
                                head_mask=head_mask)
        routing = {name: t.detach().cpu().numpy() for name, t in self.route(x)._asdict().items()}
        meta = {"router_scores": routing["scores"], "router_probs": routing["probs"],
                "router_alpha": routing["alpha"], "picked": routing["picked"],
                "moh_k": self.moh_k, "moh_shared": self.moh_shared}
        return replace(trace, gates=routing["gates"], meta={**trace.meta, **meta})


def head_load(picked: np.ndarray) -> np.ndarray:
    """[H]: the share of tokens that use each head, from picked [H, T] (shared heads: 1)."""
    return np.asarray(picked, dtype=np.float64).mean(axis=-1)


def load_balance_loss(routing: Routing, moh_shared: int) -> Tensor:
    """The paper's load-balance loss over the routed heads: L_b = sum_i f_i P_i, with f_i the share of tokens that
    pick routed head i and P_i its mean routing probability softmax(W_r x_t)_i (over every token and batch entry)."""
    picked = routing.picked[..., moh_shared:, :]  # (..., h_r, T)
    probs = routing.probs[..., moh_shared:, :]  # (..., h_r, T)
    dims = [d for d in range(probs.dim()) if d != probs.dim() - 2]
    f = picked.to(probs).mean(dim=dims)  # (h_r,)
    return (f * probs.mean(dim=dims)).sum()


def _heads(first: int, last: int) -> str:
    return f"head {first}" if first == last else f"heads {first}–{last}"


def _describe(cfg: MHAConfig, variant: LayerVariant) -> str:
    h, shared, k = cfg.num_heads, variant.moh_shared, variant.moh_k
    used = (f"weights {_heads(0, shared - 1)} for every token (shared) and picks each token's top {k} of "
            f"{_heads(shared, h - 1)} (routed)" if shared else f"picks each token's top {k} of the {h} heads")
    every = " (here every head: the router only weights them)" if shared + k == h else ", the others add nothing"
    return (f"Mixture-of-heads attention (MoH): every head computes its attention map as in MHA; a router {used}. "
            f"Each head's output is scaled by its gate before W_O, so a token uses {shared + k} of {h} heads{every}. "
            "The Router (MoH) view shows each token's choices.")


def _formulas(cfg: MHAConfig, T: int, S: int | None = None, *, causal: bool = False, **params: Any) -> list[str]:
    """LaTeX lines of what this variant changes, with live dimensions (mha_viz.formulas.variant_formulas)."""
    k, shared = params["moh_k"], params["moh_shared"]
    routed = rf"h \ge {shared}" if shared else "h"
    alpha = r"\alpha_{t,2}\," if shared else ""
    lines = [(rf"g_{{t,h}} = {alpha}\mathrm{{softmax}}(x_t W_r)_h \text{{ if }} h "
             rf"\in \mathrm{{top}}\text{{-}}{k}(x_t W_r) \text{{ else }} 0 \quad ({routed}\text{{: routed}})")]
    if shared:
        lines += [(rf"g_{{t,h}} = \alpha_{{t,1}}\, \mathrm{{softmax}}(x_t W_s)_h \quad (h < {shared}\text{{: shared, "
                  rf"every token}}), \quad [\alpha_{{t,1}}, \alpha_{{t,2}}] = \mathrm{{softmax}}(x_t W_\alpha)")]
    lines.append(r"\mathrm{MoH}(x_t) = \sum_h g_{t,h}\, \mathrm{head}_{t,h}\, W_O^{(h)\top} + b_O \quad "
                 r"\text{(the gated concat: a head a token does not use is 0 in its row)}")
    return lines


def _check(cfg: MHAConfig, variant: LayerVariant) -> None:
    h = cfg.num_heads
    if variant.moh_shared >= h:
        raise ValueError(f"moh_shared = {variant.moh_shared} leaves no head to route: it must be below h = {h}")
    if variant.moh_k > h - variant.moh_shared:
        raise ValueError(f"moh_k = {variant.moh_k} is more than the {h - variant.moh_shared} routed heads "
                         f"(h - moh_shared): each token picks its top-k among them")


def _fit(values: Values) -> dict[str, Any]:
    """moh_shared below h, moh_k at most the routed heads h - moh_shared."""
    h, shared, k = values["h"], values["moh_shared"], values["moh_k"]
    out: dict[str, Any] = {}
    if isinstance(h, int) and isinstance(shared, int) and isinstance(k, int):
        if shared >= h:
            out["moh_shared"] = shared = h - 1
        if k > h - shared:
            out["moh_k"] = h - shared
    return out


def _unfit(values: Values) -> str | None:
    h, shared, k = values["h"], values["moh_shared"], values["moh_k"]
    if isinstance(shared, int) and isinstance(k, int) and (shared >= h or k > h - shared):
        return f"moh_shared = {shared}, moh_k = {k} (from the link) do not fit h = {h}: see the page."
    return None


def _validate(params: Values) -> None:
    whole_number("moh_k", params["moh_k"], 1)
    whole_number("moh_shared", params["moh_shared"], 0)


def _routed(values: Values) -> int:
    return max(values["h"] - min(values["moh_shared"], values["h"] - 1), 1)


def _balance(model: Any, tokens: Tensor, variant: LayerVariant) -> Tensor:
    """The router's load-balance loss on a batch (the trainer weighs it by MOH_BALANCE)."""
    return load_balance_loss(model.attention.route(model.embed(tokens)), variant.moh_shared)


register(VariantSpec(
    "moh", "MoH", MixtureOfHeads, _describe,
    lambda cfg, v: VariantShape("moh", cfg.d_model, cfg.num_heads, head_dim=cfg.d_k, v_dim=cfg.d_v, bias=cfg.bias,
                                moh_k=v.moh_k, moh_shared=v.moh_shared),
    Training(lambda v, h: f"MoH k={v.moh_k}" + (f"+{v.moh_shared} shared" if v.moh_shared else ""),
             grid=lambda h: [LayerVariant("moh", moh_k=k, moh_shared=s) for s in (0, 1) for k in (1, 2)],
             loss=_balance, colour="#ff7f0e", step_cost=(1.6, 1.0)),  # step_cost: the router
    fields=(StateField("moh_k", 2, lambda r: whole(r, 1, MAX_HEADS), f"a number of heads from 1 to {MAX_HEADS}"),
            StateField("moh_shared", 0, lambda r: whole(r, 0, MAX_HEADS - 1),
                       f"a number of shared heads from 0 to {MAX_HEADS - 1}")),
    validate=_validate,
    check=_check, formulas=_formulas, flag="routed",
    controls=(
        Control("moh_shared", "Shared heads moh_shared", "slider", column=True, refit=True,
                bounds=lambda v: (0, max(v["h"] - 1, 1)), disabled=lambda v: v["h"] == 1,
                help="The first moh_shared heads are used by every token."),
        Control("moh_k", "Heads per token moh_k", "slider", column=True,
                bounds=lambda v: (1, max(_routed(v), 2)), disabled=lambda v: _routed(v) == 1,
                help="The router scores the other heads for each token; each token uses its top moh_k of them.")),
    fit=_fit, unfit=_unfit, fit_button="moh_shared below h, moh_k at most the routed heads h − moh_shared.",
    example={"moh_k": "1", "moh_shared": "1"},
    help="MoH (mixture-of-heads): a router picks each token's heads."))
