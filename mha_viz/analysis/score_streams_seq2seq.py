"""Score attribution in an encoder-decoder (T5, BART): one stack's residual stream at a layer's self- or
cross-attention, or at its output, split into its sources, step by step as the adapter's StackLayout
(mha_viz.pretrained.stacks) names the steps.

Each step adds to the stream x at every position:
    attention (self or cross)   sum_h c_h W_O^(h)T + b_O     heads "i.h" (self), "i cross.h" (cross); b_O: constant
    MLP                         after - before               "i MLP"
In a post-norm stack (BART) the norm after the embeddings and after each step, frozen at its scale s on what it
really received, takes every source through it: gamma * centre(src) / s, its beta into the constant source
"biases (norms, W_O)". "token" is the token embedding (BART's times embed_scale); "position" what the embeddings'
sum adds to it (BART's learned positions, read at position + 2), where it is not 0. The decoder's stream reads the
encoder only through its cross-attention heads, each a source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .score_frozen import Frozen
from .score_streams import head_parts, removed_each_side
from .score_streams_normed import EncoderStream

if TYPE_CHECKING:
    from ..pretrained.adapter import Recorder, Site
    from ..pretrained.model import PretrainedModel
    from ..pretrained.stacks import Tap


@dataclass(frozen=True, eq=False)
class StackStream:
    """Part's stream at one attention (or at its output), split; from one forward pass on ids and decoder_ids."""

    sources: dict[str, Tensor]  # name -> (T, d) float32, in the order they enter the stream; none that is 0
    x: Tensor  # (T, d) float64: the stream the attention reads (through its own norm, T5's), or the stack's output
    # before its final norm
    residual_error: float  # max abs difference of the sources' sum and the real stream, at every step on the way
    site: Site | None  # the attention's modules (None: the stack's output)
    rec: Recorder | None  # what the attention received and returned in that pass
    outputs: Any  # the model's outputs (its own attention weights)


@torch.no_grad()
def stack_stream(model: PretrainedModel, ids: Sequence[int], decoder_ids: Sequence[int], part: str, layer: int,
                 step: str = "self") -> StackStream:
    """The sources of part's ("encoder" or "decoder") stream at layer's step ("self" or "cross" attention) in the
    module docstring's steps; layer = the stack's number of layers: at its output (before its final norm)."""
    from ..pretrained.adapter import Recorder, loaded

    adapter = model.adapter
    layout = adapter.stack_layout(part)
    end = layer == len(layout.layers)
    target = None if end else layout.step(layer, step)
    steps = [(i, s) for i in range(layer) for s in layout.layers[i]]
    if target is not None:  # the steps of the layer before the target (the decoder's self-attention before its cross)
        steps += [(layer, s) for s in layout.layers[layer][:layout.layers[layer].index(target)]]
    last = steps[-1][1] if end else target
    here = ((last.norm, "out") if last.norm is not None else last.after) if end else target.before  # the stream x
    taps = [layout.embeddings, here, *(t for _, s in steps for t in (s.before, s.after)),
            *((s.site.out, "in") for _, s in steps if s.site is not None)]  # the stream at each step; each concat
    with _taps(taps) as seen, Recorder(target.site) if target else contextlib.nullcontext() as rec:
        outputs = adapter.forward(list(ids), list(decoder_ids))
    stack_ids = torch.tensor([list(ids if part == "encoder" else decoder_ids)], device=adapter.device())
    with loaded(layout.embed):
        token = layout.embed(stack_ids)[0].detach().double().cpu()  # (T, d)
    embeddings = seen[_key(layout.embeddings)]
    sources = {"token": token, "position": embeddings - token}
    constant = torch.zeros_like(token)  # (T, d) the norms' shifts and the W_O biases, as they are carried
    error = 0.0

    def normed(norm: nn.Module, received: Tensor) -> None:  # every source and the constant through the frozen norm
        nonlocal sources, constant, error
        error = max(error, float((sum(sources.values()) + constant - received).abs().max()))
        at = Frozen.of(norm, received)  # its scales (T,)
        sources = {name: at.linear(src) for name, src in sources.items()}
        constant = at.linear(constant) + (0 if at.beta is None else at.beta)

    if layout.embeddings_norm is not None:
        normed(layout.embeddings_norm, embeddings)
    for i, sub in steps:
        before = seen[_key(sub.before)]
        error = max(error, float((sum(sources.values()) + constant - before).abs().max()))
        if sub.site is None:
            sources[f"{i} MLP"] = seen[_key(sub.after)] - before
        else:
            heads, b_O = head_parts(adapter, sub.site, seen[_key((sub.site.out, "in"))])  # (H, T, d), (d,)
            name = f"{i}." if sub.name == "self" else f"{i} cross."
            sources |= {f"{name}{h}": head for h, head in enumerate(heads)}
            if b_O is not None:
                constant = constant + b_O
        if sub.norm is not None:
            normed(sub.norm, seen[_key(sub.after)])
    x = seen[_key(here)]  # (T, d)
    sources["biases (norms, W_O)"] = constant
    zero = 1e-6 * float(x.abs().max())  # what a difference of two float32 streams leaves of a part that adds 0
    kept = {name: src.float() for name, src in sources.items() if src.abs().amax() > zero}
    error = max(error, float((sum(s.double() for s in kept.values()) - x).abs().max()))
    return StackStream(kept, x, error, None if target is None else target.site, rec, outputs)


def _key(tap: Tap) -> tuple[int, str]:
    return id(tap[0]), tap[1]


@contextlib.contextmanager
def _taps(taps: Sequence[Tap]) -> Iterator[dict[tuple[int, str], Tensor]]:
    """While open, each tap's tensor in the module's first call, batch dropped, float64 on the CPU: (T, n), by _key."""
    seen: dict[tuple[int, str], Tensor] = {}

    def keep(key: tuple[int, str], value: Any) -> None:
        value = value if isinstance(value, Tensor) else value[0]
        seen.setdefault(key, value.detach()[0].double().cpu())

    handles = []
    for module, which in dict.fromkeys(taps):
        key = _key((module, which))
        if which == "in":
            handles.append(module.register_forward_pre_hook(
                lambda mod, args, kwargs, key=key: keep(key, args[0] if args else kwargs["hidden_states"]),
                with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(lambda mod, args, output, key=key: keep(key, output)))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


class Seq2SeqStream(EncoderStream):
    """An encoder-decoder's stack (T5, BART) at part's layer L attention: its sources as stack_stream splits them,
    its attention rebuilt as in the other streams. Cross-attention: the queries read the decoder's stream before the
    layer's cross-attention, the keys the encoder's output, whose own sources (key_sources) go through the encoder's
    final norm (T5's) frozen at its scales (key_affine)."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], decoder_ids: Sequence[int], part: str,
                 layer: int) -> None:
        stack, step = ("decoder", "cross") if part == "cross" else (part, "self")
        split = stack_stream(model, ids, decoder_ids, stack, layer, step)
        self.model, self.part = model, part
        self.sources, self.x, self.residual_error = split.sources, split.x, split.residual_error
        self.post_error = 0.0
        self._rebuild(split.site, split.rec, split.outputs, layer, part)
        if part == "cross":
            encoder = stack_stream(model, ids, decoder_ids, "encoder", model.num_layers["encoder"])
            final = model.adapter.stack_layout("encoder").final_norm
            self.final = nn.Identity() if final is None else final
            self.key_sources, self.key_x = encoder.sources, encoder.x  # (S, d) each
            self.key_affine = Frozen.identity(*encoder.x.shape) if final is None else Frozen.of(final, encoder.x)
            self.residual_error = max(self.residual_error, encoder.residual_error)
            eye = torch.eye(encoder.x.shape[-1], dtype=torch.float64)
            whole = self.key_affine.projected([encoder.x], range(len(encoder.x)), eye).sum(0)  # (S, d) normed
            real = self.model.adapter.final_hidden(split.outputs, "encoder")[0].double().cpu()  # what the keys read
            self.checks = {"frozen final norm vs the encoder's output": float((whole - real).abs().max())}

    def removed(self, norm: nn.Module, W: dict[str, Tensor], b: dict[str, Tensor], head: int, query: int) -> Tensor:
        """Self-attention: Stream.removed. Cross-attention: (query sources + key sources, S): the row with each query
        source taken out of the decoder's stream (through the real norm before the cross-attention), then with each
        key source taken out of the encoder's output (through its real final norm), the other side as it was."""
        if self.key_sources is None:
            return super().removed(norm, W, b, head, query)
        return removed_each_side(self.variations, head, query, W, b, (norm, self.x, list(self.sources.values())),
                                 (self.final, self.key_x, list(self.key_sources.values())), self.dtype)
