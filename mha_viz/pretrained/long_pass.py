"""A long trace of a PretrainedModel: its ids, the route (mha-viz's kernel in transformers' attention functions, or the
model's own eager pass for a model whose attention is its own code), and the limits checked before any work."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..checks import verify
from ..token_labels import token_labels
from ..trace import MIXING_KINDS
from .adapter import Site
from .encoded import CHARS_PER_TOKEN
from .long import OVERVIEW_SIDE, STAT_NAMES, ModelLongTrace, _Capture, kept_bytes_per_token, long_kernel
from .long_hooked import EAGER_MAX_BYTES, eager_bytes, trace_hooked
from .long_mixer import long_mixer_layer


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
    ids = _long_ids(model, text, ids)
    n_layers = model.num_layers[part]
    chosen = tuple(range(n_layers)) if layers is None else tuple(sorted({model._layer(part, i) for i in layers}))
    kinds = model.layer_kinds(part)
    sites = {i: adapter.site(part, i) for i in chosen if kinds[i] not in MIXING_KINDS}
    mixers = {i: adapter.site(part, i) for i in chosen if kinds[i] in MIXING_KINDS}  # traced by long_mixer
    modules = {s.attention: (i, adapter.causal(part), adapter.chunk(s)) for i, s in sites.items()}
    own_code, mixer_bytes = _probe(model, modules, mixers)
    per_token = sum(kept_bytes_per_token(s.num_heads, s.num_kv_heads, s.head_dim, s.head_dim) for s in sites.values())
    per_token += sum(mixer_bytes.values())
    side = -(-len(ids) // -(-len(ids) // overview_side))  # blocks a side of the overview: at most overview_side
    overview = sum(2 * s.num_heads * 4 for s in (*sites.values(), *mixers.values()))  # bytes per overview cell
    need = len(ids) * per_token + overview * side**2
    if max_bytes is not None and need > max_bytes:
        fit = max(0, (max_bytes - overview * overview_side**2) // per_token)  # whatever the overview's side
        raise ValueError(f"a long trace of {len(ids)} tokens over {len(chosen)} layers of {model.name} keeps "
                         f"{need / 2**20:.0f} MiB, more than the {max_bytes / 2**20:.0f} MiB allowed: at most "
                         f"{fit} tokens of these layers fit (or trace fewer layers)")
    square = adapter.own_square_tensors()
    if square and eager_bytes(square, len(ids)) > EAGER_MAX_BYTES:
        most = int((EAGER_MAX_BYTES / eager_bytes(square, 1)) ** 0.5)
        raise ValueError(f"{model.name} ({model.architecture}) makes [tokens, tokens] scores in its own code (its "
                         f"indexer, {square} head(s)): {eager_bytes(square, len(ids)) / 2**20:.0f} MiB at "
                         f"{len(ids)} tokens, more than the {EAGER_MAX_BYTES / 2**20:.0f} MiB allowed: use at most "
                         f"{most} tokens")
    if own_code and mixers:
        raise ValueError(f"{model.name} computes attention in its own code and has mixer layers: it has no long trace")
    tokens = token_labels(model.tokenizer, ids)
    capture = _Capture(modules, tokens, progress, overview_side, total=len(chosen))
    start = time.perf_counter()
    if own_code:  # BLOOM (ALiBi): the model's own eager pass, its q, k, v captured by hooks (long_hooked)
        capture.layers = trace_hooked(model, ids, sites, tokens, progress, overview_side)
    else:
        cores: dict[int, Tensor] = {}  # mixer layer -> what the norm after its kernel received (T, H*d_v)
        with long_kernel(model.model, capture), torch.no_grad(), _kernel_outputs(mixers, cores):
            _forward(adapter, ids, capture)
        for i in mixers:  # each mixer's input, as the forward pass gave it (MixerAdapter.taken_input)
            capture.layers[i] = long_mixer_layer(adapter, i, adapter.taken_input(i), cores.pop(i, None), tokens,
                                                 overview_side)
            capture.report()
    for layer in capture.layers.values():  # the hooked route's and the mixers' layers carry a self-check
        layer.meta.setdefault("model", model.name)
    verify(capture.layers.values(), strict=getattr(model, "strict", False))
    return ModelLongTrace(model.name, tuple(ids), tokens, dict(sorted(capture.layers.items())),
                          seconds=time.perf_counter() - start)


def _probe(model: Any, modules: dict[nn.Module, tuple[int, bool, int | None]], mixers: dict[int, Site]
           ) -> tuple[bool, dict[int, int]]:
    """On two tokens, before a long pass: whether the model computes attention in its own code (True when no traced
    layer's attention went through transformers' attention functions; ValueError when some did and some did not),
    and what each mixer layer's factors keep per token, in bytes."""
    capture = _Capture(modules, ("a", "b"), None, OVERVIEW_SIDE)
    adapter = model.adapter
    with long_kernel(model.model, capture), torch.no_grad():
        _forward(adapter, (0, 0), capture)
    missing = sorted(i for i, *_ in modules.values() if i not in capture.layers)
    if missing and capture.layers:
        raise ValueError(f"{model.name} ({model.architecture}) computes attention in its own code in layers "
                         f"{missing} only: it has no long trace")
    per_token = {}
    for i, site in mixers.items():
        with torch.inference_mode():
            factors = adapter.mixing(adapter.mixer(i), adapter.taken_input(i)).factors
        per_token[i] = factors.nbytes // 2 + 4 * len(STAT_NAMES) * site.num_heads  # factors, then row statistics
    return bool(missing), per_token


def _forward(adapter: Any, ids: Sequence[int], capture: _Capture) -> None:
    """The base model's forward pass on ids through the long kernel; a model whose own code needs the causal mask
    (Adapter.own_square_tensors: DeepSeek-V3.2's indexer) gets it as a [1, 1, T, T] tensor, which the kernel knows:
    additive (0 where a key is seen, the dtype's minimum after the query), which every transformers version reads."""
    device, T = adapter.device(), len(ids)
    kwargs: dict[str, Any] = {}
    if adapter.own_square_tensors():
        dtype = adapter.model.dtype
        mask = torch.full((1, 1, T, T), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
        capture.causal_mask = kwargs["attention_mask"] = mask
    adapter.base(input_ids=torch.tensor([list(ids)], device=device), use_cache=False, **kwargs)


@contextmanager
def _kernel_outputs(mixers: dict[int, Site], into: dict[int, Tensor]) -> Iterator[None]:
    """While open, each mixer layer's kernel output (the input of the norm after it, where it has one) goes to into."""
    def keep(layer: int) -> Callable:
        return lambda module, args: into.__setitem__(layer, args[0].detach())  # T H d_v numbers (batch of one)

    handles = [site.core.register_forward_pre_hook(keep(i)) for i, site in mixers.items() if site.core is not None]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


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
