"""Score attribution's reading of a TransformerLens model (mha_viz.pretrained.hooked), from its hook points.

Block L's input, blocks.L.hook_resid_pre, is exactly the sum of
    token = hook_embed, position = hook_pos_embed (standard positions; rotary: none), and for each layer l < L:
    l.h = hook_z[l][:, h] W_O[l, h] (each head), l attention bias = b_O[l], l MLP = hook_mlp_out[l] (not attn-only)
and layer L's attention reads ln1(x): LayerNorm ("LN"), RMSNorm ("RMS"), their folded forms "LNPre" and "RMSPre"
(gamma = 1, no beta: TransformerLens folded them into W_Q, W_K) or none. Head h's query is ln1(x) W_Q[L, h] + b_Q[L, h],
its key the same with W_K[L, h] (grouped-query attention: TransformerLens's W_K repeats each key head for the query
heads that read it); a QK-norm (use_qk_norm) is an RMSNorm over d_head on each; then the rotary rotation, the scale
1 / attn_scale and the soft-cap. score_attribution (its module docstring) freezes the norms and splits the scores.
Shortformer positions (positional_embedding_type "shortformer") are not in x: each layer adds hook_pos_embed to its
normed input for the queries and keys, q = (ln1(x) + position) W_Q + b_Q, so "position" is a part of q and k outside
the frozen norm, and its removal the row without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..attention import attend

if TYPE_CHECKING:
    from ..pretrained.hooked import HookedModel
    from ..pretrained.norms import NormAffine

NORMS = {"LN": "LayerNorm", "LNPre": "LayerNorm", "RMS": "RMSNorm", "RMSPre": "RMSNorm"}  # normalization_type -> kind


def hooked_unavailable(model: HookedModel) -> str | None:
    """Why score_attribution cannot split this TransformerLens model's scores, or None where it can."""
    cfg = model.cfg
    if cfg.normalization_type is not None and cfg.normalization_type not in NORMS:
        return f"{model.name}'s norm is {cfg.normalization_type!r}; score attribution freezes {', '.join(NORMS)}"
    return None


def _tl_norm(module: torch.nn.Module, kind: str, d: int, eps: float) -> NormAffine:
    """A TransformerLens norm (weight w, bias b where it has them) as NormAffine."""
    from ..pretrained.norms import NormAffine

    w, b = getattr(module, "w", None), getattr(module, "b", None)
    return NormAffine(kind, torch.ones(d, dtype=torch.float64) if w is None else w.detach().double().cpu(),
                      None if b is None else b.detach().double().cpu(), eps)


class HookedStream:
    """One forward pass of a HookedModel, hooked: block L's input x (T, d) split into its sources (the module
    docstring), its ln1, and layer L's scores and weights as TransformerLens computed them."""

    def __init__(self, model: HookedModel, ids: tuple[int, ...], layer: int) -> None:
        cfg, blocks = model.cfg, model.hooked.blocks
        self.model = model
        names = [f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.attn.hook_attn_scores",
                 f"blocks.{layer}.attn.hook_pattern", "hook_embed"]
        if cfg.positional_embedding_type in ("standard", "shortformer"):
            names.append("hook_pos_embed")
        if cfg.normalization_type is not None:
            names.append(f"blocks.{layer}.ln1.hook_normalized")
        for l in range(layer):
            names += [f"blocks.{l}.attn.hook_z", *([] if cfg.attn_only else [f"blocks.{l}.hook_mlp_out"])]
        rec = {name: t.detach().cpu() for name, t in model.record(ids, names).items()}
        T = len(ids)
        sources = {"token": rec["hook_embed"]}  # (T, d) each
        self.position = None  # (T, d) shortformer: added to each layer's normed query and key input, not to x
        if cfg.positional_embedding_type == "shortformer":
            self.position = rec["hook_pos_embed"].double()
        elif "hook_pos_embed" in rec:
            sources["position"] = rec["hook_pos_embed"]
        for l in range(layer):
            attn = blocks[l].attn
            z = rec[f"blocks.{l}.attn.hook_z"].float()  # (T, H, d_v)
            heads = torch.einsum("thv,hvd->htd", z, attn.W_O.detach().float().cpu())  # (H, T, d): z_h W_O[l, h]
            sources |= {f"{l}.{h}": head for h, head in enumerate(heads)}
            sources[f"{l} attention bias"] = attn.b_O.detach().cpu().expand(T, -1)
            if not cfg.attn_only:
                sources[f"{l} MLP"] = rec[f"blocks.{l}.hook_mlp_out"]
        self.sources = {name: src.float() for name, src in sources.items() if src.abs().amax() > 0}  # a zero b_O out
        self.x = rec[f"blocks.{layer}.hook_resid_pre"].double()  # (T, d)
        total = torch.zeros_like(self.x)
        for src in self.sources.values():
            total += src
        self.residual_error = float((total - self.x).abs().max())
        self.ln1 = blocks[layer].ln1
        d = self.x.shape[-1]
        if cfg.normalization_type is None:
            self.norm = None
            self.attention_input = self.x  # (T, d)
        else:
            self.norm = _tl_norm(self.ln1, NORMS[cfg.normalization_type], d, cfg.eps)
            normalized = rec[f"blocks.{layer}.ln1.hook_normalized"].double()  # centre(x) / s, as TransformerLens
            if normalized.dim() == 3:  # (T, heads, d): split q/k/v inputs (use_split_qkv_input), one copy per head
                normalized = normalized[:, 0]
            self.attention_input = normalized * self.norm.gamma + (0 if self.norm.beta is None else self.norm.beta)
        self.attn = attn = blocks[layer].attn
        self.variations = model.variations(layer, T)
        self.scores = rec[f"blocks.{layer}.attn.hook_attn_scores"]  # (H, T, T) the model's own, soft-capped, -inf masked
        self.weights = rec[f"blocks.{layer}.attn.hook_pattern"]  # (H, T, T)
        self.qk_norms = None if not cfg.use_qk_norm else tuple(  # RMSNorm over d_head on each query and key head
            _tl_norm(n, "RMSNorm", cfg.d_head, cfg.eps) for n in (attn.q_norm, attn.k_norm))

    def projection(self, head: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Head's W_Q, W_K (d, d_k) and b_Q, b_K (d_k,), float64 (W_K: the key head it reads)."""
        W = {n: getattr(self.attn, f"W_{n}")[head].detach().double().cpu() for n in "QK"}
        b = {n: getattr(self.attn, f"b_{n}")[head].detach().double().cpu() for n in "QK"}
        return W, b

    def removed(self, head: int, query: int) -> Tensor:
        """(sources, T): the query's softmax row with each source taken out of x at every position, through the real
        ln1, the head's projections and its attention (its q/k norms, rotary, mask and soft-cap), in float32 as the
        model; 16 sources at a time, each one a head of attend(). Shortformer: then the row without the positions
        added to the normed input (a last row)."""
        cfg = self.model.cfg
        W, b = self.projection(head)
        W, b = ({n: t.to(cfg.device, torch.float32) for n, t in d.items()} for d in (W, b))
        position = 0 if self.position is None else self.position.float().to(cfg.device)
        x, sources, rows = self.x.float(), list(self.sources.values()), []
        for i in range(0, len(sources), 16):
            removed = (x - torch.stack(sources[i:i + 16])).to(cfg.device, cfg.dtype)  # (c, T, d)
            rows.append(self._row(self.ln1(removed).float() + position, W, b, query))  # (c, T)
        if self.position is not None:
            rows.append(self._row(self.ln1(x[None].to(cfg.device, cfg.dtype)).float(), W, b, query))
        return torch.cat(rows)

    def _row(self, a: Tensor, W: dict[str, Tensor], b: dict[str, Tensor], query: int) -> Tensor:
        """(c, T) the query's softmax row of the head whose projections are W, b, on each of c inputs a (c, T, d)."""
        q, k = a @ W["Q"] + b["Q"], a @ W["K"] + b["K"]  # (c, T, d_k)
        return attend(q, k, k, self.variations).weights[:, query].double().cpu()
