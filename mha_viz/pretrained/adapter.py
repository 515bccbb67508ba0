"""Adapter: where one architecture keeps its attention and which variations it uses; the tracing is shared.

An adapter says where the modules of one attention layer live (a Site), how a fused projection's
output splits into q, k and v, and which variations of attention the layer uses (Variations). The
rest is the same for every architecture, for one layer and one input:

    q, k, v    = outputs of the q/k/v projections, split into heads          forward hooks
    variations = scale, q/k norms, rotary cos/sin, bias, soft-capping,        adapter, from the
                 the model's mask, causal, sliding window                     module's own arguments
    weights, head outputs, concat = mha_viz.attention.attend(q, k, v, variations, head_mask)
                                                checked against the model's output_attentions (a differential
                                                layer's: its 2H softmax maps, heads i and i + H paired)
    concat     = input of the output projection    forward pre-hook; head_mask scales blocks here
    output     = concat W_O^T + b_O                forward hook; checked against concat W_O^T + b_O
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any, Self, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import Variations, attend, scale_heads
from ..trace import AttentionTrace
from .errors import ModelLoadError

PARTS = {"encoder": ("encoder",), "decoder": ("decoder",), "encoder-decoder": ("encoder", "decoder", "cross")}


@dataclass(frozen=True)
class NormedBlock:
    """A block that normalises the stream itself (MiniMax): n1 = input_norm(x), n2 = post_norm(alpha_a n1 + beta_a
    attention(n1)), x' = alpha_m n2 + beta_m MLP(n2)."""

    input_norm: nn.Module
    post_norm: nn.Module
    attention: tuple[float, float]  # (alpha_a, beta_a)
    mlp: tuple[float, float]  # (alpha_m, beta_m)


@dataclass(frozen=True)
class Site:
    """The modules of one attention layer, and its head layout."""

    attention: nn.Module  # receives the mask and position arguments
    q: nn.Module | None  # output (1, T, H*d_k); a fused projection (GPT-2's c_attn) is q, k and v at once
    k: nn.Module | None  # output (1, S, KV*d_k); None where the architecture is not adapted (generic path)
    v: nn.Module | None  # output (1, S, KV*d_v)
    out: nn.Module  # the output projection W_O: input is the concat, (1, T, H*d_v)
    num_heads: int  # H query heads
    num_kv_heads: int  # KV key/value heads; KV < H is grouped-query attention
    head_dim: int
    call: int = 0  # which call of `attention` in one forward pass is this layer (ALBERT runs one layer L times)
    core: nn.Module | None = None  # a mixer's gated norm: its first input is the kernel's output (mha_viz.pretrained.mixing)
    watch: nn.Module | None = None  # a module whose output the layer uses too (DeepSeek-V3.2's indexer: its top-k keys)

    @property
    def fused(self) -> bool:
        """One module projects q, k and v at once."""
        return self.q is self.k

    @property
    def kv_heads(self) -> tuple[int, ...]:
        """kv_heads[h]: the K/V head that query head h reads (h // (H / KV))."""
        return tuple(h // (self.num_heads // self.num_kv_heads) for h in range(self.num_heads))


@dataclass(frozen=True, eq=False)
class LinearTerm:
    """A score term linear in the query or in the key (DeBERTa's c2p and p2c), before the scale:
        term[h, i, j] = q[h, i] . vectors[h, index[i, j]]   (side "query")
        term[h, i, j] = k[h, j] . vectors[h, index[i, j]]   (side "key")"""

    side: str  # "query" or "key"
    vectors: Tensor  # (H, n, d_k) per query head, e.g. the relative position embeddings through a projection
    index: Tensor  # (T, S) long: the row of vectors that query i and key j read

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """(H, T, S) the term for q (H, T, d_k) and k (H, S, d_k) (H may be 1 in vectors: broadcast)."""
        x = q if self.side == "query" else k  # (H, T or S, d_k)
        products = x @ self.vectors.transpose(-1, -2)  # (H, T or S, n)
        index = self.index if self.side == "query" else self.index.T  # (T, S) or (S, T)
        term = torch.gather(products, -1, index.expand(products.shape[0], -1, -1))
        return term if self.side == "query" else term.transpose(-1, -2)  # (H, T, S)


@dataclass(frozen=True, eq=False)
class TraceRequest:
    """What Adapter.traces() is asked for: these layers of part, from one forward pass on ids (and an
    encoder-decoder's decoder_ids), labelled with query and key tokens; head_mask (H,) scales the head blocks of
    every one of those layers; meta goes into every trace (with its "layer")."""

    part: str
    layers: tuple[int, ...]
    ids: tuple[int, ...]
    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    decoder_ids: tuple[int, ...] | None = None
    head_mask: Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def layer_meta(self, layer: int) -> dict[str, Any]:
        return {**self.meta, "layer": layer}


class Recorder:
    """Forward hooks on one Site during one forward pass; head_mask (H,) scales the concat blocks.

    Only the site.call-th call of the attention module is recorded (and masked): from its start to
    the end of the output projection that follows it.
    """

    def __init__(self, site: Site, head_mask: Tensor | None = None) -> None:
        self.site = site
        self.head_mask = head_mask
        self.arguments: dict[str, Any] = {}  # the attention module's call, by parameter name
        self.result: Any = None  # what the attention module returned
        self.projected: dict[nn.Module, list[Tensor]] = {}  # projection module -> its outputs in the call, batch dropped
        self.concat: Tensor | None = None  # (T, H*d_v), after head_mask: what W_O really received
        self.output: Tensor | None = None  # (T, d_out)
        self.core: Tensor | None = None  # what site.core received first in the call: a mixer's kernel output
        self.watched: Any = None  # what site.watch returned first in the call
        self._calls = 0
        self._active = False  # from the recorded call's start to the end of the output projection after it
        self._in_call = False  # from the recorded call's start to its return
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        s = self.site
        projections = dict.fromkeys(m for m in (s.q, s.k, s.v) if m is not None)
        self._handles += [
            s.attention.register_forward_pre_hook(self._on_call, with_kwargs=True),
            s.attention.register_forward_hook(self._on_result),
            *(m.register_forward_hook(self._on_projection) for m in projections),
            s.out.register_forward_pre_hook(self._on_concat),
            *([s.core.register_forward_pre_hook(self._on_core)] if s.core is not None else []),
            *([s.watch.register_forward_hook(self._on_watch)] if s.watch is not None else []),
            s.out.register_forward_hook(self._on_output),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def first(self, module: nn.Module) -> Tensor:
        """The first output (T, n*d) of a projection module during the recorded call."""
        if not self.projected.get(module):
            raise RuntimeError(f"{type(module).__name__} did not run during the traced attention call")
        return self.projected[module][0]

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self._active = self._in_call = self._calls == self.site.call
        self._calls += 1
        if not self._active:
            return
        signature = inspect.signature(module.forward)
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:  # a forward whose signature does not say what it takes: keep the keyword arguments
            self.arguments = dict(kwargs)
            return
        for p in signature.parameters.values():
            if p.kind is p.VAR_KEYWORD:  # **kwargs: flatten, so every argument is found by its name
                arguments.update(arguments.pop(p.name, {}))
        self.arguments = dict(arguments)

    def _on_result(self, module: nn.Module, args: tuple, result: Any) -> None:
        if self._in_call:
            self.result = result
            self._in_call = False

    def _on_projection(self, module: nn.Module, args: tuple, output: Tensor) -> None:
        if self._active:
            self.projected.setdefault(module, []).append(output.detach()[0])

    def _on_core(self, module: nn.Module, args: tuple) -> None:
        if self._active and self.core is None:
            self.core = args[0].detach()

    def _on_watch(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self._in_call and self.watched is None:
            self.watched = output

    def _on_concat(self, module: nn.Module, args: tuple) -> tuple | None:
        if not self._active:
            return None
        concat = args[0]  # (1, T, H*d_v)
        if self.head_mask is not None:
            concat = scale_heads(concat, self.head_mask)  # (1, T, H*d_v)
        self.concat = concat.detach()[0]
        return None if self.head_mask is None else (concat, *args[1:])

    def _on_output(self, module: nn.Module, args: tuple, output: Tensor) -> None:
        if self._active:
            self.output = output.detach()[0]
            self._active = False


class ConcatHooks:
    """Pre-hooks on output projections for one forward pass: (site, what to do) pairs; change() rewrites the concat
    (1, T, H*d_v) on the site.call-th call only, so one shared layer (ALBERT) is changed where it runs as that layer."""

    def __init__(self, entries: Sequence[tuple[Site, Any]] = ()) -> None:
        self.entries = list(entries)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        self._handles += [
            site.out.register_forward_pre_hook(partial(self._on_call, site, what, itertools.count()))
            for site, what in self.entries
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_call(self, site: Site, what: Any, calls: Iterator[int], module: nn.Module, args: tuple) -> tuple | None:
        if next(calls) != site.call:
            return None
        return (self.change(site, what, args[0]), *args[1:])

    @staticmethod
    def change(site: Site, what: Any, concat: Tensor) -> Tensor:
        raise NotImplementedError


class HeadMasks(ConcatHooks):
    """Head knockout in several layers at once: (site, head_mask (H,)) pairs; the concat blocks are scaled
    (scale_heads)."""

    @staticmethod
    def change(site: Site, what: Tensor, concat: Tensor) -> Tensor:
        return scale_heads(concat, what)  # (1, T, H*d_v)


class HeadValues(ConcatHooks):
    """Heads set to given values (mean or resample ablation): (site, (H, {head: value (T, d_v) or (d_v,)})) pairs,
    H the trace's heads (Adapter.trace_heads); those heads' blocks of the concat are replaced."""

    @staticmethod
    def change(site: Site, what: tuple[int, dict[int, Tensor]], concat: Tensor) -> Tensor:
        heads, values = what
        x = concat.clone()  # (1, T, H*d_v)
        d = x.shape[-1] // heads
        for h, value in values.items():
            x[..., h * d : (h + 1) * d] = value.to(x)
        return x


def in_out(module: nn.Module) -> tuple[Tensor, Tensor | None]:
    """A projection's weight as (d_in, n_out), x W + b, and its bias (n_out,): nn.Linear stores (n_out, d_in),
    GPT-2's Conv1D (d_in, n_out)."""
    from transformers.pytorch_utils import Conv1D  # here: importing mha_viz.pretrained stays free of transformers

    W = module.weight if isinstance(module, Conv1D) else module.weight.T  # (d_in, n_out)
    return W, module.bias


def per_head(W: Tensor, n: int) -> Tensor:
    """Columns (..., n*d) -> (n, ..., d): head h is the column block h*d:(h+1)*d (weights (d_in, n*d) or outputs (T, n*d))."""
    return W.unflatten(-1, (n, -1)).movedim(-2, 0)


def loaded(*modules: nn.Module) -> contextlib.AbstractContextManager:
    """While open, the modules' weights are real tensors even where accelerate offloads them (device_map)."""
    stack = contextlib.ExitStack()
    for module in modules:
        if hasattr(module, "_hf_hook"):
            from accelerate.utils import align_module_device

            stack.enter_context(align_module_device(module))
    return stack


def rotary_of(rec: Recorder) -> tuple[Tensor, Tensor]:
    """The rotary (cos, sin) the attention module received as position_embeddings, each (T, r), batch dropped."""
    cos, sin = rec.arguments["position_embeddings"]  # (1, T, r) each
    return cos[0], sin[0]


def model_mask(mask: Tensor | None, *, keep: bool = False) -> Tensor | None:
    """The model's attention mask as True where a key is hidden, batch dim dropped: (1 or H, T or 1, S).

    Eager masks are booleans (True = attend), additive floats with the dtype's minimum (or -inf) for
    hidden keys, or with keep=True 0/1 floats (1 = attend, DeBERTa).
    """
    if mask is None:
        return None
    m = mask[0]  # (1 or H, T or 1, S)
    if m.dtype == torch.bool or keep:
        return ~m.bool()
    return m <= torch.finfo(m.dtype).min / 2


def differential_columns(name: str, W: np.ndarray) -> np.ndarray:
    """A projection of 2H paired query heads (i, i + H) as H differential heads' (attention.attend, differential):
    W_Q, W_K (and biases) the first head's, W_V [H, d_in, 2 d] the pair's [W_V_i | W_V_(i+H)]."""
    first, second = np.split(W, 2)  # (H, ..., d) each
    return np.concatenate((first, second), axis=-1) if name[-1] == "V" else first


def max_abs_diff(a: Tensor, b: Tensor) -> float:
    """max |a - b| in float32: the extremes of the one difference tensor, not a second one for its sizes."""
    low, high = torch.aminmax(a.detach().float() - b.detach().float())
    return max(-float(low), float(high))


def to_numpy(x: Tensor) -> np.ndarray:
    """A float tensor as float32 numpy on the CPU (half precision models are traced in float32)."""
    x = x.detach()
    return (x.float() if x.is_floating_point() else x).cpu().numpy()


class Adapter:
    """Base for one family of architectures; subclasses name their Site for each part and layer.

    Subclasses set `architectures` (config.model_type values) and `kind`, implement site(), and
    override qkv_columns() (fused projections) and variations() where their attention differs.
    """

    architectures: tuple[str, ...] = ()
    kind: str = "encoder"
    unavailable: str | None = None  # why traces lack intermediates; None when the layer is opened up
    knockout = True  # heads can be switched off (their concat blocks scaled before W_O)
    mask_argument = "attention_mask"  # name of the attention module's mask parameter
    attribution_unavailable: str | None = None  # why direct logit attribution cannot split this model's logits
    norm_weight_offset = 0.0  # the RMSNorms multiply by (offset + weight): 1 for Gemma and Gemma2
    steps_from_cache = True  # generation feeds one token a step with the KV cache (False: the whole sequence again)

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.base = model.base_model

    @property
    def parts(self) -> tuple[str, ...]:
        return PARTS[self.kind]

    def site(self, part: str, layer: int) -> Site:
        raise NotImplementedError

    def qkv_columns(self, site: Site, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """A fused projection's output columns x (..., n_out) -> q (..., H*d), k (..., KV*d), v (..., KV*d).

        Applied to the projection's output (T, n_out) and to its weight (d_in, n_out) and bias (n_out,) alike.
        Default: [Q | K | V] side by side (GPT-2's c_attn, ModernBERT's Wqkv, Phi-3's qkv_proj).
        """
        H, KV, d = site.num_heads, site.num_kv_heads, site.head_dim
        return tuple(x.split([H * d, KV * d, KV * d], dim=-1))  # type: ignore[return-value]

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        """Per-head q (H, T, d_k), k (KV, S, d_k), v (KV, S, d_v) from the projections' outputs."""
        if site.fused:
            xq, xk, xv = self.qkv_columns(site, rec.first(site.q))  # (T, H*d), (S, KV*d), (S, KV*d)
        else:
            xq, xk, xv = rec.first(site.q), rec.first(site.k), rec.first(site.v)
        return per_head(xq, site.num_heads), per_head(xk, site.num_kv_heads), per_head(xv, site.num_kv_heads)

    def variations(self, part: str, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> Variations:
        """The arguments of attend() for this layer; q (H, T, d_k), k (KV, S, d_k) as split into heads.

        Default: scale(site), the mask the module received, causal in a decoder.
        """
        return Variations(
            scale=self.scale(site),
            mask=model_mask(rec.arguments.get(self.mask_argument)),
            causal=self.causal(part),
        )

    weights_unavailable: str | None = None  # why there is no W_Q, W_K, W_V per head (HeadWeights refuses), else None

    def layer_kind(self, part: str, layer: int) -> str:
        """What mixes tokens in this layer (a key of mha_viz.mixers.KINDS): softmax attention, unless a hybrid
        model's adapter (mha_viz.pretrained.mixing) says otherwise."""
        return "softmax"

    def chunk(self, site: Site) -> int | None:
        """The chunk of positions a query of this layer sees keys in (Llama 4's chunked layers), else None."""
        return None

    def block_meta(self, layer: int) -> dict[str, Any]:
        """What a trace's meta says about where its layer sits in the model, where a traced layer is not one block
        (Falcon-H1's attention and Mamba-2 halves): nothing by default."""
        return {}

    def head_attentions(self, attentions: Sequence[Tensor], part: str) -> tuple[Tensor, ...]:
        """The weights of each trace head from the model's own output_attentions (one (B, maps, T, S) per layer of
        part): the same, except where two maps make one head (differential attention: map_i - lambda map_(i+H))."""
        return tuple(attentions)

    def trace_heads(self, maps: int) -> int:
        """How many heads a trace has for a layer whose output_attentions holds `maps` maps: the same, except where
        two maps make one head (differential attention: H / 2)."""
        return maps

    def scale(self, site: Site) -> float:
        """The factor on Q K^T: the attention module's own `scaling` (1/sqrt(d_k) in most models)."""
        return float(site.attention.scaling)

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        """W_Q [H, d_model, d_k], W_K [KV, d_context, d_k], W_V [KV, d_context, d_v] and biases [., d] or None."""
        if site.fused:
            W, b = in_out(site.q)  # (d_in, n_out), (n_out,)
            Ws = self.qkv_columns(site, W)  # (d_in, H*d), (d_in, KV*d), (d_in, KV*d)
            bs = (None,) * 3 if b is None else self.qkv_columns(site, b)  # (H*d,), (KV*d,), (KV*d,)
        else:
            Ws, bs = zip(*(in_out(m) for m in (site.q, site.k, site.v)), strict=True)
        out: dict[str, Tensor | None] = {}
        for name, W, b, n in zip("QKV", Ws, bs, (site.num_heads, site.num_kv_heads, site.num_kv_heads), strict=True):
            out[f"W_{name}"] = per_head(W, n)  # (n, d_in, d)
            out[f"b_{name}"] = None if b is None else per_head(b, n)  # (n, d)
        return out

    def out_weights(self, site: Site) -> tuple[Tensor, Tensor | None]:
        """W_O (d_out, H*d_v) in torch Linear layout, and b_O (d_out,) or None."""
        W, b = in_out(site.out)  # (H*d_v, d_out), (d_out,)
        return W.T, b

    def pre_norm(self, part: str, layer: int) -> nn.Module | None:
        """The norm through which (part, layer)'s attention reads the residual stream in a pre-norm model (its queries;
        its keys and values too, except in cross-attention); None where the attention reads the stream itself
        (post-norm models: BERT, BART, DeBERTa) or this adapter does not say. mha_viz.weights folds it."""
        return None

    attention_reads_stream = False  # a decoder whose attention reads the residual stream itself, no norm before it
    # (OLMo 2 and 3: their norms come after each sublayer)

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module] | None:
        """A decoder-only model's block of each traced layer, in order (a block traced as two layers, Falcon-H1's,
        appears twice), and the norm between the last block and the LM head (what direct logit attribution needs);
        None where this adapter does not know them."""
        return None

    @property
    def scores_unavailable(self) -> str | None:
        """Why score attribution cannot split this model's attention scores over its residual stream, or None; by
        default what stops logit attribution (the same stream)."""
        return self.attribution_unavailable

    def post_attention_norm(self, layer: int) -> nn.Module | None:
        """The norm on the layer's attention output before its block adds it to the residual stream (Gemma 2 and 3's
        post_attention_layernorm); None where there is none."""
        return None

    def normed_block(self, layer: int) -> NormedBlock | None:
        """How the traced layer's block normalises the stream itself (MiniMax), for score attribution; None where
        the stream passes each block untouched but for what it adds."""
        return None

    def altup(self) -> nn.Module | None:
        """The text model whose decoder layers carry AltUp's several streams (Gemma 3n: its layers and config), for
        score attribution; None where the model has one residual stream."""
        return None

    def post_norms(self) -> Any:
        """A post-norm encoder's stream (mha_viz.pretrained.bert.PostNorms: BERT's embeddings and each layer's two
        LayerNorms), for score attribution; None where this adapter does not know it."""
        return None

    def attention_in_scale(self, layer: int) -> float:
        """The factor on the normed residual stream as the traced layer's attention receives it (Falcon-H1's
        attention_in_multiplier): 1 by default. Score attribution folds it into the frozen pre-attention norm."""
        return 1.0

    def encoder_blocks(self) -> Sequence[nn.Module] | None:
        """A pre-norm encoder's block of each layer, in order (ModernBERT's: each reads the residual stream through its
        own norm and adds to it), for score attribution; None where this adapter does not know them."""
        return None

    def linear_score_terms(self, site: Site, rec: Recorder) -> dict[str, LinearTerm]:
        """The layer's score terms linear in the query or in the key, by name (DeBERTa's c2p and p2c), from its
        recorded call; the trace's score_bias holds each times the scale. {} by default."""
        return {}

    def stack_layout(self, part: str) -> Any:
        """An encoder-decoder's stack (part "encoder" or "decoder") as the steps of its residual stream
        (mha_viz.pretrained.stacks.StackLayout), for score attribution; None where this adapter does not know it."""
        return None

    def residual_scale(self, layer: int) -> float:
        """The factor on the traced layer's attention (or mixer) output as its block adds it to the residual stream
        (Granite 4's residual_multiplier, Falcon-H1's per half): 1 by default. Logit attribution folds it into each
        head's term."""
        return 1.0

    def own_square_tensors(self) -> int:
        """How many [T, T] float32 tensors a layer of the model makes in its own code even during a long pass, outside
        attention (DeepSeek-V3.2's indexer: one per indexer head); 0 by default. A long pass gives such a model its
        causal mask as a [1, 1, T, T] tensor, and refuses beforehand what would pass long_hooked.EAGER_MAX_BYTES."""
        return 0

    def logit_scale(self) -> float:
        """The factor on the logits after the unembedding (Cohere's logit_scale, Granite 4's 1 / logits_scaling): 1 by
        default. Logit attribution and the unembedding of the weight views fold it in."""
        return 1.0

    def max_positions(self) -> int | None:
        """How many positions the model has embeddings for (None: no limit from positions). Where position ids
        start after the padding index (RoBERTa's layout: the embeddings module's padding_idx is its position
        table's, as in MPNet, Camembert, XLM-R-XL, Longformer), padding_idx + 1 of the table's rows are never read."""
        cfg = self.model.config
        limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        for module in self.model.modules():
            table, pad = getattr(module, "position_embeddings", None), getattr(module, "padding_idx", None)
            if isinstance(table, nn.Embedding) and isinstance(pad, int) and table.padding_idx == pad >= 0:
                return min(limit or table.num_embeddings, table.num_embeddings) - pad - 1
        return limit

    def causal(self, part: str) -> bool:
        return part == "decoder"

    def device(self) -> torch.device:
        """Where input ids go: the CPU for a model dispatched by accelerate (its hooks move them), else its device."""
        if getattr(self.model, "hf_device_map", None):
            return torch.device("cpu")
        return next(self.base.parameters()).device

    @cached_property
    def _takes_use_cache(self) -> bool:
        return "use_cache" in inspect.signature(self.base.forward).parameters

    def forward(self, ids: Sequence[int], decoder_ids: Sequence[int] | None = None,
                attention_mask: Sequence[int] | None = None) -> Any:
        """One forward pass of the base model (batch of one) with output_attentions, no cache; attention_mask: 1 for
        a token, 0 for padding (None: every position a token)."""
        device = self.device()
        kwargs: dict[str, Any] = {"output_attentions": True}
        if attention_mask is not None:
            kwargs["attention_mask"] = torch.tensor([list(attention_mask)], device=device)
        if self._takes_use_cache:
            kwargs["use_cache"] = False
        if self.kind == "encoder-decoder":
            kwargs["decoder_input_ids"] = torch.tensor([list(decoder_ids)], device=device)
        with torch.no_grad():
            return self.base(input_ids=torch.tensor([list(ids)], device=device), **kwargs)

    def model_attentions(self, outputs: Any, part: str) -> tuple[Tensor, ...]:
        """The model's own attention weights for `part`: one (1, H, T, S) tensor per layer."""
        field = "attentions" if self.kind != "encoder-decoder" else f"{part}_attentions"
        attentions = getattr(outputs, field, None)
        if not attentions or any(a is None for a in attentions):
            raise ModelLoadError(f"the '{self.model.config.model_type}' model returned no {field} (output_attentions)")
        return attentions

    def final_hidden(self, outputs: Any, part: str) -> Tensor:
        """The last hidden state (1, T, d_model) of part's stack: the encoder's for the encoder part of an
        encoder-decoder, else the model's last_hidden_state (the decoder's in an encoder-decoder)."""
        if self.kind == "encoder-decoder" and part == "encoder":
            return outputs.encoder_last_hidden_state
        return outputs.last_hidden_state

    @torch.no_grad()
    def traces(self, request: TraceRequest) -> list[AttentionTrace]:
        """One forward pass with hooks on every layer of the request; each layer's trace, in that order.

        Only these layers are hooked: no other layer's q, k, v is kept.
        """
        recorders = [Recorder(self.site(request.part, layer), request.head_mask) for layer in request.layers]
        reference = self.recorded(request, recorders)  # one (1, H, T, S) per layer
        return [self._rebuild(request, layer, rec, reference[layer][0])
                for layer, rec in zip(request.layers, recorders, strict=True)]

    def recorded(self, request: TraceRequest, recorders: Sequence[Recorder]) -> tuple[Tensor, ...]:
        """Run the request's forward pass with the recorders' hooks on; the model's own weights of request.part."""
        with contextlib.ExitStack() as hooks:
            for rec in recorders:
                hooks.enter_context(rec)
            outputs = self.forward(request.ids, request.decoder_ids)
        return self.model_attentions(outputs, request.part)

    def _rebuild(self, request: TraceRequest, layer: int, rec: Recorder, reference: Tensor) -> AttentionTrace:
        """Every intermediate of one layer from what its Recorder captured; reference: the model's (H, T, S).

        Computed in float32 whatever the model's dtype.
        """
        site, part = rec.site, request.part
        if rec.concat is None or rec.output is None:
            raise RuntimeError(f"the output projection of {part} layer {layer} did not run")
        q, k, v = (x.float() for x in self.heads(site, rec))  # (H, T, d_k), (KV, S, d_k), (KV, S, d_v)
        var = self.variations(part, site, rec, q, k)
        kv_heads = site.kv_heads
        k, v = k[list(kv_heads)], v[list(kv_heads)]  # (H, S, d_k), (H, S, d_v): query head h reads K/V head kv_heads[h]
        H, T, S = reference.shape
        bias = {name: b.float().expand(H, T, S).contiguous() for name, b in var.bias.items()}  # each (H, T, S)
        rotary = None if var.rotary is None else tuple(t.float() for t in var.rotary)
        a = attend(q, k, v, replace(var, bias=bias, rotary=rotary), request.head_mask)
        with loaded(*(m for m in (site.q, site.k, site.v, site.out) if m is not None)):
            W_O, b_O = (None if w is None else w.float() for w in self.out_weights(site))  # (d_out, H*d_v), (d_out,)
            projections = {  # K/V weights of grouped-query heads repeated like k and v: head h's own W_K[h]
                name: None if W is None else to_numpy(W if name[-1] == "Q" else W[list(kv_heads)])
                for name, W in self.projection_weights(site).items()
            }  # W_Q (H, d_model, d_k), W_K (H, d_context, d_k), W_V (H, d_context, d_v), biases (H, d)
            concat, output = rec.concat.float(), rec.output.float()  # (T, H*d_v), (T, d_out)
            if var.differential is not None:  # 2H query heads paired (i, i + H): head i reads the first's Q, K
                projections = {name: None if W is None else differential_columns(name, W)
                               for name, W in projections.items()}
            check = {
                ("weights vs output_attentions" if var.differential is None
                 else "both softmax maps vs output_attentions"): max_abs_diff(a.maps, reference),
                "head outputs vs concat": max_abs_diff(a.concat, concat),
                "concat @ W_O^T + b vs output": max_abs_diff(concat @ W_O.T + (0.0 if b_O is None else b_O), output),
            }
            W_O_np, b_O_np = to_numpy(W_O), None if b_O is None else to_numpy(b_O)
        extra = {name: value for name, value in (("window", var.window), ("chunk", var.chunk)) if value is not None}
        diff = var.differential is not None
        n = a.weights.shape[0]  # heads of the trace: H, or H / 2 differential pairs
        if var.head_norm is not None:
            extra["head_norm"] = getattr(var.head_norm, "formula", "a norm on each head's output")
        return AttentionTrace(
            query_tokens=request.query_tokens,
            key_tokens=request.key_tokens,
            weights=to_numpy(a.weights),
            queries=to_numpy(a.queries[:n]),
            keys=to_numpy(a.keys[:n]),
            values=to_numpy(a.values),
            scores=to_numpy(a.scores[:n]),
            head_outputs=to_numpy(a.head_outputs),
            concat=to_numpy(concat),
            output=to_numpy(output),
            W_O=W_O_np,
            b_O=b_O_np,
            **projections,
            scale=var.scale,
            score_bias={name: to_numpy(b) for name, b in bias.items()},
            softcap=var.softcap,
            causal=self.causal(part),
            cross=part == "cross",
            kv_heads=kv_heads if site.num_kv_heads != site.num_heads and not diff else None,
            sinks=None if var.sinks is None else to_numpy(var.sinks),
            gates=None if var.gates is None else to_numpy(var.gates),  # LFM3's sigmoid gate per head and token
            lambdas=to_numpy(torch.as_tensor(var.differential).float().expand(n)) if diff else None,
            maps=to_numpy(a.maps.unflatten(0, (2, n))) if diff else None,
            map_scores=to_numpy(a.scores.unflatten(0, (2, n))) if diff else None,
            meta={**request.layer_meta(layer), **self.block_meta(layer), **extra,
                  "model_dtype": str(reference.dtype).removeprefix("torch."), "check": check},
        )


ADAPTERS: dict[str, type[Adapter]] = {}  # config.model_type -> the adapter that opens it up (filled by @register)
A = TypeVar("A", bound=type[Adapter])


def register(cls: A) -> A:
    """Class decorator: cls opens up the architectures it names (config.model_type values). ValueError for an
    adapter that names none, or one that another adapter already opens (each model_type has one adapter)."""
    if not cls.architectures:
        raise ValueError(f"{cls.__name__} names no architectures (config.model_type values) to open up")
    taken = {t: ADAPTERS[t].__name__ for t in cls.architectures if t in ADAPTERS}
    if taken:
        raise ValueError(f"{cls.__name__}: these architectures already have an adapter: {taken}")
    ADAPTERS.update(dict.fromkeys(cls.architectures, cls))
    return cls


def unregister(cls: type[Adapter]) -> None:
    """Undo register(cls): the architectures it opened go the generic way again (a plug-in's or a test's adapter)."""
    for architecture in cls.architectures:
        if ADAPTERS.get(architecture) is cls:
            del ADAPTERS[architecture]
