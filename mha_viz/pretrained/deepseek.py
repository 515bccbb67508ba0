"""DeepSeek-V2 and DeepSeek-V3: multi-head latent attention (MLA).

    q       = q_proj(x)   or   q_b_proj(q_a_layernorm(q_a_proj(x)))      (H, T, n + r): [q_nope | q_rope] per head
    [c | k_rope] = kv_a_proj_with_mqa(x)                                 c: the latent (S, kv_lora_rank); k_rope (S, r)
    c_KV    = kv_a_layernorm(c)                                          what the cache holds per token, with k_rope
    [k_nope | v] = kv_b_proj(c_KV) per head                              (H, S, n), (H, S, d_v): up-projected
    q_rope, k_rope rotated (RoPE; one k_rope shared by every head)
    scores  = scale * [q_rope | q_nope] . [k_rope | k_nope] + mask      causal; scale = d_k^-1/2 (times mscale^2
                                                                         under YaRN rope scaling)
d_k = n + r (qk_nope_head_dim + qk_rope_head_dim) differs from d_v (v_head_dim). The rotary part is kept apart
because W_UK^T W_Q can be absorbed into one matrix only where no position-dependent rotation sits between them.

Layout of the trace: the one attention core rotates the first r dims of each head with rotate_half pairs
(i, i + r/2), so queries and keys are traced as [rotary r dims | n position-free dims], the rotary dims
de-interleaved where the model pairs (x0, x1), (x2, x3), ... (DeepSeek-V2 always, V3 with rope_interleave): the
model's [q_nope | q_rope] with the same permutation of dims applied to q and k, which leaves every q.k unchanged.
meta["kv_latent"] (S, kv_lora_rank) is c_KV and meta["k_rope"] (S, r) the rotated shared key part, in the trace's
order (equal to keys[h, :, :r] for every head h): the cache holds these two, not K and V.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor, nn

from ..trace import AttentionTrace
from .adapter import (
    Adapter,
    Recorder,
    Site,
    TraceRequest,
    Variations,
    loaded,
    max_abs_diff,
    per_head,
    register,
    to_numpy,
)

MLA_LAYOUT = ("multi-head latent attention: queries and keys are [r rotary dims | position-free dims] (the rotary "
              "dims first, de-interleaved into rotate-half pairs where the model interleaves them; the same "
              "permutation in q and k, so every score is the model's); meta['kv_latent'] (S, kv_lora_rank) and "
              "meta['k_rope'] (S, r) are what the cache holds per token")


@register
class DeepseekAdapter(Adapter):
    """layers[i].self_attn: q_proj or q_b_proj (queries), kv_a_proj_with_mqa (latent and shared rotary key),
    kv_b_proj (per-head k_nope and v from the latent), o_proj; rotary cos/sin come in as position_embeddings."""

    architectures = ("deepseek_v2", "deepseek_v3")
    kind = "decoder"
    weights_unavailable = (
        "multi-head latent attention has no W_K and W_V per head: keys and values are up-projected from a latent "
        "that passes through its own RMSNorm (kv_a_layernorm), so the position-free part of a key is divided by a "
        "per-token scale its rotary part is not divided by; no matrix per head maps the stream to the keys, not even "
        "up to the norms' scales"
    )

    def site(self, part: str, layer: int) -> Site:
        a = self.base.layers[layer].self_attn
        q = a.q_proj if a.q_lora_rank is None else a.q_b_proj
        return Site(a, q, a.kv_a_proj_with_mqa, a.kv_b_proj, a.o_proj, a.num_heads, a.num_heads, a.qk_head_dim)

    def interleaved(self, site: Site) -> bool:
        """The model rotates pairs (x0, x1), (x2, x3), ...: DeepSeek-V2 always, V3 where config.rope_interleave."""
        return self.model.config.model_type == "deepseek_v2" or bool(self.model.config.rope_interleave)

    def rope_order(self, site: Site) -> list[int]:
        """The rotary dims in the trace's order: evens then odds where the model interleaves pairs, else as they are."""
        r = site.attention.qk_rope_head_dim
        return [*range(0, r, 2), *range(1, r, 2)] if self.interleaved(site) else list(range(r))

    def latent(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor]:
        """c_KV = kv_a_layernorm(c) (S, kv_lora_rank) and the shared key part before rotation (S, r), trace order."""
        a = site.attention
        c, k_rope = rec.first(site.k).split([a.kv_lora_rank, a.qk_rope_head_dim], dim=-1)  # (S, L), (S, r)
        with loaded(a.kv_a_layernorm):
            latent = a.kv_a_layernorm(c)  # (S, kv_lora_rank)
        return latent, k_rope[:, self.rope_order(site)]

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        """q (H, T, r + n), k (H, S, r + n) as [rotary | position-free] dims, v (H, S, d_v)."""
        a, H, order = site.attention, site.num_heads, self.rope_order(site)
        n, r = a.qk_nope_head_dim, a.qk_rope_head_dim
        q_nope, q_rope = per_head(rec.first(site.q), H).split([n, r], dim=-1)  # (H, T, n), (H, T, r)
        kv = rec.first(site.v).flatten(0, -2)  # (S, H*(n + d_v)): kv_b_proj reads the latent as one head (1, S, L)
        k_nope, v = per_head(kv, H).split([n, a.v_head_dim], dim=-1)  # (H, S, n), (H, S, d_v)
        _, k_rope = self.latent(site, rec)  # (S, r)
        q = torch.cat((q_rope[..., order], q_nope), dim=-1)  # (H, T, r + n)
        k = torch.cat((k_rope.expand(H, -1, -1), k_nope), dim=-1)  # (H, S, r + n): one k_rope for every head
        return q, k, v

    def rotary(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor]:
        """(cos, sin), each (T, r), for rotate_half pairs (i, i + r/2). DeepSeek-V2 passes complex frequencies
        (T, r/2) whose modulus is the YaRN attention scaling; V3 passes cos and sin themselves."""
        embeddings = rec.arguments["position_embeddings"]
        if torch.is_tensor(embeddings) and embeddings.is_complex():
            f = embeddings[0]  # (T, r/2)
            return torch.cat((f.real, f.real), dim=-1), torch.cat((f.imag, f.imag), dim=-1)  # (T, r) each
        cos, sin = embeddings  # (1, T, r) each
        return cos[0], sin[0]

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        return replace(super().variations(part, site, rec, q, k), rotary=self.rotary(site, rec))

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        """None each: no W_K or W_V per head exists (weights_unavailable); W_Q is left out with them, as queries in
        V3 also pass a norm of their own latent (q_a_layernorm)."""
        return dict.fromkeys(("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V"))

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.layers[layer].input_layernorm

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.layers, self.base.norm

    def _rebuild(self, request: TraceRequest, layer: int, rec: Recorder, reference: Tensor) -> AttentionTrace:
        """The shared trace, with the latent and the shared rotary key in meta, and a check that the latent
        through kv_b_proj gives the traced keys' position-free part and the values."""
        trace = super()._rebuild(request, layer, rec, reference)
        site = rec.site
        a, H, r = site.attention, site.num_heads, site.attention.qk_rope_head_dim
        latent, _ = self.latent(site, rec)  # (S, kv_lora_rank)
        with loaded(a.kv_b_proj):
            kv = per_head(a.kv_b_proj(latent), H).float()  # (H, S, n + d_v)
        rebuilt = torch.cat((torch.as_tensor(trace.keys[..., r:]), torch.as_tensor(trace.values)), dim=-1)
        check = {**trace.meta["check"], "kv_b_proj(latent) vs keys and values": max_abs_diff(kv, rebuilt)}
        meta = {**trace.meta, "check": check, "mla": MLA_LAYOUT, "rope_dim": r, "kv_latent": to_numpy(latent),
                "k_rope": trace.keys[0, :, :r].copy()}
        return replace(trace, meta=meta)


@register
class DeepseekV32Adapter(DeepseekAdapter):
    """DeepSeek-V3.2: V3's latent attention where each query sees only the keys its indexer (self_attn.indexer, a
    small attention of its own) ranks in the top index_topk; the trace's mask holds the kept keys (meta "kept" [T, S]),
    and head_arrays["dropped mass"] [H, T] the share the dropped keys would have had under dense attention."""

    architectures = ("deepseek_v32",)

    def own_square_tensors(self) -> int:
        return int(self.model.config.index_n_heads)  # the indexer scores every key for every query, head by head

    def site(self, part: str, layer: int) -> Site:
        return replace(super().site(part, layer), watch=self.base.layers[layer].self_attn.indexer)

    def interleaved(self, site: Site) -> bool:
        return True  # apply_rotary_pos_emb_interleave, always

    def kept(self, rec: Recorder, T: int, S: int) -> Tensor:
        """True where the indexer kept key j for query i, (T, S), from its top-k indices as the model used them."""
        top = rec.watched[0].long()  # (T, topk)
        return torch.zeros(T, S, dtype=torch.bool, device=top.device).scatter(-1, top, True)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        dropped = ~self.kept(rec, q.shape[-2], k.shape[-2])  # (T, S)
        mask = dropped if variations.mask is None else variations.mask | dropped
        return replace(variations, mask=mask)

    def _rebuild(self, request: TraceRequest, layer: int, rec: Recorder, reference: Tensor) -> AttentionTrace:
        trace = super()._rebuild(request, layer, rec, reference)
        T, S = trace.weights.shape[1:]
        kept = self.kept(rec, T, S).cpu().numpy()  # (T, S)
        dense = torch.as_tensor(trace.queries) @ torch.as_tensor(trace.keys).transpose(-1, -2) * trace.score_scale
        causal = torch.ones(T, S, dtype=torch.bool).tril()
        dense = dense.masked_fill(~causal, float("-inf")).softmax(-1).numpy()  # (H, T, S): dense attention's weights
        dropped = np.where(kept, 0.0, dense).sum(-1)  # (H, T): what the keys the indexer dropped would have had
        meta = {**trace.meta, "kept": kept, "index_topk": int(rec.site.attention.indexer.index_topk)}
        return replace(trace, kind="sparse", head_arrays={"dropped mass": dropped.astype(np.float32)}, meta=meta)

    def layer_kind(self, part: str, layer: int) -> str:
        return "sparse"
