"""Why a head looks where it looks: one attention score split exactly into (query source x key source) terms.

Layer L's attention reads the residual stream x at its block's input, a sum of sources at every position p:
    x_p = token_p + position_p + sum_(l < L) (sum_h r_l c_lh,p W_O^(l,h)T + r_l b_O^(l) + mlp_l,p)
token: the input embedding of the token; position: the learned position embedding added to it (GPT-2), where the model
has one; c_lh: head h's block of layer l's concat; mlp_l: whatever else block l adds; r_l: the residual scale (1 in
most models); a source that is 0 at every position, to float32 rounding (an attention-only model's MLP), is left out.
A pre-norm encoder (ModernBERT) has the same stream, its one source "embeddings" the normed token embedding, which
layer 0 reads with no norm of its own. With the pre-attention norm's scale s_p frozen at its value on the real x_p,
the norm is affine:
    norm(x_p) = sum_a gamma * centre(src_a,p) / s_p + beta
    LayerNorm: centre(v) = v - mean(v), s = sqrt(var(x) + eps);  RMSNorm: centre(v) = v, s = sqrt(mean(x^2) + eps)
and so are head h's query and key (R_p: the rotary rotation at position p, where the model has one):
    q_i = R_i (norm(x_i) W_Q^h + b_Q^h) = sum_a R_i (gamma centre(src_a,i) / s_i) W_Q^h + R_i (beta W_Q^h + b_Q^h)
A per-head norm on queries and keys (QK-norm: Qwen 3) is frozen the same way, at its scale on each position's whole
query or key, before the rotation; OLMo's, one norm across every head at once, at its scale on the whole projection.
A norm on each sublayer's output before the stream adds it (Gemma 2 and 3, OLMo 2 and 3, which have no norm before
the attention) is frozen at its scale per position too, every source of that output through it. The score is bilinear in them, one term per (query source a, key
source b):
    score_ij = scale * q_i . k_j (+ score bias terms: ALiBi, ...) = sum_a sum_b scale * q_a,i . k_b,j (+ ...)
"bias" is each side's constant part (the norm's beta and the projection's bias, rotated). DeBERTa's position terms,
linear in the query (c2p) or in the key (p2c), are one more source, "relative position" (analysis.score_streams),
whose column and row hold them by query and by key source. The terms sum to the score
that mha-viz's trace rebuilds (itself checked against the model's own attention weights), up to rounding; they are
computed in float64.

Removing a source is not linear (the norm's scale changes): removed[a] is the query's whole softmax row with source
a taken out of the stream at every position, recomputed exactly with the real norm.

In an encoder-decoder (T5, BART) the encoder's or the decoder's self-attention is split the same way, over its
stack's stream (score_streams_seq2seq: the decoder's reads the encoder through its cross-attention heads). A
cross-attention's terms are (decoder source x encoder source): its keys read the encoder's output, whose sources go
through the encoder's final norm (T5's) frozen at its scales; removed[a] takes a source out of one side only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import Variations, apply_rotary, attend
from .score_attribution_hooked import HookedStream, hooked_unavailable
from .score_streams import RELATIVE, linear_bias, with_linear_terms

if TYPE_CHECKING:
    from ..pretrained.adapter import Site
    from ..pretrained.hooked import HookedModel
    from ..pretrained.model import PretrainedModel
    from ..trace import AttentionTrace

MAX_TABLE_BYTES = 512 * 2**20  # every key's [sources, sources] table, float64


@dataclass(frozen=True, eq=False)
class ScoreAttribution:
    """The pre-softmax scores of one query of one head, each split into (query source x key source) terms."""

    tokens: tuple[str, ...]  # the input as the model read it
    layer: int
    head: int  # a query head: in differential attention (DiffLlama, the diff variant) head i + H is pair i's second map
    query: int  # the query position, 0-based
    keys: tuple[int, ...]  # the key positions explained: the one asked for, or every key the query sees
    sources: tuple[str, ...]  # what the residual stream is made of, in the order it is added; "bias" last
    terms: np.ndarray  # (keys, sources, sources) float64: [k, a, b] = scale * q_a . k_b (query source a, key source b)
    other: dict[str, np.ndarray]  # score terms outside scale * q . k by name (ALiBi, ...), each (keys,)
    scores: np.ndarray  # (keys,) the scores as the trace rebuilds them (checked against the model's own weights)
    weights: np.ndarray  # (T,) the query's softmax row (differential attention: this map's)
    removed: np.ndarray  # (sources - 1, T): the row with each source but "bias" (not in the stream) taken out of it,
    # recomputed exactly
    norm: str  # "LayerNorm" or "RMSNorm": the pre-attention norm, frozen at norm_scales
    norm_scales: np.ndarray  # (T,) s_p, measured on the real stream
    check: dict[str, float]  # max abs differences: the terms' sums vs the scores, the sources vs the stream
    key_sources: tuple[str, ...] | None = None  # cross-attention: the key side's sources (the encoder output's), the
    # columns of terms; removed then has a row for each query source but "bias", then each key source but "bias"
    key_tokens: tuple[str, ...] | None = None  # cross-attention: the encoder's input, where the keys are

    def table(self, key: int) -> np.ndarray:
        """(sources, sources): the terms of the score of `key` (a position in keys)."""
        if key not in self.keys:
            raise ValueError(f"key {key} is not among the explained keys (the query sees {self.keys[0]}..{self.keys[-1]})")
        return self.terms[self.keys.index(key)]

    def total(self, key: int) -> float:
        """The sum of key's terms and its other terms: its score again, up to rounding."""
        table = self.table(key)  # ValueError for a key not explained
        return float(table.sum() + sum(o[self.keys.index(key)] for o in self.other.values()))

    def versus(self, key: int, other: int) -> np.ndarray:
        """(sources, sources): which terms make `key` score above `other` (key's table minus other's)."""
        return self.table(key) - self.table(other)

    @property
    def winner(self) -> int:
        """The key the query weights most."""
        return int(np.argmax(self.weights))

    def largest(self, key: int, n: int = 3) -> list[tuple[str, str, float]]:
        """The n terms of key's score largest in size: (query source, key source, term)."""
        table, columns = self.table(key), self.key_sources or self.sources
        order = np.argsort(-np.abs(table), axis=None)[:n]
        return [(self.sources[a], columns[b], float(table[a, b]))
                for a, b in zip(*np.unravel_index(order, table.shape))]


def score_attribution_unavailable(model: PretrainedModel | HookedModel) -> str | None:
    """Why score_attribution cannot split this model's scores, or None where it can: it needs a decoder-only model,
    an encoder or an encoder-decoder whose residual stream, norms and projections mha-viz knows, of softmax layers
    only, or a TransformerLens model whose positions are in its residual stream (score_attribution_hooked)."""
    adapter = getattr(model, "adapter", None)
    if adapter is None:  # a TransformerLens model (mha_viz.pretrained.hooked)
        return hooked_unavailable(model)
    if adapter.kind == "encoder" and adapter.post_norms() is not None:
        return adapter.scores_unavailable  # a post-norm encoder whose norms mha-viz knows (BERT, MiniLM, DeBERTa)
    if adapter.kind == "encoder" and adapter.encoder_blocks() is not None:
        return adapter.scores_unavailable  # a pre-norm encoder whose blocks mha-viz knows (ModernBERT)
    if adapter.kind == "encoder-decoder" and adapter.stack_layout("encoder") is not None:
        return None  # an encoder-decoder whose stacks mha-viz knows (T5, BART): score_streams_seq2seq
    if adapter.kind == "decoder" and adapter.residual_stream() is None and adapter.scores_unavailable is not None:
        return adapter.scores_unavailable  # a stream of its own (Gemma 3n's AltUp), said by the adapter
    if adapter.residual_stream() is None or adapter.kind != "decoder":
        return (f"{model.name} is a '{model.architecture}' model: score attribution needs a decoder-only model whose "
                "residual stream mha-viz knows (the families logit attribution splits), a BERT-style encoder, "
                "ModernBERT, T5 or BART")
    return adapter.scores_unavailable


@torch.no_grad()
def score_attribution(model: PretrainedModel | HookedModel, text: str, *, layer: int, head: int, query: int,
                      key: int | None = None, part: str | None = None, decoder_text: str | None = None
                      ) -> ScoreAttribution:
    """Split the score of (query, key) of one head (every key the query sees when key is None) into the terms of the
    module docstring. part: an encoder-decoder's "encoder" or "decoder" self-attention (default: the encoder; the
    decoder reads decoder_text, default text, as PretrainedModel.trace does) or its "cross"-attention, whose queries'
    sources (the decoder's) and keys' (the encoder output's: key_sources) differ; a one-stack model's own part.
    ValueError for a model, part, layer, head or position it cannot split, saying why."""
    reason = score_attribution_unavailable(model)
    if reason is not None:
        raise ValueError(f"score attribution is unavailable: {reason}")
    if getattr(model, "adapter", None) is None:  # a TransformerLens model: its hook points (score_attribution_hooked)
        if part not in (None, "decoder") or decoder_text is not None:
            raise ValueError(f"{model.name} is a decoder-only TransformerLens model: no part {part!r} or decoder_text")
        return _hooked_score_attribution(model, text, layer, head, query, key)
    adapter = model.adapter
    part = _part(model, part)
    L = model.num_layers[part]
    if not 0 <= layer < L:
        raise ValueError(f"layer {layer} is not a layer of {model.name} (0..{L - 1})")
    kind = model.layer_kinds(part)[layer]
    if kind not in ("softmax", "sparse"):  # sparse: softmax over the keys an indexer keeps (DeepSeek-V3.2)
        raise ValueError(f"layer {layer} of {model.name} is a {kind} mixer, not softmax attention: it has no scores "
                         "to split")
    site = adapter.site(part, layer)
    if not 0 <= head < site.num_heads:
        raise ValueError(f"head {head} is not a head of layer {layer} (0..{site.num_heads - 1})")
    seq2seq = adapter.kind == "encoder-decoder"
    post_norm = part == "encoder" and adapter.post_norms() is not None
    norm = nn.Identity() if adapter.attention_reads_stream else adapter.pre_norm(part, layer)
    if norm is None and (part == "encoder" or seq2seq):
        norm = nn.Identity()  # the attention reads the stream itself: post-norm (BERT, BART), ModernBERT's layer 0
    if norm is None:
        raise ValueError(f"score attribution is unavailable: mha-viz does not know the norm before layer {layer}")
    if decoder_text is not None and not seq2seq:
        raise ValueError(f"decoder_text is for encoder-decoder models; {model.name} is a {model.kind} model")
    source = model.encode(text)  # an encoder-decoder's decoder reads decoder_text (default: text) shifted right
    decoder = model.encode(text if decoder_text is None else decoder_text, decoder=True) if seq2seq else None
    enc = decoder if part != "encoder" and seq2seq else source  # the tokens whose stream is split
    T, S = len(enc.ids), len((source if part == "cross" else enc).ids)  # queries, keys (cross: the encoder's)
    _check_positions(query, key, T, S)
    if seq2seq:
        stream = _Seq2SeqStream(model, source.ids, decoder.ids, part, layer)
    else:
        stream = (_EncoderStream(model, enc.ids, layer) if post_norm
                  else _NormedStream(model, enc.ids, layer) if adapter.normed_block(layer) is not None
                  else _Stream(model, enc.ids, layer, part))
    var = stream.variations
    affine = stream.affine(norm)
    factor = adapter.attention_in_scale(layer)  # Falcon-H1: the attention reads the normed stream times a_in
    if factor != 1.0:
        affine = replace(affine, gamma=factor * affine.gamma, beta=None if affine.beta is None else factor * affine.beta)
        norm = nn.Sequential(norm, _Times(factor))
    names = (*stream.sources, "bias")
    key_affine, key_sources = (stream.key_affine, stream.key_sources) if part == "cross" else (affine, stream.sources)
    key_names = (*key_sources, "bias")  # cross-attention: the encoder output's sources, through its final norm
    scores = stream.scores[head, query]  # (S,) the trace's rebuilt row, masked -inf
    visible = _explained_keys(scores, query, key, layer, len(names), len(key_names))
    sources = list(stream.sources.values())
    W = b = None
    try:
        W, b = stream.projection(site, head)
    except _NoHeadWeights:  # latent attention: each source run through the module itself, its inner norms frozen
        q, k = stream.module_parts(site, affine, head, query, visible)
    else:
        q = affine.projected(sources, [query], W["Q"], b["Q"])  # (S, 1, d_k): each source's part of the query
        k = key_affine.projected(list(key_sources.values()), visible, W["K"], b["K"])  # (S, keys, d_k): each key
        offset = model.adapter.norm_weight_offset
        kv = site.kv_heads[head]  # QK-norm, frozen too: per head, or across the projection (OLMo 2 and 3)
        q = _head_normed(var.q_norm, q, offset, [query], stream.projections["Q"], head)
        k = _head_normed(var.k_norm, k, offset, visible, stream.projections["K"], kv)
    q, k = _rotated(var, q, k, query, visible)
    terms = var.scale * torch.einsum("ad,bkd->kab", q[:, 0], k)  # (keys, S, S)
    other = {n: bias[head, query, visible].double().numpy() for n, bias in stream.score_bias.items()
             if n not in stream.linear_terms}
    if stream.linear_terms:  # DeBERTa's c2p and p2c: one more source (score_streams), its removal the row without
        terms = with_linear_terms(stream.linear_terms, var.scale, q, k, head, query, visible, terms)
        names = (*names[:-1], RELATIVE, names[-1])
    rebuilt = _rebuilt(var, terms, other)
    whole = affine.projected([sum(s.double() for s in sources)], range(T), torch.eye(stream.x.shape[-1]).double())
    check = {"sum of terms vs score": float((rebuilt - scores[visible].double()).abs().max()),
             "sum of sources vs stream": stream.residual_error,
             "frozen norm vs the attention's input": float((whole.sum(0) - stream.attention_input).abs().max()),
             "frozen post-attention norms vs the norms": stream.post_error,
             **(stream.key_check if part == "cross" else {})}
    removed = (stream.removed(norm, W, b, head, query) if W is not None and not _needs_every_head(var)
               else stream.removed_by_module(norm, site, head, query))  # (sources, S)
    if stream.linear_terms:  # RELATIVE taken out: the content score alone
        linear = sum(stream.score_bias[n][head, query] for n in stream.linear_terms)  # (T,)
        removed = torch.cat([removed, torch.softmax(stream.scores[head, query].double() - linear, -1)[None]])
    return ScoreAttribution(
        tokens=enc.tokens, layer=layer, head=head, query=query, keys=tuple(visible), sources=names,
        terms=terms.numpy(), other=other, scores=scores[visible].double().numpy(),
        weights=stream.weights[head, query].double().numpy(), removed=removed.numpy(), norm=affine.kind,
        norm_scales=affine.scales.numpy(), check=check, key_sources=key_names if part == "cross" else None,
        key_tokens=source.tokens if part == "cross" else None)


def _part(model: PretrainedModel, part: str | None) -> str:
    """The part whose attention is split: a one-stack model's own, an encoder-decoder's encoder by default (or its
    decoder or cross-attention). ValueError for a part the model does not have."""
    own = "encoder" if model.adapter.kind == "encoder" else "decoder"
    if part is None:
        return "encoder" if model.adapter.kind == "encoder-decoder" else own
    if part not in (model.parts if model.adapter.kind == "encoder-decoder" else (own,)):
        raise ValueError(f"part must be one of {model.parts} for {model.name}, got {part!r}")
    return part


@torch.no_grad()
def input_score_attribution(run: Callable[[Tensor], AttentionTrace], parts: dict[str, Tensor], *, head: int,
                            query: int, key: int | None = None, layer: nn.Module | None = None) -> ScoreAttribution:
    """One layer whose queries and keys are affine in its input x = sum of parts (each (T, d)): the configurable
    layer, whose x is token vectors plus the positional encoding. run(x) is the layer's trace on an input (a
    differential layer's: its softmax maps, each a head, DifferentialAttention.map_trace). Each
    part's share of a query or key is run(part) - run(0), and run(0) is the constant part "bias" (the projections'
    biases, rotated where the layer rotates), so the scores split into (query part x key part) terms as in a model;
    no norm to freeze. layer: the module run calls, whose inner norms (MLA's latent norm, a QK-norm) are frozen at
    their scales on x for the parts' runs, which makes its queries and keys affine. removed[a] is the row of
    run(x - part a), recomputed with the real norms. ValueError for a layer whose queries or keys are not affine in
    x, cross-attention, soft-capping or differential weights."""
    names, x = list(parts), sum(parts.values())
    inner: dict[nn.Module, Tensor] = {}
    with _inner_norms(layer, inner) if layer is not None else contextlib.nullcontext():
        full = run(x)
    frozen_run = run
    if inner:
        def frozen_run(inputs: Tensor) -> AttentionTrace:  # the inner norms at their scales on x
            with contextlib.ExitStack() as hooks:
                for module, received in inner.items():
                    hooks.callback(module.register_forward_hook(_frozen_norm(module, received, 0.0)).remove)
                return run(inputs)
    if full.cross or full.queries is None or full.keys is None or full.scores is None or full.scale is None:
        raise ValueError("score attribution splits a self-attention layer that keeps its queries, keys and scores")
    if full.softcap is not None or full.maps is not None:
        raise ValueError("score attribution does not split soft-capped scores, or differential weights (split each "
                         "map, a softmax head of the layer's map_trace)")
    H, T = full.weights.shape[:2]
    if not 0 <= head < H:
        raise ValueError(f"head {head} is not a head of this layer (0..{H - 1})")
    if not 0 <= query < T:
        raise ValueError(f"query {query} is not a position of the {T}-token input (0..{T - 1})")
    seen = [j for j in range(T) if np.isfinite(full.scores[head, query, j])]
    if key is not None and key not in seen:
        raise ValueError(f"query {query} does not see key {key} (masked): its score is -inf")
    visible = seen if key is None else [key]
    zero = frozen_run(torch.zeros_like(x))
    each = [frozen_run(parts[n]) for n in names]

    def split(field: str, positions: Sequence[int]) -> Tensor:  # (S + 1, P, d): each part's share, then the constant
        base = torch.from_numpy(getattr(zero, field)[head, positions]).double()
        shares = [torch.from_numpy(getattr(t, field)[head, positions]).double() - base for t in each]
        return torch.stack([*shares, base])

    q, k = split("queries", [query]), split("keys", visible)
    affine = max(float((q.sum(0) - torch.from_numpy(full.queries[head, [query]]).double()).abs().max()),
                 float((k.sum(0) - torch.from_numpy(full.keys[head, visible]).double()).abs().max()))
    if affine > 1e-4 * max(1.0, float(np.abs(full.queries).max())):
        raise ValueError("this layer's queries or keys are not affine in its input (a norm on them, say): its scores "
                         "do not split into parts of the input")
    terms = full.scale * torch.einsum("ad,bkd->kab", q[:, 0], k)  # (keys, S + 1, S + 1)
    other = {n: np.broadcast_to(b, full.scores.shape)[head, query, visible].astype(np.float64)
             for n, b in full.score_bias.items()}
    scores = full.scores[head, query, visible].astype(np.float64)
    rebuilt = terms.sum((1, 2)).numpy() + sum(other.values(), np.zeros(len(visible)))
    removed = np.stack([run(x - parts[n]).weights[head, query] for n in names]).astype(np.float64)
    return ScoreAttribution(
        tokens=full.query_tokens, layer=0, head=head, query=query, keys=tuple(visible), sources=(*names, "bias"),
        terms=terms.numpy(), other=other, scores=scores, weights=full.weights[head, query].astype(np.float64),
        removed=removed, norm="none", norm_scales=np.ones(T),
        check={"sum of terms vs score": float(np.abs(rebuilt - scores).max()), "parts vs the input": affine})


def _head_normed(norm: Callable[[Tensor], Tensor] | None, parts: Tensor, offset: float, positions: Sequence[int],
                 whole: Tensor, index: int) -> Tensor:
    """parts (S + 1, P, d_k) of head `index` at positions, the constant part last, through what the layer does to
    each query or key head before the rotation: a norm over d_k (QK-norm) frozen at its scale on their sum, one per
    position, as the pre-attention norm is (gamma * centre(part) / s, beta on the constant part); OLMo's RMSNorm
    across every head of the projection at once, frozen at its scale on the whole projection (whole: (heads, T,
    d_k), the real one), head index's slice of gamma; Cohere's LayerNorm per head with head index's own weight; or
    Llama 4's temperature (a scale per position: linear). ValueError for anything else."""
    from ..pretrained.attribution import frozen
    from ..pretrained.cohere import HeadLayerNorm
    from ..pretrained.llama4 import Temperature
    from ..pretrained.norms import NormAffine
    from ..pretrained.olmo import AcrossHeads

    if norm is None:
        return parts
    if isinstance(norm, Temperature):
        return parts * norm.scales.double()[list(positions), None]
    if isinstance(norm, HeadLayerNorm):  # Cohere: a LayerNorm over d_k with the head's own weight, in the trace's order
        gamma = norm.norm.weight.detach().double().cpu()[index, list(norm.order)]  # (d_k,)
        head_norm = _Frozen(*frozen(NormAffine("LayerNorm", gamma, None, norm.norm.variance_epsilon), parts.sum(0)))
        return head_norm.linear(parts)
    if isinstance(norm, AcrossHeads):  # s_p = sqrt(mean over every head's dims of q_p^2 + eps)
        d = parts.shape[-1]
        joined = whole[:, list(positions)].transpose(0, 1).flatten(1).double()  # (P, heads * d_k)
        across = _Frozen.of(norm.norm, joined, offset)
        if across.kind != "RMSNorm":
            raise ValueError(f"score attribution is unavailable: its QK-norm across heads is a {across.kind}")
        return across.gamma[index * d:(index + 1) * d] * parts / across.scales[:, None]
    try:  # a step that is not a norm module (a callable of an adapter's own) is refused as an unknown norm
        head_norm = _Frozen.of(norm, parts.sum(0), offset)  # scales (P,)
    except ValueError as error:
        raise ValueError(f"score attribution is unavailable: its QK-norm: {error}") from None
    normed = head_norm.linear(parts)
    if head_norm.beta is not None:
        normed[-1] += head_norm.beta
    return normed


@dataclass(frozen=True)
class _Frozen:
    """A pre-attention norm frozen at its scales on the real stream (pretrained.attribution.frozen): affine per
    position."""

    kind: str
    scales: Tensor  # (T,), or one per vector of what it was measured on
    centre: Callable[[Tensor], Tensor]  # v - mean(v) for a LayerNorm, v for an RMSNorm
    gamma: Tensor  # (d,)
    beta: Tensor | None  # (d,)

    @classmethod
    def of(cls, norm: nn.Module, received: Tensor, offset: float = 0.0) -> _Frozen:
        """norm (a LayerNorm or RMSNorm module) frozen at its scale on each vector of received (..., d), what it
        received in the real forward pass. ValueError for a module that is not a known norm."""
        from ..pretrained.attribution import frozen
        from ..pretrained.norms import norm_affine

        return cls(*frozen(norm_affine(norm, received.shape[-1], offset), received))

    @classmethod
    def identity(cls, T: int, d: int) -> _Frozen:
        """No norm between the stream and the attention (post-norm encoders, OLMo 2 and 3), as a frozen norm."""
        return cls("no norm", torch.ones(T, dtype=torch.float64), lambda v: v, torch.ones(d, dtype=torch.float64), None)

    def linear(self, part: Tensor) -> Tensor:
        """gamma * centre(part) / s: a part (..., d), shaped like what the scales were measured on, through the
        frozen norm, without its shift beta (which belongs to the constant part)."""
        return self.gamma * self.centre(part) / self.scales[..., None]

    def projected(self, sources: Sequence[Tensor], positions: Sequence[int], W: Tensor, b: Tensor | None = None
                  ) -> Tensor:
        """(S + 1, P, n): each source (T, d) at positions through the frozen norm, gamma * centre(src) / s, times W
        (d, n); last, the constant part beta W + b. 16 sources at a time, in float64."""
        scales = self.scales[list(positions), None]  # (P, 1)
        parts = []
        for i in range(0, len(sources), 16):
            chunk = torch.stack([src[list(positions)] for src in sources[i:i + 16]]).double()  # (c, P, d)
            parts.append((self.gamma * self.centre(chunk) / scales) @ W)  # (c, P, n)
        constant = 0 * W[0] if self.beta is None else self.beta @ W  # (n,)
        parts.append((constant + (0 if b is None else b)).expand(1, len(positions), -1))  # (1, P, n)
        return torch.cat(parts)


class _Stream:
    """One forward pass of the model, hooked: layer L's block input x (T, d) split into its sources, and layer L's
    attention as the trace rebuilds it (its variations, scores and weights). part: "decoder" (a decoder-only model's
    residual_stream) or "encoder" (a pre-norm encoder's encoder_blocks: ModernBERT)."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int, part: str = "decoder") -> None:
        from ..pretrained.adapter import Recorder, loaded
        from ..pretrained.attribution import Capture

        adapter, self.model, self.part = model.adapter, model, part
        blocks = adapter.residual_stream()[0] if part == "decoder" else adapter.encoder_blocks()
        sites = [adapter.site(part, layer_) for layer_ in range(layer + 1)]
        self.inner: dict[nn.Module, Tensor] = {}  # each norm inside layer L's attention module -> what it received
        with (Capture(blocks[:layer + 1], [site.out for site in sites[:-1]], None, slice(None)) as capture,
              Recorder(sites[-1]) as rec, _inner_norms(sites[-1].attention, self.inner)):  # every position of each
            outputs = adapter.forward(list(ids))  # block's input, each concat and attention output; inner norms' input
        self.call = dict(rec.arguments)  # layer L's attention call, to run it again on each source
        block_in, concat, attention_out = capture.block_in, capture.concat, capture.attention  # float64, (T, .) each
        x = block_in[layer]  # (T, d)
        ids_t = torch.tensor([list(ids)], device=adapter.device())
        token = model.model.get_input_embeddings()(ids_t)[0].double().cpu()  # (T, d)
        embeddings = block_in[0]
        self.sources: dict[str, Tensor] = {}
        position = embeddings - token
        wpe = getattr(adapter.base, "wpe", None)
        if not position.abs().max() > 0:
            self.sources["token"] = embeddings
        elif wpe is not None and torch.allclose(position, wpe.weight[:len(ids)].double().cpu(), atol=1e-5):
            self.sources |= {"token": token, "position": position}
        else:  # scaled (Gemma) or normed (Bloom) embeddings: one source
            self.sources["embeddings"] = embeddings
        self.post_error = 0.0  # the frozen norms on sublayer outputs (Gemma 2 and 3, OLMo, LFM3) against the real ones
        shared = len(set(blocks)) < len(blocks)  # a block traced as two layers (Falcon-H1): its MLP named by the block
        added_by_block = torch.zeros_like(x)  # (T, d) what the block's traced layers add
        for i, site in enumerate(sites[:-1]):
            r = adapter.residual_scale(i)
            with loaded(site.out):
                W_O, b_O = adapter.out_weights(site)  # (d, H*d_v), (d,)
            H = site.num_heads
            W_h = W_O.detach().float().cpu().view(W_O.shape[0], H, -1).permute(1, 2, 0)  # (H, d_v, d)
            c = concat[i].view(len(ids), H, -1).transpose(0, 1).float()  # (H, T, d_v)
            heads = r * torch.bmm(c, W_h)  # (H, T, d): each head's part of the stream, in float32 as the model's
            bias = None if b_O is None else (r * b_O.detach().double().cpu()).expand(len(ids), -1)  # (T, d)
            added = r * attention_out[i]  # (T, d) what the block adds to the stream
            post = adapter.post_attention_norm(i)
            if post is not None:  # Gemma 2 and 3, OLMo, LFM3: a norm on the output first, frozen per position
                post_norm = _Frozen.of(post, attention_out[i], adapter.norm_weight_offset)
                heads = post_norm.linear(heads.double()).float()
                added = r * (post_norm.linear(attention_out[i]) + (0 if post_norm.beta is None else post_norm.beta))
                with loaded(post):  # the frozen norm against the norm itself, on what it received
                    real = post(attention_out[i][None].to(next(post.parameters()).dtype))[0].double().cpu()
                self.post_error = max(self.post_error, float((added - r * real).abs().max()))
                bias = None if bias is None else post_norm.linear(bias)
            self.sources |= {f"{i}.{h}": heads[h] for h in range(H)}
            if bias is not None:
                self.sources[f"{i} attention bias"] = bias
            added_by_block = added_by_block + added
            if blocks[i + 1] is blocks[i]:
                continue  # Falcon-H1: the block's Mamba-2 half adds to the same stream as its attention
            mlp = f"block {sum(blocks[j] is not blocks[j + 1] for j in range(i))} MLP" if shared else f"{i} MLP"
            self.sources[mlp] = block_in[i + 1] - block_in[i] - added_by_block
            added_by_block = torch.zeros_like(x)
        zero = 1e-6 * float(x.abs().max())  # what a difference of two float32 streams leaves of a part that adds 0
        self.sources = {name: src.float() for name, src in self.sources.items() if src.abs().amax() > zero}  # kept
        # in float32, as the model computed them (a GPT-2-small-sized layer 11: 146 x [T, 768])
        self.x = x  # (T, d) float64
        total = torch.zeros_like(x)
        for src in self.sources.values():
            total += src
        self.residual_error = float((total - x).abs().max())
        self._rebuild(sites[-1], rec, outputs, layer, part)

    def _rebuild(self, site: Site, rec: Any, outputs: Any, layer: int, part: str) -> None:
        """Layer's attention as the trace rebuilds it from what it received (rec), checked against the model's own
        weights: its input, variations, scores (H, T, T), weights and score bias terms."""
        adapter = self.model.adapter
        hidden = rec.arguments.get("hidden_states")  # (1, T, d): the norm's output, as the attention received it
        if hidden is None:
            raise ValueError(f"score attribution is unavailable: layer {layer}'s attention takes no hidden_states")
        self.attention_input, self.dtype = hidden[0].double().cpu(), hidden.dtype
        q, k, v = (t.float() for t in adapter.heads(site, rec))
        self.projections = {"Q": q, "K": k}  # (H, T, d_k), (KV, T, d_k): before QK-norm and rotary
        self.variations = adapter.variations(part, site, rec, q, k)
        kv = list(site.kv_heads)
        a = attend(q, k[kv], v[kv], self.variations)
        # (H_q, T, T) each, per query head: a differential pair's heads i and i + H are its two maps, each a softmax
        self.scores, self.weights = a.scores, a.maps
        reference = adapter.model_attentions(outputs, part)[layer][0]  # differential: both maps, as maps
        if not torch.allclose(a.maps, reference.float(), atol=1e-4):
            raise RuntimeError(f"layer {layer}'s rebuilt weights differ from the model's own")
        T = q.shape[-2]
        self.score_bias = {n: b.double().expand(q.shape[0], T, T) for n, b in self.variations.bias.items()}
        self.linear_terms = adapter.linear_score_terms(site, rec)  # DeBERTa's c2p and p2c, in score_bias too

    def affine(self, norm: nn.Module) -> _Frozen:
        if isinstance(norm, nn.Identity):
            return _Frozen.identity(*self.x.shape)
        try:
            return _Frozen.of(norm, self.x, self.model.adapter.norm_weight_offset)  # its scales (T,), one per position
        except ValueError as error:
            raise ValueError(f"score attribution is unavailable: {error}") from None

    def projection(self, site: Site, head: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Head's W_Q, W_K (d, d_k) and b_Q, b_K (d_k,), float64 (zeros where the model has no bias)."""
        from ..pretrained.adapter import loaded

        kv = site.kv_heads[head]
        with loaded(site.q, site.k):
            P = self.model.adapter.projection_weights(site)
        if P["W_Q"] is None or P["W_K"] is None:
            raise _NoHeadWeights(site)
        W = {"Q": P["W_Q"][head], "K": P["W_K"][kv]}
        W = {n: w.detach().double().cpu() for n, w in W.items()}
        b = {n: (torch.zeros(W[n].shape[-1], dtype=torch.float64) if P[f"b_{n}"] is None
                 else P[f"b_{n}"][head if n == "Q" else kv].detach().double().cpu()) for n in "QK"}
        return W, b

    def _run(self, site: Site, hidden: Tensor, frozen_inner: bool) -> tuple[Tensor, Tensor, Tensor, Variations]:
        """Per-head q (H, T, d), k (KV, T, d) (before rotary) and v (KV, T, d_v) of layer L's attention module called
        again on hidden (T, d) with its call's other arguments (no cache), and the variations of that call (where the
        input picks the keys, DeepSeek-V3.2's indexer, its own); frozen_inner: its inner norms at their measured
        scales."""
        from ..pretrained.adapter import Recorder
        from .visibility import CACHES

        call = {n: (None if n in CACHES else v) for n, v in self.call.items()}
        call["hidden_states"] = hidden[None].to(self.dtype)
        with Recorder(site) as rec, contextlib.ExitStack() as hooks:
            if frozen_inner:
                for module, received in self.inner.items():
                    hooks.callback(module.register_forward_hook(_frozen_norm(module, received,
                                                                             self.model.adapter.norm_weight_offset)).remove)
            site.attention(**call)
        q, k, v = self.model.adapter.heads(site, rec)
        var = self.model.adapter.variations(self.part, site, rec, q.float(), k.float())
        return q.double(), k.double(), v.double(), var

    def module_parts(self, site: Site, affine: _Frozen, head: int, query: int, visible: Sequence[int]
                     ) -> tuple[Tensor, Tensor]:
        """(S + 1, 1, d) query and (S + 1, keys, d) key parts of layer L's head where no W_Q, W_K per head exist
        (latent attention): with the pre-attention norm and every norm inside the module frozen, the module's q and
        k are affine in its input, so source a's part is run(its normed part) - run(0), and the constant part
        run(the norm's shift)."""
        if not self.inner:
            raise ValueError("score attribution is unavailable: this layer has no W_Q and W_K per head and no norm "
                             "inside its attention module to freeze")
        T, d = self.x.shape
        scales = affine.scales[:, None]  # (T, 1)
        zero_q, zero_k, _, _ = self._run(site, torch.zeros(T, d, dtype=torch.float64), True)
        kv = site.kv_heads[head]
        qs, ks = [], []
        for src in self.sources.values():
            q, k, _, _ = self._run(site, affine.gamma * affine.centre(src.double()) / scales, True)
            qs.append((q - zero_q)[head, [query]])
            ks.append((k - zero_k)[kv, list(visible)])
        constant = torch.zeros(T, d, dtype=torch.float64) if affine.beta is None else affine.beta.expand(T, d)
        q, k, _, _ = self._run(site, constant, True)
        qs.append(q[head, [query]])
        ks.append(k[kv, list(visible)])
        return torch.stack(qs), torch.stack(ks)

    def removed_by_module(self, norm: nn.Module, site: Site, head: int, query: int) -> Tensor:
        """removed() where no W_Q, W_K per head exist or a QK-norm needs every head (_needs_every_head): the
        module itself run on each source's removal, through the real norms (the pre-attention one and its own), and
        every head through the layer's attention as that run sets it (the keys an indexer keeps); the head's row of
        its maps."""
        kv = list(site.kv_heads)
        rows = []
        for src in self.sources.values():
            q, k, v, var = self._run(site, norm((self.x - src.double()).to(self.dtype)).double(), False)
            rows.append(attend(q.float(), k[kv].float(), v[kv].float(), var).maps[head, query].double())
        return torch.stack(rows)

    def removed(self, norm: nn.Module, W: dict[str, Tensor], b: dict[str, Tensor], head: int, query: int) -> Tensor:
        """(sources, T): the query's softmax row with each source taken out of x at every position, through the
        real norm, the head's projections W, b (projection()) and its attention (its rotary, mask and bias), in
        float32 as the model; 16 sources at a time, each one a head of attend()."""
        W, b = {n: w.float() for n, w in W.items()}, {n: v.float() for n, v in b.items()}
        var = self.variations
        one = _one_head(var, head)
        x, sources, rows = self.x.float(), list(self.sources.values()), []
        for i in range(0, len(sources), 16):
            a = norm((x - torch.stack(sources[i:i + 16])).to(self.dtype)).float()  # (c, T, d)
            q, k = a @ W["Q"] + b["Q"], a @ W["K"] + b["K"]  # (c, T, d_k)
            if self.linear_terms:  # DeBERTa's c2p and p2c move with q and k
                one = replace(one, bias={**one.bias, **linear_bias(self.linear_terms, var.scale, q, k, head)})
            rows.append(attend(q, k, k, one).weights[:, query].double())  # (c, T)
        return torch.cat(rows)


@torch.no_grad()
def _hooked_score_attribution(model: HookedModel, text: str, layer: int, head: int, query: int, key: int | None
                              ) -> ScoreAttribution:
    """score_attribution of a TransformerLens model: block L's hook_resid_pre split into its sources
    (score_attribution_hooked), ln1 and a QK-norm frozen as a Hugging Face model's norms are, and the model's own
    hook_attn_scores split."""
    from ..pretrained.attribution import frozen

    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer {layer} is not a layer of {model.name} (0..{cfg.n_layers - 1})")
    if not 0 <= head < cfg.n_heads:
        raise ValueError(f"head {head} is not a head of layer {layer} (0..{cfg.n_heads - 1})")
    enc = model.encode(text)
    T = len(enc.ids)
    _check_positions(query, key, T)
    stream = HookedStream(model, enc.ids, layer)
    scores = stream.scores[head, query].double()  # (T,) the model's own row, masked -inf
    names = (*stream.sources, "bias")
    visible = _explained_keys(scores, query, key, layer, len(names), len(names))
    d = stream.x.shape[-1]
    affine = _Frozen.identity(T, d) if stream.norm is None else _Frozen(*frozen(stream.norm, stream.x))  # scales (T,)
    sources = list(stream.sources.values())
    W, b = stream.projection(head)
    q = affine.projected(sources, [query], W["Q"], b["Q"])  # (S, 1, d_k): each source's part of the query
    k = affine.projected(sources, visible, W["K"], b["K"])  # (S, keys, d_k): and of each key
    if stream.qk_norms is not None:  # QK-norm: an RMSNorm over d_head, frozen at its scale on each whole q and k
        q, k = (_Frozen(*frozen(n, parts.sum(0))).linear(parts) for n, parts in zip(stream.qk_norms, (q, k)))
    q, k = _rotated(stream.variations, q, k, query, visible)
    terms = stream.variations.scale * torch.einsum("ad,bkd->kab", q[:, 0], k)  # (keys, S, S)
    other: dict[str, np.ndarray] = {}
    rebuilt = _rebuilt(stream.variations, terms, other)
    whole = affine.projected([stream.x], range(T), torch.eye(d, dtype=torch.float64))  # (2, T, d): x, the shift
    check = {"sum of terms vs score": float((rebuilt - scores[visible]).abs().max()),
             "sum of sources vs stream": stream.residual_error,
             "frozen norm vs the attention's input": float((whole.sum(0) - stream.attention_input).abs().max()),
             "frozen post-attention norms vs the norms": 0.0}  # TransformerLens: no norm after the attention
    return ScoreAttribution(
        tokens=enc.tokens, layer=layer, head=head, query=query, keys=tuple(visible), sources=names,
        terms=terms.numpy(), other=other, scores=scores[visible].numpy(),
        weights=stream.weights[head, query].double().numpy(), removed=stream.removed(head, query).numpy(),
        norm=affine.kind, norm_scales=affine.scales.numpy(), check=check)


def _check_positions(query: int, key: int | None, T: int, S: int | None = None) -> None:
    """ValueError for a query that is not a position of the T-token input, or a key not one of the S-token input the
    keys read (S: T, but in cross-attention)."""
    for what, position, n in (("query", query, T), ("key", key, T if S is None else S)):
        if position is not None and not 0 <= position < n:
            raise ValueError(f"{what} {position} is not a position of the {n}-token input (0..{n - 1})")


def _explained_keys(scores: Tensor, query: int, key: int | None, layer: int, rows: int, columns: int) -> list[int]:
    """The keys to explain in the query's score row (S,) (masked: -inf): key, or every key the query sees.
    ValueError for a masked key, or every key's (rows x columns) tables, query by key sources, past MAX_TABLE_BYTES."""
    if key is not None and not torch.isfinite(scores[key]):
        raise ValueError(f"query {query} does not see key {key} in layer {layer} (masked): its score is -inf")
    visible = [j for j in range(len(scores)) if torch.isfinite(scores[j])] if key is None else [key]
    need = len(visible) * rows * columns * 8
    if need > MAX_TABLE_BYTES:
        raise ValueError(f"{len(visible):,} keys x {rows} x {columns} sources would take "
                         f"{need / 2**20:,.0f} MiB, more than {MAX_TABLE_BYTES / 2**20:,.0f} MiB: ask for one key")
    return visible


def _rotated(var: Variations, q: Tensor, k: Tensor, query: int, visible: Sequence[int]) -> tuple[Tensor, Tensor]:
    """The query's parts q (S, 1, d_k) and the keys' k (S, keys, d_k) rotated where the layer rotates."""
    if var.rotary is None:
        return q, k
    cos, sin = (t.double().cpu() for t in var.rotary)  # (T, r)
    return apply_rotary(q, cos[[query]], sin[[query]]), apply_rotary(k, cos[visible], sin[visible])


def _rebuilt(var: Variations, terms: Tensor, other: dict[str, np.ndarray]) -> Tensor:
    """The scores (keys,) that the terms (keys, S, S) and the other terms (score biases by name, (keys,) each)
    rebuild. A soft cap (Gemma 2) reads cap * tanh(raw / cap): its change joins other as "soft cap" and the scores
    are capped, to be checked against the capped scores."""
    rebuilt = terms.sum((1, 2)) + sum(torch.as_tensor(o) for o in other.values())  # (keys,)
    if var.softcap is None:
        return rebuilt
    capped = var.softcap * torch.tanh(rebuilt / var.softcap)
    other["soft cap"] = (capped - rebuilt).numpy()
    return capped


def _needs_every_head(var: Variations) -> bool:
    """Whether a QK-norm reads every head at once (OLMo 2 and 3) or holds a weight per head (Cohere), so one head's
    queries or keys alone cannot go through it."""
    from ..pretrained.cohere import HeadLayerNorm
    from ..pretrained.olmo import AcrossHeads

    return any(isinstance(norm, (AcrossHeads, HeadLayerNorm)) for norm in (var.q_norm, var.k_norm))


def _one_head(var: Variations, head: int) -> Variations:
    """var for one query head's softmax row alone: its own bias, sink and mask; no gate, head norm or second map."""
    return replace(var, bias={n: t[head:head + 1] for n, t in var.bias.items()},
                   sinks=None if var.sinks is None else var.sinks[head:head + 1], gates=None, head_norm=None,
                   differential=None,  # one query head: one map
                   mask=var.mask if var.mask is None or var.mask.shape[0] == 1 else var.mask[head:head + 1])


class _Times(nn.Module):
    """x -> factor * x: the factor on the normed stream where a layer reads it scaled (Falcon-H1's a_in)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return self.factor * x


class _NoHeadWeights(Exception):
    """The layer has no W_Q and W_K per head (latent attention)."""


@contextlib.contextmanager
def _inner_norms(attention: nn.Module, store: dict[nn.Module, Tensor]) -> Iterator[None]:
    """While open, what each norm inside the attention module (a latent's, a QK-norm) receives first goes to store."""
    from ..pretrained.norms import norm_affine

    handles = []
    for module in attention.modules():
        if module is attention or getattr(module, "weight", None) is None:
            continue
        try:
            norm_affine(module, module.weight.shape[-1])
        except ValueError:
            continue  # not a norm

        def keep(mod: nn.Module, args: tuple, module: nn.Module = module) -> None:
            store.setdefault(module, args[0].detach().double().cpu())

        handles.append(module.register_forward_pre_hook(keep))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _frozen_norm(norm: nn.Module, received: Tensor, offset: float) -> Callable:
    """A forward hook that makes norm affine: its output gamma * centre(x) / s (+ beta), s measured on received (its
    input in the real forward pass, one scale per vector)."""
    affine = _Frozen.of(norm, received, offset)

    def hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        shift = 0 if affine.beta is None else affine.beta
        return (affine.linear(args[0].double().cpu()) + shift).to(output)

    return hook


class _EncoderStream(_Stream):
    """A post-norm encoder (BERT, MiniLM): layer L's input x (T, d) split into its sources. Each LayerNorm on the way,
    the embeddings' and each earlier layer's two, is frozen at its scale at each position, so it is affine and every
    source goes through it: gamma * centre(src) / s, its beta into the constant source "biases (norms, W_O)" (with
    each W_O's bias). An earlier layer's MLP is its output norm's input minus its attention norm's output. ALBERT runs
    one layer's modules once per layer: layer l reads their site.call-th call."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int) -> None:
        from ..pretrained.adapter import Recorder, loaded
        from .score_streams import Calls

        adapter, self.model, self.part = model.adapter, model, "encoder"
        post = adapter.post_norms()
        sites = [adapter.site("encoder", i) for i in range(layer + 1)]
        with (Calls([post.embeddings, *post.attention[:layer], *post.output[:layer], *(s.out for s in sites[:-1])])
              as seen, Recorder(sites[-1]) as rec):  # every norm's input and output, each concat, call by call
            outputs = adapter.forward(list(ids))
        embedded = seen.input(post.embeddings, 0)  # (T, e) the embeddings' sum
        ids_t = torch.tensor([list(ids)], device=adapter.device())
        sources = {"token": post.word(ids_t)[0].detach().double().cpu()}  # (T, d)
        if post.token_type is not None:
            sources["token type"] = post.token_type(torch.zeros_like(ids_t))[0].detach().double().cpu()
        position = embedded - sum(sources.values())  # what the embeddings add by position
        if position.abs().max() > 0:  # none in a DeBERTa without position_biased_input
            sources["position"] = position
        constant = torch.zeros_like(sources["token"])  # (T, d)
        self.residual_error = self.post_error = 0.0
        sources, constant = self._normed(post.embeddings, sources, constant, embedded)
        if post.project is not None:  # ELECTRA, ALBERT: the normed embeddings projected to the model's width (affine)
            with loaded(post.project):
                W, b = post.project.weight.detach().double().cpu(), post.project.bias
            sources = {name: src @ W.T for name, src in sources.items()}
            constant = constant @ W.T + (0 if b is None else b.detach().double().cpu())
        for i, site in enumerate(sites[:-1]):  # layer i: its modules' site.call-th call (ALBERT shares them)
            with loaded(site.out):
                W_O, b_O = adapter.out_weights(site)  # (d, H*d_v), (d,)
            H = site.num_heads
            W_h = W_O.detach().double().cpu().view(W_O.shape[0], H, -1).permute(1, 2, 0)  # (H, d_v, d)
            c = seen.input(site.out, site.call).view(len(ids), H, -1).transpose(0, 1)  # (H, T, d_v)
            sources |= {f"{i}.{h}": head for h, head in enumerate(torch.bmm(c, W_h))}  # (T, d) each
            if b_O is not None:
                constant = constant + b_O.detach().double().cpu()
            sources, constant = self._normed(post.attention[i], sources, constant,
                                             seen.input(post.attention[i], site.call))
            mlp_in = seen.input(post.output[i], site.call)  # the MLP's output plus the attention norm's
            sources[f"{i} MLP"] = mlp_in - seen.output(post.attention[i], site.call)
            sources, constant = self._normed(post.output[i], sources, constant, mlp_in)
        sources["biases (norms, W_O)"] = constant
        self.sources = {name: src.float() for name, src in sources.items()}
        self._rebuild(sites[-1], rec, outputs, layer, "encoder")
        self.x = self.attention_input  # (T, d) no norm before the attention
        self.residual_error = max(self.residual_error, float((sum(sources.values()) - self.x).abs().max()))

    def _normed(self, norm: nn.Module, sources: dict[str, Tensor], constant: Tensor, received: Tensor
                ) -> tuple[dict[str, Tensor], Tensor]:
        """sources and the constant through norm frozen at its scale on what it received (T, d); the sources' sum
        against that input goes into residual_error."""
        self.residual_error = max(self.residual_error, float((sum(sources.values()) + constant - received).abs().max()))
        frozen = _Frozen.of(norm, received, self.model.adapter.norm_weight_offset)  # scales (T,)
        normed = {name: frozen.linear(src) for name, src in sources.items()}
        return normed, frozen.linear(constant) + (0 if frozen.beta is None else frozen.beta)


class _NormedStream(_EncoderStream):
    """A decoder whose blocks normalise the stream itself (MiniMax, adapter.normed_block): block l maps x to
        n1 = input_norm(x),  n2 = post_norm(alpha_a n1 + beta_a attention(n1)),  x' = alpha_m n2 + beta_m MLP(n2)
    Each norm is frozen at its scale per position, as in a post-norm encoder, and every source goes through it;
    the attention's heads (times beta_a) join after input_norm, MLP_l = x' - alpha_m n2 after post_norm. Layer L
    reads input_norm(x_L): the frozen pre-attention norm, as in _Stream."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int) -> None:
        from ..pretrained.adapter import Recorder, loaded
        from ..pretrained.attribution import Capture

        adapter, self.model, self.part = model.adapter, model, "decoder"
        steps = [adapter.normed_block(i) for i in range(layer + 1)]
        norms = [*(n for step in steps[:-1] for n in (step.input_norm, step.post_norm)), steps[-1].input_norm]
        sites = [adapter.site("decoder", i) for i in range(layer + 1)]
        self.inner = {}
        with (Capture(norms, [site.out for site in sites[:-1]], None, slice(None)) as capture,
              Recorder(sites[-1]) as rec):  # every norm's input and output, each concat
            outputs = adapter.forward(list(ids))
        self.call = dict(rec.arguments)
        embeddings = capture.block_in[0]  # (T, d)
        token = model.model.get_input_embeddings()(torch.tensor([list(ids)], device=adapter.device()))[0]
        sources = {"token" if torch.allclose(embeddings, token.double().cpu()) else "embeddings": embeddings}
        constant = torch.zeros_like(embeddings)  # (T, d)
        self.residual_error = self.post_error = 0.0
        for i, (step, site) in enumerate(zip(steps[:-1], sites[:-1], strict=True)):
            (alpha_a, beta_a), alpha_m = step.attention, step.mlp[0]  # beta_m: inside the MLP source
            sources, constant = self._normed(step.input_norm, sources, constant, capture.block_in[2 * i])
            sources, constant = {n: alpha_a * src for n, src in sources.items()}, alpha_a * constant
            with loaded(site.out):
                W_O, b_O = adapter.out_weights(site)  # (d, H*d_v), (d,)
            H = site.num_heads
            W_h = W_O.detach().double().cpu().view(W_O.shape[0], H, -1).permute(1, 2, 0)  # (H, d_v, d)
            c = capture.concat[i].view(len(ids), H, -1).transpose(0, 1)  # (H, T, d_v)
            sources |= {f"{i}.{h}": beta_a * head for h, head in enumerate(torch.bmm(c, W_h))}  # (T, d) each
            if b_O is not None:
                constant = constant + beta_a * b_O.detach().double().cpu()
            sources, constant = self._normed(step.post_norm, sources, constant, capture.block_in[2 * i + 1])
            sources, constant = {n: alpha_m * src for n, src in sources.items()}, alpha_m * constant
            sources[f"{i} MLP"] = capture.block_in[2 * i + 2] - alpha_m * capture.block_out[2 * i + 1]
        self.x = capture.block_in[2 * layer]  # (T, d): layer L's block input
        sources["biases (norms, W_O)"] = constant
        zero = 1e-6 * float(self.x.abs().max())  # a part that adds 0 (RMSNorms and no W_O bias: the constant)
        self.sources = {name: src.float() for name, src in sources.items() if src.abs().amax() > zero}
        self.residual_error = max(self.residual_error, float((sum(sources.values()) - self.x).abs().max()))
        self._rebuild(sites[-1], rec, outputs, layer, "decoder")


class _Seq2SeqStream(_EncoderStream):
    """An encoder-decoder's stack (T5, BART) at part's layer L attention: its sources as
    score_streams_seq2seq.stack_stream splits them, its attention rebuilt as in the other streams. Cross-attention:
    the queries read the decoder's stream before the layer's cross-attention, the keys the encoder's output, whose
    own sources (key_sources) go through the encoder's final norm (T5's) frozen at its scales (key_affine)."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], decoder_ids: Sequence[int], part: str,
                 layer: int) -> None:
        from .score_streams_seq2seq import stack_stream

        stack, step = ("decoder", "cross") if part == "cross" else (part, "self")
        split = stack_stream(model, ids, decoder_ids, stack, layer, step)
        self.model, self.part = model, part
        self.sources, self.x, self.residual_error = split.sources, split.x, split.residual_error
        self.post_error = 0.0
        self._rebuild(split.site, split.rec, split.outputs, layer, part)
        self.key_sources: dict[str, Tensor] | None = None
        if part == "cross":
            encoder = stack_stream(model, ids, decoder_ids, "encoder", model.num_layers["encoder"])
            final = model.adapter.stack_layout("encoder").final_norm
            self.final = nn.Identity() if final is None else final
            self.key_sources, self.key_x = encoder.sources, encoder.x  # (S, d) each
            self.key_affine = _Frozen.identity(*encoder.x.shape) if final is None else _Frozen.of(final, encoder.x)
            self.residual_error = max(self.residual_error, encoder.residual_error)
            eye = torch.eye(encoder.x.shape[-1], dtype=torch.float64)
            whole = self.key_affine.projected([encoder.x], range(len(encoder.x)), eye).sum(0)  # (S, d) normed
            real = self.model.adapter.final_hidden(split.outputs, "encoder")[0].double().cpu()  # what the keys read
            self.key_check = {"frozen final norm vs the encoder's output": float((whole - real).abs().max())}

    def removed(self, norm: nn.Module, W: dict[str, Tensor], b: dict[str, Tensor], head: int, query: int) -> Tensor:
        """Self-attention: _Stream.removed. Cross-attention: (query sources + key sources, S): the row with each query
        source taken out of the decoder's stream (through the real norm before the cross-attention), then with each
        key source taken out of the encoder's output (through its real final norm), the other side as it was."""
        if self.key_sources is None:
            return super().removed(norm, W, b, head, query)
        W, b = {n: w.float() for n, w in W.items()}, {n: v.float() for n, v in b.items()}
        one = _one_head(self.variations, head)

        def projected(module: nn.Module, x: Tensor, parts: Sequence[Tensor], n: str) -> Tensor:  # (1 + c, ., d_k)
            inputs = torch.stack([x.float(), *(x.float() - src for src in parts)])  # the real x first
            return module(inputs.to(self.dtype)).float() @ W[n] + b[n]

        q = projected(norm, self.x, list(self.sources.values()), "Q")  # (1 + S_q, T, d_k)
        k = projected(self.final, self.key_x, list(self.key_sources.values()), "K")  # (1 + S_k, S, d_k)
        rows = [attend(q[1:], k[:1].expand(len(q) - 1, -1, -1), k[:1].expand(len(q) - 1, -1, -1), one).weights,
                attend(q[:1].expand(len(k) - 1, -1, -1), k[1:], k[1:], one).weights]
        return torch.cat(rows)[:, query].double()
