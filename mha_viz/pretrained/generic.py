"""Architectures without an adapter: find each layer's attention module and output projection by looking.

One probe forward pass (with output_attentions) hooks every module. Layer l's attention module is the
innermost module whose output holds the very tensor the model reports as layer l's attention weights;
its output projection is the one Linear (or Conv1D) named like one (o_proj, out_proj, dense, c_proj, ...)
among that module's children, or else in its parent outside it (BERT-style attention.output.dense).
The traces then hold what that projection receives and returns, as in every adapter:
    concat = the projection's input (T, H*d_v)    head_outputs = concat split into H blocks
    output = concat W_O^T + b_O                    weights = the model's own output_attentions
Queries, keys, values and scores stay unknown: where and how the model projects and positions them is
exactly what an adapter would say.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import torch
from torch import Tensor, nn

from ..trace import AttentionTrace
from .adapter import PARTS, Adapter, Recorder, Site, TraceRequest, in_out, loaded, max_abs_diff, per_head, to_numpy

OUT_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "o", "out_lin", "Wo", "wo", "out", "proj")
PROBE_IDS = (1, 2, 3, 4, 5)


def probe_kind(adapter: Adapter) -> str:
    """The model's kind: "encoder-decoder" from its config, else "decoder" if no token ever attends to a
    later one in its own attention weights (a causal model), else "encoder"."""
    if adapter.model.config.is_encoder_decoder:
        return "encoder-decoder"
    adapter.kind = "encoder"  # run the probe as a single stack
    attentions = adapter.model_attentions(adapter.forward(PROBE_IDS), "encoder")
    return "decoder" if all(bool((a[0].triu(1) == 0).all()) for a in attentions) else "encoder"


def _is_projection(module: nn.Module) -> bool:
    from transformers.pytorch_utils import Conv1D

    return isinstance(module, (nn.Linear, Conv1D))


def _out_projection(model: nn.Module, name: str, module: nn.Module) -> tuple[str, nn.Module] | None:
    """The output projection of the attention module `name`: (its name, it), or None if there is not exactly one."""
    found = [(f"{name}.{n}", m) for n, m in module.named_children() if n in OUT_NAMES and _is_projection(m)]
    if not found and "." in name:
        parent_name = name.rsplit(".", 1)[0]
        inside = set(module.modules())
        found = [(f"{parent_name}.{n}", m) for n, m in model.get_submodule(parent_name).named_modules()
                 if m not in inside and n.rsplit(".", 1)[-1] in OUT_NAMES and _is_projection(m)]
    return found[0] if len(found) == 1 else None


class GenericAdapter(Adapter):
    """Concat, head outputs, W_O and output for an architecture without an adapter (see the module docstring)."""

    def __init__(self, model: nn.Module, kind: str, sites: dict[str, list[Site]], names: dict[str, list[str]]) -> None:
        super().__init__(model)
        self.kind = kind
        self.sites = sites
        self.unavailable = (
            f"mha-viz has no adapter for the '{model.config.model_type}' architecture. It found each layer's output "
            f"projection ({names[self.parts[0]][0]}, ...), so traces hold the model's own attention weights, the "
            "concat that projection receives, the head outputs (the concat's H blocks), W_O and the output: "
            "Concat -> W_O, contributions and knockout work. Queries, keys, values and scores are missing (One head, "
            "Q/K/V and score views): only an adapter knows where this architecture projects them and how it applies "
            "positions."
        )

    @classmethod
    def probe(cls, model: nn.Module) -> GenericAdapter | str:
        """The generic adapter for model, or why there is none (a str)."""
        probe = Adapter(model)
        kind = probe_kind(probe)
        probe.kind = kind
        names = {m: n for n, m in model.named_modules()}
        calls: list[tuple[nn.Module, int, list[Tensor]]] = []  # (module, its call number, tensors it returned)
        counts: Counter[nn.Module] = Counter()

        def record(module: nn.Module, args: tuple, output: Any) -> None:
            returned = output if isinstance(output, (tuple, list)) else (output,)
            calls.append((module, counts[module], [t for t in returned if isinstance(t, Tensor)]))
            counts[module] += 1

        with contextlib.ExitStack() as hooks:
            for module in model.modules():
                hooks.callback(module.register_forward_hook(record).remove)
            outputs = probe.forward(PROBE_IDS, PROBE_IDS if kind == "encoder-decoder" else None)
        sites: dict[str, list[Site]] = {}
        out_names: dict[str, list[str]] = {}
        for part in PARTS[kind]:
            sites[part], out_names[part] = [], []
            for layer, weights in enumerate(probe.model_attentions(outputs, part)):
                returned = [(m, call) for m, call, tensors in calls if any(t is weights for t in tensors) and m is not model]
                if not returned:
                    return f"no module of the '{model.config.model_type}' model returns {part} layer {layer}'s weights"
                module, call = max(returned, key=lambda mc: names[mc[0]].count("."))  # the innermost
                found = _out_projection(model, names[module], module)
                H = weights.shape[1]
                width = None if found is None else in_out(found[1])[0].shape[0]  # the concat's width H*d_v
                if found is None or width % H:
                    return (f"the output projection of {part} layer {layer} ({names[module]}) cannot be told apart: "
                            f"no single Linear named {'/'.join(OUT_NAMES)} with an input of H x d_v columns")
                sites[part].append(Site(module, None, None, None, found[1], H, H, width // H, call=call))
                out_names[part].append(found[0])
        return cls(model, kind, sites, out_names)

    def site(self, part: str, layer: int) -> Site:
        return self.sites[part][layer]

    @torch.no_grad()
    def traces(self, request: TraceRequest) -> list[AttentionTrace]:
        recorders = [Recorder(self.site(request.part, layer), request.head_mask) for layer in request.layers]
        reference = self.recorded(request, recorders)  # one (1, H, T, S) per layer
        return [self._partial(request, layer, rec, reference[layer][0])
                for layer, rec in zip(request.layers, recorders, strict=True)]

    def _partial(self, request: TraceRequest, layer: int, rec: Recorder, weights: Tensor) -> AttentionTrace:
        """The trace of one layer from the model's weights (H, T, S) and what its output projection saw."""
        site = rec.site
        concat, output = rec.concat.float(), rec.output.float()  # (T, H*d_v), (T, d_out)
        with loaded(site.out):
            W_O, b_O = (None if w is None else w.float() for w in self.out_weights(site))  # (d_out, H*d_v), (d_out,)
            check = {"concat @ W_O^T + b vs output": max_abs_diff(concat @ W_O.T + (0.0 if b_O is None else b_O), output)}
            W_O_np, b_O_np = to_numpy(W_O), None if b_O is None else to_numpy(b_O)
        return AttentionTrace(
            query_tokens=request.query_tokens,
            key_tokens=request.key_tokens,
            weights=to_numpy(weights),
            head_outputs=to_numpy(per_head(concat, site.num_heads)),  # (H, T, d_v): the concat's blocks
            concat=to_numpy(concat),
            output=to_numpy(output),
            W_O=W_O_np,
            b_O=b_O_np,
            causal=self.causal(request.part),
            cross=request.part == "cross",
            meta={**request.layer_meta(layer), "unavailable": self.unavailable,
                  "model_dtype": str(rec.output.dtype).removeprefix("torch."), "check": check},
        )
