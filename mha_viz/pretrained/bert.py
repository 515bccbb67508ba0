"""BERT family (BERT, MiniLM, RoBERTa, XLM-R, DistilBERT): bidirectional self-attention.

    scores = Q K^T / sqrt(d_k) + mask      separate query / key / value Linear layers per layer
"""

from __future__ import annotations

from .adapter import Adapter, Site


class BertAdapter(Adapter):
    """encoder.layer[i].attention.self.{query,key,value}; W_O is attention.output.dense."""

    architectures = ("bert",)
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        attention = self.base.encoder.layer[layer].attention
        s = attention.self
        H = s.num_attention_heads
        return Site(s, s.query, s.key, s.value, attention.output.dense, H, H, s.attention_head_size)


class RobertaAdapter(BertAdapter):
    """BERT's layout; position ids start after the padding id, so two table rows are never used."""

    architectures = ("roberta", "xlm-roberta")

    def max_positions(self) -> int | None:
        cfg = self.model.config
        return cfg.max_position_embeddings - cfg.pad_token_id - 1


class DistilBertAdapter(Adapter):
    """transformer.layer[i].attention.{q_lin,k_lin,v_lin,out_lin}."""

    architectures = ("distilbert",)
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.transformer.layer[layer].attention
        return Site(a, a.q_lin, a.k_lin, a.v_lin, a.out_lin, a.n_heads, a.n_heads, a.attention_head_size)
