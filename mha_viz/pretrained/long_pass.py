"""A long trace of a PretrainedModel: its ids, the route (mha-viz's kernel in transformers' attention functions, or the
model's own eager pass for a model whose attention is its own code), and the limits checked before any work."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..checks import verify
from ..token_labels import token_labels
from ..trace import MIXING_KINDS
from .encoded import CHARS_PER_TOKEN
from .long import OVERVIEW_SIDE, ModelLongTrace, _Capture, kept_bytes_per_token, long_kernel
from .long_hooked import trace_hooked


def trace_model(model: Any, text: str | None = None, *, ids: Sequence[int] | None = None,
                layers: Sequence[int] | None = None, progress: Callable[[int, int], None] | None = None,
                max_bytes: int | None = None, overview_side: int = OVERVIEW_SIDE) -> ModelLongTrace:
    """The long trace of a PretrainedModel (an encoder or a decoder-only model) on text or token ids as given.

    Text is tokenised without the tokenizer's length limit and cut to the model's positions (meta "truncated").
    layers: which layers to keep (default all; the forward pass runs them all). progress(done, total) is called
    after each kept layer; raising LongTraceCancelled (or anything) there stops the pass. max_bytes: ValueError
    before any work when what the trace would keep is larger. A model whose attention is its own code (BLOOM, ALiBi)
    runs its own eager pass instead, refused before running where its [H, T, T] tensors would pass
    long_hooked.EAGER_MAX_BYTES. A differential layer (DiffLlama) keeps its H softmax maps, ordinary heads each:
    differential head i is map_i - lambda map_(i + H/2) of them.
    """
    adapter, part = model.adapter, model.parts[0]
    if model.kind == "encoder-decoder":
        raise ValueError(f"{model.name} is an encoder-decoder model; a long trace reads one self-attention stack "
                         "(an encoder or a decoder-only model)")
    if model.unavailable is not None:
        raise ValueError(f"{model.name} cannot be traced layer by layer: {model.unavailable}")
    if getattr(adapter, "long_unavailable", None):
        raise ValueError(f"{model.name} has no long trace yet: {adapter.long_unavailable}")
    mixers = [i for i, kind in enumerate(model.layer_kinds(part)) if kind in MIXING_KINDS]
    if mixers:
        raise ValueError(f"{model.name} has layers that are not softmax attention ({', '.join(map(str, mixers))}: "
                         "linear attention or a state space), and long traces of those are not built yet; "
                         f"trace(text, layer) gives their exact mixing matrices up to {model.max_tokens} tokens")
    ids = _long_ids(model, text, ids)
    n_layers = model.num_layers[part]
    chosen = tuple(range(n_layers)) if layers is None else tuple(sorted({model._layer(part, i) for i in layers}))
    sites = {i: adapter.site(part, i) for i in chosen}
    per_token = sum(kept_bytes_per_token(s.num_heads, s.num_kv_heads, s.head_dim, s.head_dim) for s in sites.values())
    side = -(-len(ids) // -(-len(ids) // overview_side))  # blocks a side of the overview: at most overview_side
    overview = sum(2 * s.num_heads * 4 for s in sites.values())  # bytes per overview cell (max and mean)
    need = len(ids) * per_token + overview * side**2
    if max_bytes is not None and need > max_bytes:
        fit = max(0, (max_bytes - overview * overview_side**2) // per_token)  # whatever the overview's side
        raise ValueError(f"a long trace of {len(ids)} tokens over {len(chosen)} layers of {model.name} keeps "
                         f"{need / 2**20:.0f} MiB, more than the {max_bytes / 2**20:.0f} MiB allowed: at most "
                         f"{fit} tokens of these layers fit (or trace fewer layers)")
    modules = {s.attention: (i, adapter.causal(part), adapter.chunk(s)) for i, s in sites.items()}
    tokens = token_labels(model.tokenizer, ids)
    own_code = _probe(model, modules)
    capture = _Capture(modules, tokens, progress, overview_side)
    start = time.perf_counter()
    if own_code:  # BLOOM (ALiBi): the model's own eager pass, its q, k, v captured by hooks (long_hooked)
        capture.layers = trace_hooked(model, ids, sites, tokens, progress, overview_side)
    else:
        with long_kernel(model.model, capture), torch.no_grad():
            adapter.base(input_ids=torch.tensor([list(ids)], device=adapter.device()), use_cache=False)
    for layer in capture.layers.values():  # the hooked route's layers carry a self-check (meta "check")
        layer.meta.setdefault("model", model.name)
    verify(capture.layers.values(), strict=getattr(model, "strict", False))
    return ModelLongTrace(model.name, tuple(ids), tokens, dict(sorted(capture.layers.items())),
                          seconds=time.perf_counter() - start)


def _probe(model: Any, modules: dict[nn.Module, tuple[int, bool, int | None]]) -> bool:
    """Whether the model computes attention in its own code: True when no traced layer's attention went through
    transformers' attention functions (checked on two tokens, before a long pass); ValueError when some did and
    some did not."""
    capture = _Capture(modules, ("a", "b"), None, OVERVIEW_SIDE)
    with long_kernel(model.model, capture), torch.no_grad():
        model.adapter.base(input_ids=torch.tensor([[0, 0]], device=model.adapter.device()), use_cache=False)
    missing = sorted(i for i, *_ in modules.values() if i not in capture.layers)
    if missing and capture.layers:
        raise ValueError(f"{model.name} ({model.architecture}) computes attention in its own code in layers "
                         f"{missing} only: it has no long trace")
    return bool(missing)


def _long_ids(model: Any, text: str | None, ids: Sequence[int] | None) -> tuple[int, ...]:
    """Token ids of text (special tokens added, cut to the model's positions) or ids as given (checked)."""
    limit = model.adapter.max_positions()
    if (text is None) == (ids is None):
        raise ValueError("pass text or ids, not both")
    if ids is None:
        cut = text if limit is None else text[: CHARS_PER_TOKEN * limit]
        ids = model.tokenizer(cut, verbose=False)["input_ids"]
        if limit is not None and len(ids) > limit:
            ids = [*ids[: limit - 1], ids[-1]]  # the closing special token (if any) stays
    ids = [int(i) for i in ids] if all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids) else None
    if ids is None or not all(0 <= i < model.vocab_size for i in ids):
        raise ValueError(f"token ids must be integers in 0 ... {model.vocab_size - 1} for {model.name}")
    if not 2 <= len(ids) <= (limit or len(ids)):
        raise ValueError(f"a long trace needs 2 ... {limit} tokens for {model.name}, got {len(ids)}")
    return tuple(ids)
