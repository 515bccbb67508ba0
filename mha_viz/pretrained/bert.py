"""BERT family (BERT, MiniLM, RoBERTa, XLM-R, ELECTRA, DistilBERT, ALBERT): bidirectional self-attention.

    scores = Q K^T / sqrt(d_k) + mask      separate query / key / value Linear layers per layer
ALBERT shares one layer's weights among all layers: layer l is the l-th call of that one module.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .adapter import Adapter, Site, register


@dataclass(frozen=True)
class PostNorms:
    """A post-norm encoder's residual stream (BERT): the embeddings' sum goes through a LayerNorm, and so does each
    layer's input plus its attention output, then that plus its MLP output."""

    word: nn.Embedding  # the token embedding; the embeddings' norm input minus it (and token types) is positions
    token_type: nn.Embedding | None
    embeddings: nn.Module  # the embeddings' LayerNorm
    attention: tuple[nn.Module, ...]  # each layer's LayerNorm after its attention
    output: tuple[nn.Module, ...]  # and after its MLP
    project: nn.Linear | None = None  # ELECTRA, ALBERT: small embeddings projected to the model's width, after the norm
    before: nn.Linear | None = None  # DeBERTa: small embeddings projected to the model's width, before the norm
    conv: nn.Module | None = None  # DeBERTa-v2's conv layer's LayerNorm, after layer 0: it reads layer 0's output plus
    # a convolution of layer 0's input, and layer 1 reads what it returns


@register
class BertAdapter(Adapter):
    """encoder.layer[i].attention.self.{query,key,value}; W_O is attention.output.dense."""

    architectures = ("bert", "electra")
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        attention = self.base.encoder.layer[layer].attention
        s = attention.self
        H = s.num_attention_heads
        return Site(s, s.query, s.key, s.value, attention.output.dense, H, H, s.attention_head_size)

    def post_norms(self) -> PostNorms | None:
        e, layers = self.base.embeddings, self.base.encoder.layer
        return PostNorms(e.word_embeddings, getattr(e, "token_type_embeddings", None), e.LayerNorm,
                         tuple(layer.attention.output.LayerNorm for layer in layers),
                         tuple(layer.output.LayerNorm for layer in layers),
                         getattr(self.base, "embeddings_project", None))


@register
class RobertaAdapter(BertAdapter):
    """BERT's layout; position ids start after the padding id, so two table rows are never used."""

    architectures = ("roberta", "xlm-roberta")

    def max_positions(self) -> int | None:
        cfg = self.model.config
        return cfg.max_position_embeddings - cfg.pad_token_id - 1


@register
class DistilBertAdapter(Adapter):
    """transformer.layer[i].attention.{q_lin,k_lin,v_lin,out_lin}."""

    architectures = ("distilbert",)
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.transformer.layer[layer].attention
        return Site(a, a.q_lin, a.k_lin, a.v_lin, a.out_lin, a.n_heads, a.n_heads, a.attention_head_size)

    def post_norms(self) -> PostNorms:
        e, layers = self.base.embeddings, self.base.transformer.layer
        return PostNorms(e.word_embeddings, None, e.LayerNorm, tuple(layer.sa_layer_norm for layer in layers),
                         tuple(layer.output_layer_norm for layer in layers))


@register
class AlbertAdapter(Adapter):
    """encoder.albert_layer_groups[g].albert_layers[j].attention.{query,key,value,dense}, shared across layers.

    Layer l = i * inner_group_num + j runs albert_layers[j] of group g(i) = i * groups // layers; it is
    that module's n-th call, n = how many earlier i use the same group.
    """

    architectures = ("albert",)
    kind = "encoder"

    def site(self, part: str, layer: int) -> Site:
        a = self._layer(layer).attention
        H = a.num_attention_heads
        return Site(a, a.query, a.key, a.value, a.dense, H, H, a.attention_head_size, call=self._call(layer))

    def post_norms(self) -> PostNorms:
        cfg, e = self.model.config, self.base.embeddings
        layers = [self._layer(i) for i in range(cfg.num_hidden_layers * cfg.inner_group_num)]  # one per call
        return PostNorms(e.word_embeddings, e.token_type_embeddings, e.LayerNorm,
                         tuple(layer.attention.LayerNorm for layer in layers),
                         tuple(layer.full_layer_layer_norm for layer in layers),
                         self.base.encoder.embedding_hidden_mapping_in)

    def _group(self, i: int) -> int:
        cfg = self.model.config
        return int(i / (cfg.num_hidden_layers / cfg.num_hidden_groups))  # the model's own rule (AlbertTransformer)

    def _layer(self, layer: int) -> nn.Module:
        i, j = divmod(layer, self.model.config.inner_group_num)
        return self.base.encoder.albert_layer_groups[self._group(i)].albert_layers[j]

    def _call(self, layer: int) -> int:
        i = layer // self.model.config.inner_group_num
        return sum(self._group(earlier) == self._group(i) for earlier in range(i))
