"""Long traces of models that compute attention in their own code (BLOOM: ALiBi), not through transformers'
attention functions, so mha-viz's kernel cannot take their place.

The model runs its own eager forward pass; that pass makes [H, T, T] scores and weights per layer itself, so its
work memory grows with T^2: EAGER_BYTES_PER_CELL x H x T^2 bytes, checked against max_eager_bytes (EAGER_MAX_BYTES
by default) BEFORE anything runs, and refused over it. Meanwhile the adapter's Recorder captures each traced layer's
fused projection and arguments; as soon as the layer's output projection has run, its q, k, v (Adapter.heads) and
variations (Adapter.variations: scale, the causal mask, BLOOM's ALiBi bias m_h * j) become Rules(alibi=m) and go
through run_layer, so the same LongLayer comes out as from the kernel route (mha_viz.pretrained.long). run_layer's
head outputs are checked against the concat the model itself computed (meta "check").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import Variations, apply_rotary
from .adapter import Recorder, Site, max_abs_diff
from .long import LongLayer, Rules, run_layer

EAGER_MAX_BYTES = 2**30  # the model's own eager pass may make at most this many bytes of [H, T, T] work tensors
EAGER_BYTES_PER_CELL = 3 * 4  # scores, scores + mask and the float32 softmax: about 3 float32 tensors [H, T, T] alive


def eager_bytes(num_heads: int, tokens: int) -> int:
    """Bytes of [H, T, T] work tensors the model's own eager attention makes in one layer (the widest layer)."""
    return EAGER_BYTES_PER_CELL * num_heads * tokens**2


def trace_hooked(model: Any, ids: Sequence[int], sites: dict[int, Site], tokens: tuple[str, ...],
                 progress: Callable[[int, int], None] | None, side: int,
                 max_eager_bytes: int = EAGER_MAX_BYTES) -> dict[int, LongLayer]:
    """{layer: LongLayer} of the traced sites from one eager forward pass of the model's own code on ids.

    ValueError before any work when the eager pass would need more than max_eager_bytes, or when a layer's
    attention has a term run_layer cannot reproduce (checked on the first traced layer, before its rows are
    computed). progress(done, total) after each layer; raising in it stops the pass."""
    adapter, part = model.adapter, model.parts[0]
    T = len(ids)
    need = eager_bytes(max(s.num_heads for s in sites.values()), T)
    if need > max_eager_bytes:
        most = int((max_eager_bytes / (need / T**2)) ** 0.5)
        raise ValueError(
            f"{model.name} ({model.architecture}) computes attention in its own code: its long trace runs the "
            f"model's eager forward pass, which makes [heads, tokens, tokens] weights in every layer, "
            f"{need / 2**20:.0f} MiB at {T} tokens, more than the {max_eager_bytes / 2**20:.0f} MiB allowed: "
            f"use at most {most} tokens")
    recorders = {layer: Recorder(site) for layer, site in sites.items()}
    layers: dict[int, LongLayer] = {}

    def finish(layer: int, module: nn.Module, args: tuple, output: Tensor) -> None:
        rec = recorders[layer]
        if layer in layers or rec.output is None:
            return
        layers[layer] = _long_layer(adapter, part, layer, rec, tokens, side)
        rec.projected.clear()  # the layer's captures are no longer needed
        rec.arguments.clear()
        if progress is not None:
            progress(len(layers), len(sites))

    with contextlib.ExitStack() as hooks, torch.no_grad():
        for layer, rec in recorders.items():
            hooks.enter_context(rec)  # its output hook runs before finish: registered first
            handle = rec.site.out.register_forward_hook(lambda m, a, o, layer=layer: finish(layer, m, a, o))
            hooks.callback(handle.remove)
        adapter.base(input_ids=torch.tensor([list(ids)], device=adapter.device()), use_cache=False)
    missing = sorted(set(sites) - set(layers))
    if missing:
        raise RuntimeError(f"the output projections of layers {missing} of {model.name} did not run")
    return layers


def _long_layer(adapter: Any, part: str, layer: int, rec: Recorder, tokens: tuple[str, ...], side: int) -> LongLayer:
    """One layer's LongLayer from what its Recorder captured (q, k, v, variations), through run_layer."""
    site = rec.site
    q, k, v = (x.float() for x in adapter.heads(site, rec))  # (H, T, d_k), (KV, S, d_k), (KV, S, d_v)
    var = adapter.variations(part, site, rec, q, k)
    rules = rules_of(var, q.shape[1], k.shape[1], f"{type(site.attention).__name__} (layer {layer})")
    if var.q_norm is not None:
        q = var.q_norm(q)
    if var.k_norm is not None:
        k = var.k_norm(k)
    if var.rotary is not None:
        cos, sin = (t.float() for t in var.rotary)  # (T, r) each
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    out, record = run_layer(q, k, v, rules, side=side)  # (H, T, d_v)
    lse, stats, ov_max, ov_mean, bt, bs = record
    check = {"head outputs vs concat": max_abs_diff(out.transpose(0, 1).flatten(1), rec.concat.float())}
    return LongLayer(layer, tokens, tokens, q, k, v, lse, stats, ov_max, ov_mean, bt, bs, rules,
                     kv_heads=site.kv_heads, meta={"route": "the model's own eager pass", "check": check, "layer": layer,
                                                 "model_dtype": str(rec.concat.dtype).removeprefix("torch.")})


def rules_of(var: Variations, T: int, S: int, where: str) -> Rules:
    """The Rules of a layer whose attention is var: its scale, a causal mask (a local window read from the mask where
    keys behind a query are hidden), ALiBi slopes from a bias m_h * j.
    ValueError for anything else (a mask that is not causal, other score biases, sinks, soft-capping, differential
    heads), naming it."""
    unsupported = [name for name, value in (("soft-capping", var.softcap), ("sinks", var.sinks),
                                            ("differential heads", var.differential), ("a head norm", var.head_norm),
                                            ("head gates", var.gates)) if value is not None]
    unsupported += [f"the score bias {name!r}" for name in var.bias if name != "ALiBi"]
    slopes = None
    if "ALiBi" in var.bias:
        bias = var.bias["ALiBi"].float()  # (H, 1, S): m_h * j
        slopes = bias[:, 0, 1] - bias[:, 0, 0] if S > 1 else torch.zeros(bias.shape[0])  # (H,)
        linear = slopes[:, None, None] * torch.arange(S, dtype=torch.float32)  # (H, 1, S)
        if bias.shape[1] != 1 or not torch.allclose(bias, linear, rtol=1e-5, atol=1e-5 * float(S)):
            unsupported.append("an ALiBi bias that is not m_h * j")
    rules = Rules(scale=var.scale, causal=var.causal, window=var.window, alibi=slopes)
    if var.mask is not None:
        given = var.mask.bool().expand(-1, T, S).any(0)  # (T, S) True where hidden
        back = torch.arange(T)[:, None] - torch.arange(S)[None, :]  # i - j
        if rules.window is None and bool((given & (back > 0)).any()):  # keys hidden behind a query: a local window
            rules = replace(rules, window=int(back[given & (back > 0)].min()))
        without = replace(rules, window=None) if var.window is not None else rules  # a window kept outside the mask
        if not any(torch.equal(given, _hidden(r, T, S)) for r in (rules, without)):
            unsupported.append("a mask that is not the causal or window mask")
    if unsupported:
        raise ValueError(f"{where} computes attention in its own code with {', '.join(unsupported)}: a long trace "
                         "cannot reproduce it")
    return rules


def _hidden(rules: Rules, T: int, S: int) -> Tensor:
    """(T, S) True where rules hide key j from query i."""
    hidden = rules.mask(0, T, 0, S)
    return torch.zeros(T, S, dtype=torch.bool) if hidden is None else hidden
