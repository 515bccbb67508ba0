"""DeBERTa-v2 (and v3): disentangled attention, content and relative position scored separately.

    scores = (Q_c K_c^T + c2p + p2c) / sqrt(d_k * n) + mask           n = 1 + number of position terms
    c2p[h, i, j] = q_c[h, i] . k_r[h, clamp(span + r(i, j))]          content -> position
    p2c[h, i, j] = k_c[h, j] . q_r[h, clamp(span - r(j, i))]          position -> content
r(i, j) is the (log-bucketed) distance i - j; k_r = pos_key_proj(R), q_r = pos_query_proj(R) (key_proj and
query_proj with share_att_key) of the relative position embeddings R (2 span rows); clamp to 0 ... 2 span - 1.
The trace's score_bias holds c2p and p2c (already / sqrt(d_k * n)); scale * q . k is the content term. c2p is linear
in the query and p2c in the key (linear_score_terms): score attribution splits them by source (analysis.score_streams).
Its stream (post_norms) may pass two more modules: embeddings.embed_proj (embedding_size != hidden_size: a Linear
without bias before the embeddings' LayerNorm) and encoder.conv (conv_kernel_size > 0: after layer 0,
LayerNorm(layer 0's output + act(conv(layer 0's input))), which layer 1 reads).
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor, nn

from .adapter import Adapter, LinearTerm, Recorder, Site, Variations, model_mask, per_head, register
from .bert import PostNorms

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
        terms = self.linear_score_terms(site, rec)  # c2p and p2c: (H, T, S) each, times the scale; none without
        return replace(variations, bias={name: t.scores(q, k) * variations.scale for name, t in terms.items()})

    def linear_score_terms(self, site: Site, rec: Recorder) -> dict[str, LinearTerm]:
        """c2p, linear in the query: q_i . k_r[delta]; p2c, linear in the key: k_j . q_r[delta']."""
        a = site.attention
        if not a.relative_attention:
            return {}
        span, H = a.pos_ebd_size, site.num_heads
        R = rec.arguments["rel_embeddings"][: 2 * span].float()  # (2 span, d_model)
        rel = rec.arguments["relative_pos"]
        rel = rel.reshape(rel.shape[-2:])  # (T, S): bucketed distance i - j; self-attention: T = S
        terms = {}
        if "c2p" in a.pos_att_type:
            k_r = self._positions(a.key_proj if a.share_att_key else a.pos_key_proj, R, H)  # (H, 2 span, d)
            terms[C2P] = LinearTerm("query", k_r, (rel + span).clamp(0, 2 * span - 1))  # row of R for query i, key j
        if "p2c" in a.pos_att_type:
            q_r = self._positions(a.query_proj if a.share_att_key else a.pos_query_proj, R, H)  # (H, 2 span, d)
            delta = (span - rel).clamp(0, 2 * span - 1)  # [j, i]: the row of R key j reads for query i
            terms[P2C] = LinearTerm("key", q_r, delta.T)  # (T, S)
        return terms

    def post_norms(self) -> PostNorms:
        e, encoder = self.base.embeddings, self.base.encoder
        return PostNorms(e.word_embeddings, e.token_type_embeddings, e.LayerNorm,
                         tuple(layer.attention.output.LayerNorm for layer in encoder.layer),
                         tuple(layer.output.LayerNorm for layer in encoder.layer),
                         before=e.embed_proj, conv=None if encoder.conv is None else encoder.conv.LayerNorm)

    @staticmethod
    def _positions(projection: nn.Module, R: Tensor, H: int) -> Tensor:
        """The relative position embeddings R (2 span, d_model) through a projection, per head: (H, 2 span, d)."""
        return per_head(projection(R.to(projection.weight.dtype)).float(), H)
