"""Hybrid models: layers that mix tokens without softmax attention (linear attention, state spaces), traced as
exact mixing matrices beside the softmax layers.

A mixer adapter names, per layer, the module that mixes tokens where it is not softmax attention, and how that module
turns its input x (T, d_model) into a Mixing: its kind, the matrix M (H, T, T) of each head, the values it mixes and
what happens between M @ values and the output projection (a gated norm). Then, as for attention:

    weights      = M                               mha_viz.mixers (signed, rows not normalised; trace.kind says so)
    mixed        = M @ values                      checked against the module's own kernel output (its norm's input,
                                                   where a norm follows the kernel)
    head_outputs = finish(mixed)                   the layer's own gated norm: the concat's H blocks
    concat, output                                 hooked on the output projection, as for attention

The model reports no attention weights for these layers; model_attentions() fills them with the matrices, computed
from each mixer's input as the module received it in that forward pass (persistent pre-hooks), so every reader of
"the model's own weights" (traces(), attentions(), patching) sees one map per layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import Tensor, nn

from ..limits import MAX_MIXER_BYTES
from ..mixers import KINDS, Factors, largest_row_sum
from ..trace import AttentionTrace
from .adapter import Adapter, Recorder, Site, TraceRequest, loaded, max_abs_diff, per_head, to_numpy
from .errors import MixerSizeError


@dataclass(frozen=True)
class Mixing:
    """One mixer layer on one input, per head: factors (what its matrix is made of: mha_viz.mixers.Factors), whose
    matrix (H, T, T) times values (H, T, d_v) is the module's kernel output; finish maps it to what the output projection receives (H, T, d_v -> H, T, d_v);
    arrays: the per-head quantities the matrix is made of, each (H, T) (decays, step sizes, write strengths)."""

    kind: str
    name: str  # what the layer is called (Gated DeltaNet, Mamba-2)
    factors: Factors
    values: Tensor
    finish: Callable[[Tensor], Tensor]
    finish_formula: str
    arrays: dict[str, Tensor]
    no_scores: str  # why the trace has no queries, keys or scores

    @cached_property
    def matrix(self) -> Tensor:
        """(H, T, T) every head's whole mixing matrix (computed once, when first read)."""
        return self.factors.matrix()


class MixerAdapter(Adapter):
    """An adapter whose model has layers that are not softmax attention; subclasses implement mixer(), mixing() and
    mixer_site(), and site() for the softmax layers."""

    # A mixer's matrix needs the whole sequence (a cached step holds only its recurrent state): generation feeds the
    # whole sequence each step, so every step's row is exact.
    steps_from_cache = False

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self._inputs: dict[nn.Module, tuple[Tensor, bool]] = {}  # mixer -> (its last input (1, T, d), with a cache)
        self._mixed: dict[int, Mixing] = {}  # layer -> its Mixing, from recorded() to _rebuild() of one traces() call
        for module in self.mixer_modules():
            module.register_forward_pre_hook(self._keep_input, with_kwargs=True)

    @property
    def blocks(self) -> Sequence[nn.Module]:
        """The blocks that mix tokens, one per traced layer, in order: every block of base.layers, except in models
        whose MLPs are blocks of their own (Nemotron-H)."""
        return self.base.layers

    def mixer_modules(self) -> list[nn.Module]:
        return [m for layer in range(len(self.blocks)) if (m := self.mixer(layer)) is not None]

    def mixer(self, layer: int) -> nn.Module | None:
        """The module that mixes tokens in this layer when it is not softmax attention, else None."""
        raise NotImplementedError

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        """The mixer module's Mixing for its input x (T, d_model), computed with its own parameters and submodules."""
        raise NotImplementedError

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        raise NotImplementedError

    def layer_kind(self, part: str, layer: int) -> str:
        module = self.mixer(layer)
        return "softmax" if module is None else self.kind_of(module)

    def kind_of(self, module: nn.Module) -> str:
        raise NotImplementedError

    def site(self, part: str, layer: int) -> Site:
        module = self.mixer(layer)
        return self.attention_site(layer) if module is None else self.mixer_site(layer, module)

    def attention_site(self, layer: int) -> Site:
        raise NotImplementedError

    def taken_input(self, layer: int) -> Tensor:
        """What the layer's mixer received in the last forward pass, (T, d_model) float32, handed over: no longer
        kept (a long trace's mixers, computed from it once)."""
        return self._inputs.pop(self.mixer(layer))[0][0].float()

    def _keep_input(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs.get("hidden_states", next(iter(kwargs.values())))  # its first argument
        cache = kwargs.get("cache", kwargs.get("cache_params", kwargs.get("past_key_values")))
        self._inputs[module] = (x.detach(), cache is not None)

    def model_attentions(self, outputs: Any, part: str) -> tuple[Tensor, ...]:
        """One map (1, H, T, T) per layer: the model's own weights on softmax layers, the exact mixing matrix on the
        others (from each mixer's input in the forward pass that made outputs). MixerSizeError where they would not
        fit (_check_size)."""
        layers = range(len(self.blocks))
        inputs = [x for x, _ in self._inputs.values()]  # (1, T, d) each
        if inputs:
            self._check_size(layers, inputs[0].shape[1])
        with torch.no_grad():
            return tuple(self._maps(outputs, layers).values())

    def _maps(self, outputs: Any, layers: Iterable[int], keep: bool = False) -> dict[int, Tensor]:
        """{layer: its map (1, H, T, T)} for these layers, from the forward pass that made outputs: the model's own
        weights on a softmax layer, the exact mixing matrix on a mixer layer (keep: its Mixing kept for _rebuild)."""
        L = len(self.blocks)
        recorded = list(getattr(outputs, "attentions", None) or ())  # the softmax layers' weights, or (MiniMax) an
        own = iter(recorded[layer] for layer in range(L) if self.mixer(layer) is None) if len(recorded) == L else (
            iter(recorded))  # entry for every layer, the mixers' being their states
        wanted, maps = set(layers), {}
        for layer in range(L):
            module = self.mixer(layer)
            if module is None:
                weights = next(own)
                if layer in wanted:
                    maps[layer] = weights
            elif layer in wanted:
                x, cached = self._inputs[module]
                if cached:
                    raise ValueError(f"layer {layer} of {self.model.config.model_type} is not softmax attention "
                                     f"({self.kind_of(module)}): its mixing matrix is traced on a whole sequence, "
                                     "not step by step from a cache")
                mix = self.mixing(module, x[0].float())
                maps[layer] = mix.matrix[None]  # (1, H, T, T)
                if keep:
                    self._mixed[layer] = mix
        return maps

    def _check_size(self, layers: Iterable[int], T: int) -> None:
        """MixerSizeError (a ValueError), before any matrix is made, where these layers' whole mixing matrices at T
        tokens (float32) would take more than MAX_MIXER_BYTES: a mixer without heads (Mamba-1, LFM2) has one [T, T]
        matrix per channel."""
        wanted = [(layer, m) for layer in sorted(set(layers)) if (m := self.mixer(layer)) is not None]
        if not wanted:
            return
        matrices = sum(self.mixer_site(layer, m).num_heads for layer, m in wanted)  # [T, T] each
        need = 4 * matrices * T * T
        if need > MAX_MIXER_BYTES:
            most = int((MAX_MIXER_BYTES / (4 * matrices)) ** 0.5)
            raise MixerSizeError(
                f"{len(wanted)} mixer layer(s) of {self.model.config.model_type} hold {matrices} mixing matrices of "
                f"[{T}, {T}] (one per head or channel): {need / 2**20:,.1f} MiB of float32, more than the "
                f"{MAX_MIXER_BYTES / 2**20:,.1f} MiB allowed. Use at most {most} tokens, one layer at a time "
                "(trace(text, layer)), or long_trace(text), which computes any block of them on demand")

    def recorded(self, request: TraceRequest, recorders: Sequence[Recorder]) -> dict[int, Tensor]:
        """Run the request's forward pass with the recorders' hooks on: the requested layers' maps, by layer (the
        Mixing of a requested mixer layer is kept for _rebuild, computed once). MixerSizeError before the pass where
        the requested mixer layers' matrices would not fit (_check_size)."""
        self._check_size(request.layers, len(request.ids))
        with contextlib.ExitStack() as hooks:
            for rec in recorders:
                hooks.enter_context(rec)
            outputs = self.forward(request.ids, request.decoder_ids)
        self._mixed.clear()
        return self._maps(outputs, request.layers, keep=True)

    def _rebuild(self, request: TraceRequest, layer: int, rec: Recorder, reference: Tensor) -> AttentionTrace:
        module = self.mixer(layer)
        if module is None:
            return super()._rebuild(request, layer, rec, reference)
        if rec.concat is None or rec.output is None or (rec.site.core is not None and rec.core is None):
            raise RuntimeError(f"the mixer of layer {layer} did not run")
        site = rec.site
        x = self._inputs[module][0][0].float()  # (T, d_model): its input in this forward pass (_keep_input)
        mix = self._mixed.pop(layer, None) or self.mixing(module, x)  # computed by recorded() in the same pass
        mixed = mix.matrix @ mix.values  # (H, T, d_v)
        head_outputs = mix.finish(mixed)  # (H, T, d_v)
        if request.head_mask is not None:
            head_outputs = head_outputs * request.head_mask.to(head_outputs)[:, None, None]  # as the concat's blocks
        concat, output = rec.concat.float(), rec.output.float()  # (T, H*d_v), (T, d_out)
        check, scale = {}, {}
        if rec.core is not None:  # the kernel's output, where a norm between it and the projection shows it
            own = per_head(rec.core.float().reshape(x.shape[0], -1), site.num_heads)  # (H, T, d_v)
            label = "mixing matrix @ values vs the mixer's own output"
            check[label] = max_abs_diff(mixed, own)
            reach = largest_row_sum(mix.matrix) * mix.values.abs().amax((-1, -2))  # (H,) >= sum_s |M_ts| |v_s|
            scale[label] = float(reach.max())  # what rounding of the signed sum scales with (mha_viz.checks)
        with loaded(site.out):
            W_O, b_O = (None if w is None else w.float() for w in self.out_weights(site))  # (d_out, H*d_v), (d_out,)
            check |= {
                "head outputs vs concat": max_abs_diff(head_outputs.transpose(0, 1).flatten(1), concat),
                "concat @ W_O^T + b vs output": max_abs_diff(concat @ W_O.T + (0.0 if b_O is None else b_O), output),
            }
            W_O_np, b_O_np = to_numpy(W_O), None if b_O is None else to_numpy(b_O)
        return AttentionTrace(
            query_tokens=request.query_tokens,
            key_tokens=request.key_tokens,
            weights=to_numpy(mix.matrix),
            values=to_numpy(mix.values),
            head_outputs=to_numpy(head_outputs),
            concat=to_numpy(concat),
            output=to_numpy(output),
            W_O=W_O_np,
            b_O=b_O_np,
            causal=True,
            kind=mix.kind,
            head_arrays={name: to_numpy(a) for name, a in mix.arrays.items()},
            meta={**request.layer_meta(layer), **self.block_meta(layer), "unavailable": mix.no_scores, "head_norm": mix.finish_formula,
                  "mixer": mix.name, "matrix": KINDS[mix.kind],
                  "model_dtype": str(rec.output.dtype).removeprefix("torch."), "check": check, "check_scale": scale},
        )
