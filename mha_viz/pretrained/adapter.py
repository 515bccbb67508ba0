"""Adapter: where one architecture keeps its attention, plus the tracing all architectures share.

An adapter says where the modules of one attention layer live (a Site), how their outputs split
into heads and how positions enter. The rest is shared, for one layer and one input:

    q, k, v    = outputs of the q/k/v projections, split into heads        forward hooks
    q, k, bias = positions applied: rotary (LLaMA) or relative bias (T5)   adapter
    scores     = q k^T * scaling + bias + mask                              masked entries -inf
    weights    = softmax(scores)                   checked against the model's output_attentions
    concat     = input of the output projection    forward pre-hook; head_mask zeroes blocks here
    output     = concat W_O^T + b_O                forward hook; checked against concat W_O^T + b_O
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Self

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import causal_mask
from ..trace import AttentionTrace
from .errors import ModelLoadError

PARTS = {"encoder": ("encoder",), "decoder": ("decoder",), "encoder-decoder": ("encoder", "decoder", "cross")}


@dataclass(frozen=True)
class Site:
    """The modules of one attention layer, and its head layout."""

    attention: nn.Module  # receives the mask and position arguments; has .scaling
    q: nn.Module  # output (1, T, H*d_k); GPT-2's fused c_attn is q, k and v at once
    k: nn.Module  # output (1, S, KV*d_k)
    v: nn.Module  # output (1, S, KV*d_v)
    out: nn.Module  # the output projection W_O: input is the concat, (1, T, H*d_v)
    num_heads: int  # H query heads
    num_kv_heads: int  # KV key/value heads; KV < H is grouped-query attention
    head_dim: int


class Recorder:
    """Forward hooks on one Site during one forward pass; head_mask (H,) scales the concat blocks."""

    def __init__(self, site: Site, head_mask: Tensor | None = None) -> None:
        self.site = site
        self.head_mask = head_mask
        self.arguments: dict[str, Any] = {}  # the attention module's call, by parameter name
        self.result: Any = None  # what the attention module returned
        self.projected: dict[nn.Module, Tensor] = {}  # projection module -> its output, batch dropped
        self.concat: Tensor | None = None  # (T, H*d_v), after head_mask: what W_O really received
        self.output: Tensor | None = None  # (T, d_out)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        s = self.site
        self._handles += [
            s.attention.register_forward_pre_hook(self._on_call, with_kwargs=True),
            s.attention.register_forward_hook(self._on_result),
            *(m.register_forward_hook(self._on_projection) for m in dict.fromkeys((s.q, s.k, s.v))),
            s.out.register_forward_pre_hook(self._on_concat),
            s.out.register_forward_hook(self._on_output),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        signature = inspect.signature(module.forward)
        arguments = signature.bind(*args, **kwargs).arguments
        for p in signature.parameters.values():
            if p.kind is p.VAR_KEYWORD:  # **kwargs: flatten, so every argument is found by its name
                arguments.update(arguments.pop(p.name, {}))
        self.arguments = dict(arguments)

    def _on_result(self, module: nn.Module, args: tuple, result: Any) -> None:
        self.result = result

    def _on_projection(self, module: nn.Module, args: tuple, output: Tensor) -> None:
        if module in self.projected:
            raise RuntimeError(f"{type(module).__name__} ran twice in one forward pass; cannot tell which to trace")
        self.projected[module] = output.detach()[0]  # (T, n*d)

    def _on_concat(self, module: nn.Module, args: tuple) -> tuple | None:
        concat = args[0]  # (1, T, H*d_v)
        if self.head_mask is not None:
            d_v = concat.shape[-1] // len(self.head_mask)
            concat = concat * self.head_mask.to(concat).repeat_interleave(d_v)  # (1, T, H*d_v)
        self.concat = concat.detach()[0]
        return None if self.head_mask is None else (concat, *args[1:])

    def _on_output(self, module: nn.Module, args: tuple, output: Tensor) -> None:
        self.output = output.detach()[0]


def scale_concat(head_mask: Tensor, module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook of an output projection: scale head h's block of its input (the concat) by head_mask[h]."""
    concat = args[0]  # (1, T, H*d_v)
    d_v = concat.shape[-1] // len(head_mask)
    return (concat * head_mask.to(concat).repeat_interleave(d_v), *args[1:])  # (1, T, H*d_v)


class HeadMasks:
    """Head knockout in several layers at once, for one forward pass: (site, head_mask (H,)) pairs."""

    def __init__(self, masks: Sequence[tuple[Site, Tensor]] = ()) -> None:
        self.masks = list(masks)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        self._handles += [site.out.register_forward_pre_hook(partial(scale_concat, mask)) for site, mask in self.masks]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def split_linear(module: nn.Module, n: int) -> tuple[Tensor, Tensor | None]:
    """A Linear projection's weight (n*d, d_in) as per-head W [n, d_in, d] and its bias as [n, d] (views)."""
    W = module.weight.unflatten(0, (n, -1)).transpose(1, 2)  # (n, d_in, d)
    b = None if module.bias is None else module.bias.unflatten(0, (n, -1))  # (n, d)
    return W, b


def split_heads(x: Tensor, n: int) -> Tensor:
    """(T, n*d) -> (n, T, d): head h is the column block h*d:(h+1)*d."""
    return x.view(x.shape[0], n, -1).transpose(0, 1)


def additive_mask(mask: Tensor | None) -> Tensor | float:
    """The model's attention mask as 0 (attend) / -inf (masked), to add to scores (H, T, S).

    Eager masks are either boolean (True = attend) or additive floats with the dtype's minimum for
    masked entries; both become -inf so the scores show what is masked. Batch dim dropped.
    """
    if mask is None:
        return 0.0
    m = mask[0]  # (1 or H, T or 1, S)
    if m.dtype == torch.bool:
        return torch.zeros(m.shape, device=m.device).masked_fill(~m, float("-inf"))
    return m.masked_fill(m <= torch.finfo(m.dtype).min / 2, float("-inf"))


def max_abs_diff(a: Tensor, b: Tensor) -> float:
    return float((a - b).detach().abs().max())


def to_numpy(x: Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


class Adapter:
    """Base for one family of architectures; subclasses name their Site for each part and layer.

    Subclasses set `architectures` (config.model_type values) and `kind`, implement site(), and
    override heads() / positions() / out_weights() where their attention differs.
    """

    architectures: tuple[str, ...] = ()
    kind: str = "encoder"
    unavailable: str | None = None  # why traces hold only weights; None when the layer is opened up
    mask_argument = "attention_mask"  # name of the attention module's mask parameter

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.base = model.base_model

    @property
    def parts(self) -> tuple[str, ...]:
        return PARTS[self.kind]

    def site(self, part: str, layer: int) -> Site:
        raise NotImplementedError

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        """Per-head q (H, T, d_k), k (KV, S, d_k), v (KV, S, d_v) from the projections' outputs."""
        q = split_heads(rec.projected[site.q], site.num_heads)  # (H, T, d_k)
        k = split_heads(rec.projected[site.k], site.num_kv_heads)  # (KV, S, d_k)
        v = split_heads(rec.projected[site.v], site.num_kv_heads)  # (KV, S, d_v)
        return q, k, v

    def positions(self, site: Site, rec: Recorder, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """q, k as the scores use them, and a bias (H, T, S) added to the scores; default: unchanged."""
        return q, k, None

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        """W_Q [H, d_model, d_k], W_K [KV, d_context, d_k], W_V [KV, d_context, d_v] and biases [., d] or None.

        Default: q, k and v are Linear layers whose output rows h*d:(h+1)*d belong to head h.
        """
        (W_Q, b_Q), (W_K, b_K), (W_V, b_V) = (split_linear(m, n) for m, n in (
            (site.q, site.num_heads), (site.k, site.num_kv_heads), (site.v, site.num_kv_heads)))
        return {"W_Q": W_Q, "b_Q": b_Q, "W_K": W_K, "b_K": b_K, "W_V": W_V, "b_V": b_V}

    def out_weights(self, site: Site) -> tuple[Tensor, Tensor | None]:
        """W_O (d_out, H*d_v) in torch Linear layout, and b_O (d_out,) or None."""
        return site.out.weight, site.out.bias

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module] | None:
        """A decoder-only model's blocks, in order, and the norm between the last block and the LM head
        (what direct logit attribution needs); None where this adapter does not know them."""
        return None

    def max_positions(self) -> int | None:
        """How many positions the model has embeddings for (None: no limit from positions)."""
        cfg = self.model.config
        return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)

    def causal(self, part: str) -> bool:
        return part == "decoder"

    def forward(self, ids: Sequence[int], decoder_ids: Sequence[int] | None = None) -> Any:
        """One forward pass of the base model (batch of one) with output_attentions, no cache."""
        device = next(self.base.parameters()).device
        kwargs: dict[str, Any] = {"output_attentions": True}
        if "use_cache" in inspect.signature(self.base.forward).parameters:
            kwargs["use_cache"] = False
        if self.kind == "encoder-decoder":
            kwargs["decoder_input_ids"] = torch.tensor([list(decoder_ids)], device=device)
        with torch.no_grad():
            return self.base(input_ids=torch.tensor([list(ids)], device=device), **kwargs)

    def model_attentions(self, outputs: Any, part: str) -> tuple[Tensor, ...]:
        """The model's own attention weights for `part`: one (1, H, T, S) tensor per layer."""
        field = "attentions" if self.kind != "encoder-decoder" else f"{part}_attentions"
        attentions = getattr(outputs, field, None)
        if not attentions:
            raise ModelLoadError(f"the '{self.model.config.model_type}' model returned no {field} (output_attentions)")
        return attentions

    def final_hidden(self, outputs: Any, part: str) -> Tensor:
        """The last hidden state (1, T, d_model) of part's stack: the encoder's for the encoder part of an
        encoder-decoder, else the model's last_hidden_state (the decoder's in an encoder-decoder)."""
        if self.kind == "encoder-decoder" and part == "encoder":
            return outputs.encoder_last_hidden_state
        return outputs.last_hidden_state

    def trace(
        self,
        part: str,
        layer: int,
        *,
        ids: Sequence[int],
        decoder_ids: Sequence[int] | None,
        query_tokens: Sequence[str],
        key_tokens: Sequence[str],
        head_mask: Tensor | None,
        meta: dict[str, Any],
    ) -> AttentionTrace:
        """Run the model once with hooks on (part, layer) and rebuild every intermediate of that layer."""
        return self.traces(part, [layer], ids=ids, decoder_ids=decoder_ids, query_tokens=query_tokens,
                           key_tokens=key_tokens, head_mask=head_mask, meta=meta)[0]

    @torch.no_grad()
    def traces(
        self,
        part: str,
        layers: Sequence[int],
        *,
        ids: Sequence[int],
        decoder_ids: Sequence[int] | None,
        query_tokens: Sequence[str],
        key_tokens: Sequence[str],
        head_mask: Tensor | None,
        meta: dict[str, Any],
    ) -> list[AttentionTrace]:
        """One forward pass with hooks on every layer in `layers` of part; each layer's trace, in that order.

        head_mask, if given, scales the head blocks of every one of those layers.
        """
        recorders = [Recorder(self.site(part, layer), head_mask) for layer in layers]
        with contextlib.ExitStack() as hooks:
            for rec in recorders:
                hooks.enter_context(rec)
            outputs = self.forward(ids, decoder_ids)
        reference = self.model_attentions(outputs, part)  # one (1, H, T, S) per layer
        return [
            self._rebuild(part, rec, reference[layer][0], query_tokens, key_tokens, head_mask, {**meta, "layer": layer})
            for layer, rec in zip(layers, recorders, strict=True)
        ]

    def _rebuild(
        self,
        part: str,
        rec: Recorder,
        reference: Tensor,
        query_tokens: Sequence[str],
        key_tokens: Sequence[str],
        head_mask: Tensor | None,
        meta: dict[str, Any],
    ) -> AttentionTrace:
        """Every intermediate of one layer from what its Recorder captured; reference: the model's (H, T, S)."""
        site = rec.site
        H, KV = site.num_heads, site.num_kv_heads
        q, k, v = self.heads(site, rec)  # (H, T, d_k), (KV, S, d_k), (KV, S, d_v)
        q, k, bias = self.positions(site, rec, q, k)
        kv_heads = tuple(h // (H // KV) for h in range(H))  # query head h reads K/V head h // (H/KV)
        k, v = k[list(kv_heads)], v[list(kv_heads)]  # (H, S, d_k), (H, S, d_v)
        scores = q @ k.transpose(-1, -2) * float(site.attention.scaling)  # (H, T, S)
        if bias is not None:
            scores = scores + bias  # (H, T, S)
        scores = scores + additive_mask(rec.arguments.get(self.mask_argument))  # (H, T, S)
        if self.causal(part):
            scores = scores.masked_fill(causal_mask(*scores.shape[-2:], scores.device), float("-inf"))  # (H, T, S)
        weights = scores.softmax(dim=-1)  # (H, T, S)
        head_outputs = weights @ v  # (H, T, d_v)
        if head_mask is not None:
            head_outputs = head_outputs * head_mask.to(head_outputs)[:, None, None]  # (H, T, d_v)
        W_O, b_O = self.out_weights(site)  # (d_out, H*d_v), (d_out,)
        projections = {  # K/V weights of grouped-query heads repeated like k and v: head h's own W_K[h]
            name: None if W is None else to_numpy(W if name[-1] == "Q" else W[list(kv_heads)])
            for name, W in self.projection_weights(site).items()
        }  # W_Q (H, d_model, d_k), W_K (H, d_context, d_k), W_V (H, d_context, d_v), biases (H, d)
        merged = head_outputs.transpose(0, 1).flatten(1)  # (T, H*d_v)
        check = {
            "weights vs output_attentions": max_abs_diff(weights, reference),
            "head outputs vs concat": max_abs_diff(merged, rec.concat),
            "concat @ W_O^T + b vs output": max_abs_diff(
                rec.concat @ W_O.T + (0.0 if b_O is None else b_O), rec.output
            ),
        }
        return AttentionTrace(
            query_tokens=tuple(query_tokens),
            key_tokens=tuple(key_tokens),
            weights=to_numpy(weights),
            queries=to_numpy(q),
            keys=to_numpy(k),
            values=to_numpy(v),
            scores=to_numpy(scores),
            head_outputs=to_numpy(head_outputs),
            concat=to_numpy(rec.concat),
            output=to_numpy(rec.output),
            W_O=to_numpy(W_O),
            b_O=None if b_O is None else to_numpy(b_O),
            **projections,
            scale=float(site.attention.scaling),
            causal=self.causal(part),
            cross=part == "cross",
            kv_heads=kv_heads if KV != H else None,
            meta={**meta, "check": check},
        )
