"""DeBERTa-v2 (and v3): disentangled attention, content and relative position scored separately.

    scores = (Q_c K_c^T + c2p + p2c) / sqrt(d_k * n) + mask           n = 1 + number of position terms
    c2p[h, i, j] = q_c[h, i] . k_r[h, clamp(span + r(i, j))]          content -> position
    p2c[h, i, j] = k_c[h, j] . q_r[h, clamp(span - r(j, i))]          position -> content
r(i, j) is the (log-bucketed) distance i - j; k_r = pos_key_proj(R), q_r = pos_query_proj(R) (key_proj and
query_proj with share_att_key) of the relative position embeddings R (2 span rows); clamp to 0 ... 2 span - 1.
The trace's score_bias holds c2p and p2c (already / sqrt(d_k * n)); scale * q . k is the content term.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, Variations, model_mask, per_head, register

C2P = "content→position (c2p)"
P2C = "position→content (p2c)"


@register
class DebertaV2Adapter(Adapter):
    """encoder.layer[i].attention.self.{query_proj,key_proj,value_proj}; W_O is attention.output.dense."""

    architectures = ("deberta-v2",)
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        attention = self.base.encoder.layer[layer].attention
        s = attention.self
        H = s.num_attention_heads
        return Site(s, s.query_proj, s.key_proj, s.value_proj, attention.output.dense, H, H, s.attention_head_size)

    def scale(self, site: Site) -> float:
        terms = 1 + sum(t in site.attention.pos_att_type for t in ("c2p", "p2c"))
        return (site.head_dim * terms) ** -0.5  # 1 / sqrt(d_k * n)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        variations = super().variations(part, site, rec, q, k)
        variations = replace(variations, mask=model_mask(rec.arguments["attention_mask"], keep=True))  # 1 = attend
        a = site.attention
        if not a.relative_attention:
            return variations
        span = a.pos_ebd_size
        R = rec.arguments["rel_embeddings"][: 2 * span].float()  # (2 span, d_model)
        H, T, S = q.shape[0], q.shape[-2], k.shape[-2]  # self-attention: T = S
        rel = rec.arguments["relative_pos"].reshape(T, S)  # (T, S): bucketed distance i - j
        bias = {}
        if "c2p" in a.pos_att_type:
            k_r = self._positions(a.key_proj if a.share_att_key else a.pos_key_proj, R, H)  # (H, 2 span, d)
            delta = (rel + span).clamp(0, 2 * span - 1)  # (T, S): row of R for query i, key j
            c2p = torch.gather(q @ k_r.transpose(-1, -2), -1, delta.expand(H, T, S))  # (H, T, S): q_i . k_r[delta]
            bias[C2P] = c2p * variations.scale
        if "p2c" in a.pos_att_type:
            q_r = self._positions(a.query_proj if a.share_att_key else a.pos_query_proj, R, H)  # (H, 2 span, d)
            delta = (span - rel).clamp(0, 2 * span - 1)  # (S, T): row of R for key j (row), query i (column)
            p2c = torch.gather(k @ q_r.transpose(-1, -2), -1, delta.expand(H, S, T))  # (H, S, T): k_j . q_r[delta]
            bias[P2C] = p2c.transpose(-1, -2) * variations.scale  # (H, T, S)
        return replace(variations, bias=bias)

    @staticmethod
    def _positions(projection: nn.Module, R: Tensor, H: int) -> Tensor:
        """The relative position embeddings R (2 span, d_model) through a projection, per head: (H, 2 span, d)."""
        return per_head(projection(R.to(projection.weight.dtype)).float(), H)
