"""Score attribution's residual stream: one hooked forward pass, layer L's input split into its sources (Stream: a
decoder-only model, or a pre-norm encoder), and what the other streams add: hooks call by call, DeBERTa's position
terms as a source.

Stream: block l adds r_l (sum_h c_lh W_O^(l,h)T + b_O^(l)) and its MLP to x; a norm on each sublayer's output (Gemma 2
and 3, OLMo, LFM3) is frozen per position, every source of that output through it; a block traced as two layers
(Falcon-H1) adds both halves' heads, and one MLP.

A module shared by several layers (ALBERT runs one layer's modules once per layer) is called once per layer: layer l's
tensors are those of its site.call-th call (Calls).

DeBERTa's disentangled attention adds to scale * q_i . k_j two terms linear in one side (pretrained.deberta):
    c2p_ij = scale * q_i . k_r[delta(i, j)]    linear in the query: sum_a scale * q_a,i . k_r[delta(i, j)]
    p2c_ij = scale * k_j . q_r[delta'(i, j)]   linear in the key:   sum_b scale * k_b,j . q_r[delta'(i, j)]
They are one more source of the table, "relative position" (0 in the stream: it enters the score, not x), put
before "bias": its column holds c2p by query source (query source a x relative position), its row p2c by key source
(relative position x key source b), its own cell 0; so the table sums to the whole score and other holds neither.
Its removed row is the query's softmax row without c2p and p2c (the content score alone). A stream source's removed
row recomputes c2p and p2c from the query and keys without that source, as the model would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import Tensor, nn

from ..attention import Variations, attend
from .score_frozen import Frozen, frozen_norm, inner_norms

if TYPE_CHECKING:
    from ..pretrained.adapter import LinearTerm, Site
    from ..pretrained.model import PretrainedModel


class Calls:
    """Forward hooks for one forward pass: each module's first input and its output at every call, kept as float64
    (T, n), batch dropped."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.modules = list(dict.fromkeys(modules))  # each distinct module hooked once
        self.inputs: dict[nn.Module, list[Tensor]] = {m: [] for m in self.modules}
        self.outputs: dict[nn.Module, list[Tensor]] = {m: [] for m in self.modules}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        for module in self.modules:
            self._handles += [module.register_forward_pre_hook(self._on_call, with_kwargs=True),
                              module.register_forward_hook(self._on_return)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def input(self, module: nn.Module, call: int) -> Tensor:
        """(T, n) what module received first on its call-th call."""
        return self.inputs[module][call]

    def output(self, module: nn.Module, call: int) -> Tensor:
        """(T, n) what module returned (its first output) on its call-th call."""
        return self.outputs[module][call]

    @staticmethod
    def _kept(x: Tensor) -> Tensor:
        return x.detach()[0].double().cpu()  # (1, T, n) -> (T, n)

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.inputs[module].append(self._kept(args[0] if args else kwargs["hidden_states"]))

    def _on_return(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.outputs[module].append(self._kept(output if isinstance(output, Tensor) else output[0]))


RELATIVE = "relative position"  # DeBERTa's c2p and p2c, as a source of the table


def with_linear_terms(linear: dict[str, LinearTerm], scale: float, q: Tensor, k: Tensor, head: int, query: int,
                      visible: Sequence[int], terms: Tensor) -> Tensor:
    """terms (keys, n, n) of the n sources ("bias" last) with the score terms linear in the query or the key (DeBERTa's
    c2p and p2c) as one more source, RELATIVE, put before "bias": (keys, n + 1, n + 1). Its column holds each query
    source a's part of the terms linear in the query, scale * q_a,i . v[index[i, j]]; its row each key source b's
    part of those linear in the key, scale * k_b,j . v[index[i, j]]; its own cell is 0. q (n, 1, d_k) and k
    (n, keys, d_k) are the sources' parts of the query and the keys."""
    keys, n = terms.shape[:2]
    full = torch.zeros(keys, n + 1, n + 1, dtype=torch.float64)
    full[:, :n, :n] = terms
    for term in linear.values():
        v = term.vectors[head].double()[term.index[query, list(visible)]]  # (keys, d_k)
        if term.side == "query":
            full[:, :n, n] += scale * torch.einsum("ad,kd->ka", q[:, 0], v)  # c2p: [key, query source a]
        else:
            full[:, n, :n] += scale * torch.einsum("bkd,kd->kb", k, v)  # p2c: [key, key source b]
    order = [*range(n - 1), n, n - 1]  # RELATIVE before "bias"
    return full[:, order][:, :, order]


def linear_bias(linear: dict[str, LinearTerm], scale: float, q: Tensor, k: Tensor, head: int) -> dict[str, Tensor]:
    """Each linear term of one query head times the scale, on other queries and keys: q (c, T, d_k), k (c, S, d_k)
    -> (c, T, S) each (a stream without a source: the terms move with q and k)."""
    return {name: scale * replace(t, vectors=t.vectors[[head]].to(q)).scores(q, k) for name, t in linear.items()}


class Stream:
    """One forward pass of the model, hooked: layer L's block input x (T, d) split into its sources, and layer L's
    attention as the trace rebuilds it (its variations, scores and weights). part: "decoder" (a decoder-only model's
    residual_stream) or "encoder" (a pre-norm encoder's encoder_blocks: ModernBERT)."""

    key_sources: dict[str, Tensor] | None = None  # where the keys read another stream than the queries (cross-
    # attention, Gemma 3n's KV-shared layers): its sources, (S, d) each, through key_affine
    key_affine: Frozen
    checks: Mapping[str, float] = MappingProxyType({})  # more freezings against what the modules returned, by name

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int, part: str = "decoder") -> None:
        from ..pretrained.adapter import Recorder, loaded
        from ..pretrained.attribution import Capture

        adapter, self.model, self.part = model.adapter, model, part
        blocks = adapter.residual_stream()[0] if part == "decoder" else adapter.encoder_blocks()
        sites = [adapter.site(part, layer_) for layer_ in range(layer + 1)]
        self.inner: dict[nn.Module, Tensor] = {}  # each norm inside layer L's attention module -> what it received
        with (Capture(blocks[:layer + 1], [site.out for site in sites[:-1]], None, slice(None)) as capture,
              Recorder(sites[-1]) as rec, inner_norms(sites[-1].attention, self.inner)):  # every position of each
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
            heads, b_O = head_parts(adapter, site, concat[i], torch.float32)  # in float32, as the model computed them
            heads = r * heads  # (H, T, d): each head's part of the stream
            bias = None if b_O is None else (r * b_O).expand(len(ids), -1)  # (T, d)
            added = r * attention_out[i]  # (T, d) what the block adds to the stream
            post = adapter.post_attention_norm(i)
            if post is not None:  # Gemma 2 and 3, OLMo, LFM3: a norm on the output first, frozen per position
                post_norm = Frozen.of(post, attention_out[i], adapter.norm_weight_offset)
                heads = post_norm.linear(heads.double()).float()
                added = r * (post_norm.linear(attention_out[i]) + (0 if post_norm.beta is None else post_norm.beta))
                with loaded(post):  # the frozen norm against the norm itself, on what it received
                    real = post(attention_out[i][None].to(next(post.parameters()).dtype))[0].double().cpu()
                self.post_error = max(self.post_error, float((added - r * real).abs().max()))
                bias = None if bias is None else post_norm.linear(bias)
            self.sources |= {f"{i}.{h}": head for h, head in enumerate(heads)}
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

    def affine(self, norm: nn.Module) -> Frozen:
        if isinstance(norm, nn.Identity):
            return Frozen.identity(*self.x.shape)
        try:
            return Frozen.of(norm, self.x, self.model.adapter.norm_weight_offset)  # its scales (T,), one per position
        except ValueError as error:
            raise ValueError(f"score attribution is unavailable: {error}") from None

    def projection(self, site: Site, head: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Head's W_Q, W_K (d, d_k) and b_Q, b_K (d_k,), float64 (zeros where the model has no bias)."""
        from ..pretrained.adapter import loaded

        kv = site.kv_heads[head]
        with loaded(site.q, site.k):
            P = self.model.adapter.projection_weights(site)
        if P["W_Q"] is None or P["W_K"] is None:
            raise NoHeadWeights(site)
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
                offset = self.model.adapter.norm_weight_offset
                for module, received in self.inner.items():
                    hooks.callback(module.register_forward_hook(frozen_norm(module, received, offset)).remove)
            site.attention(**call)
        q, k, v = self.model.adapter.heads(site, rec)
        var = self.model.adapter.variations(self.part, site, rec, q.float(), k.float())
        return q.double(), k.double(), v.double(), var

    def module_parts(self, site: Site, affine: Frozen, head: int, query: int, visible: Sequence[int]
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
        """removed() where no W_Q, W_K per head exist or a QK-norm needs every head (needs_every_head): the
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
        one = one_head(var, head)
        x, sources, rows = self.x.float(), list(self.sources.values()), []
        for i in range(0, len(sources), 16):
            a = norm((x - torch.stack(sources[i:i + 16])).to(self.dtype)).float()  # (c, T, d)
            q, k = a @ W["Q"] + b["Q"], a @ W["K"] + b["K"]  # (c, T, d_k)
            if self.linear_terms:  # DeBERTa's c2p and p2c move with q and k
                one = replace(one, bias={**one.bias, **linear_bias(self.linear_terms, var.scale, q, k, head)})
            rows.append(attend(q, k, k, one).weights[:, query].double())  # (c, T)
        return torch.cat(rows)


def needs_every_head(var: Variations) -> bool:
    """Whether a QK-norm reads every head at once (OLMo 2 and 3) or holds a weight per head (Cohere), so one head's
    queries or keys alone cannot go through it."""
    from ..pretrained.cohere import HeadLayerNorm
    from ..pretrained.olmo import AcrossHeads

    return any(isinstance(norm, (AcrossHeads, HeadLayerNorm)) for norm in (var.q_norm, var.k_norm))


def one_head(var: Variations, head: int) -> Variations:
    """var for one query head's softmax row alone: its own bias, sink and mask; no gate, head norm or second map."""
    return replace(var, bias={n: t[head:head + 1] for n, t in var.bias.items()},
                   sinks=None if var.sinks is None else var.sinks[head:head + 1], gates=None, head_norm=None,
                   differential=None,  # one query head: one map
                   mask=var.mask if var.mask is None or var.mask.shape[0] == 1 else var.mask[head:head + 1])


def head_parts(adapter: Any, site: Site, concat: Tensor, dtype: torch.dtype = torch.float64
               ) -> tuple[Tensor, Tensor | None]:
    """What a layer's output projection adds, split by head: (H, T, d) c_h W_O^(h)T from its concat (T, H*d_v), in
    dtype, and b_O (d,) float64 or None."""
    from ..pretrained.adapter import loaded

    with loaded(site.out):
        W_O, b_O = adapter.out_weights(site)  # (d, H*d_v), (d,)
    H = site.num_heads
    W_h = W_O.detach().to(dtype).cpu().view(W_O.shape[0], H, -1).permute(1, 2, 0)  # (H, d_v, d)
    c = concat.view(concat.shape[0], H, -1).transpose(0, 1).to(dtype)  # (H, T, d_v)
    return torch.bmm(c, W_h), None if b_O is None else b_O.detach().double().cpu()


Side = tuple[nn.Module, Tensor, Sequence[Tensor]]  # the real norm a side reads through, its stream, its sources


def removed_each_side(var: Variations, head: int, query: int, W: dict[str, Tensor], b: dict[str, Tensor],
                      queries: Side, keys: Side, dtype: torch.dtype) -> Tensor:
    """(query sources + key sources, S): where queries and keys read different streams (cross-attention, a KV-shared
    layer), the head's row with each query source taken out of what its queries read, then each key source out of
    what its keys read, the other side as it was. queries, keys: (the real norm each reads through, the stream (T, d)
    or (S, d), its sources); W, b: the head's projections (b_Q, b_K zeros where it has none)."""
    one = one_head(var, head)

    def projected(norm: nn.Module, x: Tensor, parts: Sequence[Tensor], n: str) -> Tensor:  # (1 + c, ., d_k)
        inputs = torch.stack([x.float(), *(x.float() - src for src in parts)])  # the real x first
        return norm(inputs.to(dtype)).float() @ W[n].float() + b[n].float()

    q, k = projected(*queries, "Q"), projected(*keys, "K")  # (1 + S_q, T, d_k), (1 + S_k, S, d_k)
    rows = [attend(q[1:], k[:1].expand(len(q) - 1, -1, -1), k[:1].expand(len(q) - 1, -1, -1), one).weights,
            attend(q[:1].expand(len(k) - 1, -1, -1), k[1:], k[1:], one).weights]
    return torch.cat(rows)[:, query].double()


class NoHeadWeights(Exception):
    """The layer has no W_Q and W_K per head (latent attention)."""
