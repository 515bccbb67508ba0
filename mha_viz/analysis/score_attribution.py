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
A per-head norm on queries and keys (QK-norm: Qwen 3, Cohere) is frozen the same way, at its scale on each position's
whole query or key, before the rotation; OLMo's, one norm across every head at once, at its scale on the whole
projection. A norm on each sublayer's output before the stream adds it (Gemma 2 and 3, OLMo, LFM3; OLMo has no norm
before the attention) is frozen at its scale per position too, every source of that output through it; so is every
norm of a stream that passes one at each step (post-norm encoders, MiniMax). The score is bilinear in q and k, one
term per (query source a, key source b):
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

Gemma 3n carries several AltUp streams, mixed by router coefficients per position (score_streams_altup): with those
and every norm frozen at their values in the real pass, each source's share of every stream is carried through the
layers, and layer L reads its active prediction through input_layernorm. Its KV-shared layers read the keys an
earlier layer computed: their terms are (this layer's source x that layer's source), removed[a] one side at a time.

Where the parts live: score_frozen (the frozen norms), score_streams (a decoder's or pre-norm encoder's stream, and
DeBERTa's position terms), score_streams_normed (streams with a norm at every step), score_streams_seq2seq (T5, BART),
score_streams_altup (Gemma 3n), score_attribution_hooked (a TransformerLens model's stream, from its hook points).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import Variations, apply_rotary
from .score_attribution_hooked import HookedStream, hooked_unavailable
from .score_frozen import Frozen, Times, frozen_norm, head_normed, inner_norms
from .score_streams import RELATIVE, NoHeadWeights, Stream, needs_every_head, with_linear_terms
from .score_streams_altup import AltUpStream
from .score_streams_normed import EncoderStream, NormedStream
from .score_streams_seq2seq import Seq2SeqStream

if TYPE_CHECKING:
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
    key_sources: tuple[str, ...] | None = None  # cross-attention: the key side's sources (the encoder output's; in a
    # KV-shared layer, those of the layer whose keys it reads), the columns of terms; removed then has a row for each
    # query source but "bias", then each key source but "bias"
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
    if adapter.kind == "decoder" and adapter.altup() is not None:
        return adapter.scores_unavailable  # AltUp's several streams (Gemma 3n): score_streams_altup
    if adapter.kind == "decoder" and adapter.residual_stream() is None and adapter.scores_unavailable is not None:
        return adapter.scores_unavailable  # a stream of its own, said by the adapter
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
        stream = Seq2SeqStream(model, source.ids, decoder.ids, part, layer)
    else:
        stream = (EncoderStream(model, enc.ids, layer) if post_norm
                  else AltUpStream(model, enc.ids, layer) if adapter.altup() is not None
                  else NormedStream(model, enc.ids, layer) if adapter.normed_block(layer) is not None
                  else Stream(model, enc.ids, layer, part))
    var = stream.variations
    affine = stream.affine(norm)
    factor = adapter.attention_in_scale(layer)  # Falcon-H1: the attention reads the normed stream times a_in
    if factor != 1.0:
        affine = replace(affine, gamma=factor * affine.gamma, beta=None if affine.beta is None else factor * affine.beta)
        norm = nn.Sequential(norm, Times(factor))
    names = (*stream.sources, "bias")
    two_sided = stream.key_sources is not None  # cross-attention, a KV-shared layer (Gemma 3n)
    key_affine, key_sources = (stream.key_affine, stream.key_sources) if two_sided else (affine, stream.sources)
    key_names = (*key_sources, "bias")  # cross-attention: the encoder output's; a KV-shared layer: the key layer's
    scores = stream.scores[head, query]  # (S,) the trace's rebuilt row, masked -inf
    visible = _explained_keys(scores, query, key, layer, len(names), len(key_names))
    sources = list(stream.sources.values())
    W = b = None
    try:
        W, b = stream.projection(site, head)
    except NoHeadWeights:  # latent attention: each source run through the module itself, its inner norms frozen
        q, k = stream.module_parts(site, affine, head, query, visible)
    else:
        q = affine.projected(sources, [query], W["Q"], b["Q"])  # (S, 1, d_k): each source's part of the query
        k = key_affine.projected(list(key_sources.values()), visible, W["K"], b["K"])  # (S, keys, d_k): each key
        offset = model.adapter.norm_weight_offset
        kv = site.kv_heads[head]  # QK-norm, frozen too: per head, or across the projection (OLMo 2 and 3)
        q = head_normed(var.q_norm, q, offset, [query], stream.projections["Q"], head)
        k = head_normed(var.k_norm, k, offset, visible, stream.projections["K"], kv)
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
             **stream.checks}
    removed = (stream.removed(norm, W, b, head, query) if W is not None and not needs_every_head(var)
               else stream.removed_by_module(norm, site, head, query))  # (sources, S)
    if stream.linear_terms:  # RELATIVE taken out: the content score alone
        linear = sum(stream.score_bias[n][head, query] for n in stream.linear_terms)  # (T,)
        removed = torch.cat([removed, torch.softmax(stream.scores[head, query].double() - linear, -1)[None]])
    return ScoreAttribution(
        tokens=enc.tokens, layer=layer, head=head, query=query, keys=tuple(visible), sources=names,
        terms=terms.numpy(), other=other, scores=scores[visible].double().numpy(),
        weights=stream.weights[head, query].double().numpy(), removed=removed.numpy(), norm=affine.kind,
        norm_scales=affine.scales.numpy(), check=check, key_sources=key_names if two_sided else None,
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
    with inner_norms(layer, inner) if layer is not None else contextlib.nullcontext():
        full = run(x)
    frozen_run = run
    if inner:
        def frozen_run(inputs: Tensor) -> AttentionTrace:  # the inner norms at their scales on x
            with contextlib.ExitStack() as hooks:
                for module, received in inner.items():
                    hooks.callback(module.register_forward_hook(frozen_norm(module, received, 0.0)).remove)
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
    names = (*stream.sources, *(() if stream.position is None else ("position",)), "bias")
    visible = _explained_keys(scores, query, key, layer, len(names), len(names))
    d = stream.x.shape[-1]
    affine = Frozen.identity(T, d) if stream.norm is None else Frozen(*frozen(stream.norm, stream.x))  # scales (T,)
    sources = list(stream.sources.values())
    W, b = stream.projection(head)
    q = affine.projected(sources, [query], W["Q"], b["Q"])  # (S, 1, d_k): each source's part of the query
    k = affine.projected(sources, visible, W["K"], b["K"])  # (S, keys, d_k): and of each key
    if stream.position is not None:  # shortformer: q = (ln1(x) + position) W_Q + b_Q, a part outside the norm
        q = torch.cat([q[:-1], (stream.position[[query]] @ W["Q"])[None], q[-1:]])
        k = torch.cat([k[:-1], (stream.position[visible] @ W["K"])[None], k[-1:]])
    if stream.qk_norms is not None:  # QK-norm: an RMSNorm over d_head, frozen at its scale on each whole q and k
        q, k = (Frozen(*frozen(n, parts.sum(0))).linear(parts) for n, parts in zip(stream.qk_norms, (q, k)))
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
