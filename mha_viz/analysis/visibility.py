"""What a layer lets a token see: each attention layer's reach measured by probing the model, against what its config
declares.

Measured: for layer L, the attention module is called again with the arguments it received in one forward pass (its
mask, its positions), on the mean of its input at every position, with key position j's input pushed far along a
random direction, both ways, and nudged (_probe says why); query i can reach key j when its output changes. Nothing of the config is read: a mask the code builds wrong, a window off by one, a layer that skips its mask
all show. Declared, from the config alone (transformers' conventions):
    causal                       a decoder: key j <= query i; an encoder sees both ways
    layer_types[L] / window      "sliding_attention": keys less than `sliding_window` back (i - j < sliding_window),
                                 or in an encoder up to sliding_window away each way (|i - j| <= sliding_window); a
                                 config with a sliding_window and no layer_types (Mistral, Phi-3) slides on every
                                 layer; GPT-Neo's "local" layers slide by window_size
    chunked_attention            Llama 4: keys in the query's chunk of attention_chunk_size (i // C == j // C)
The report gives, per layer, "as declared" or the first (query, key) where the two differ, and which way.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..attention import causal_mask, chunk_mask, window_mask

if TYPE_CHECKING:
    from ..pretrained.model import PretrainedModel

PROBES_AT_ONCE = 33  # changed inputs in one batched call of a layer's attention module (11 keys, three changes each)
PUSHES = (64.0, 1.0)  # how far a key's input is pushed, then nudged, in units of the input's root mean square
CHANGED = 1e-6  # an output changed when it moved by more than this share of the output's largest entry


@dataclass(frozen=True, eq=False)
class LayerReach:
    """One layer's reach: measured [query, key] (True: the query's output moves with the key's input) and declared."""

    layer: int
    rule: str  # what the config declares, in words: "causal", "causal, window 4", "causal, chunks of 4", "both ways"
    measured: np.ndarray  # (T, T) bool
    declared: np.ndarray  # (T, T) bool

    @property
    def as_declared(self) -> bool:
        return bool((self.measured == self.declared).all())

    @property
    def first_difference(self) -> tuple[int, int] | None:
        """The first (query, key), in reading order, where measured and declared differ; None: none."""
        where = np.argwhere(self.measured != self.declared)
        return None if len(where) == 0 else (int(where[0][0]), int(where[0][1]))

    @property
    def verdict(self) -> str:
        """ "as declared", or where and which way the layer differs from its config."""
        first = self.first_difference
        if first is None:
            return "as declared"
        i, j = first
        seen = "sees" if self.measured[i, j] else "does not see"
        more = int((self.measured & ~self.declared).sum())
        fewer = int((~self.measured & self.declared).sum())
        return (f"query {i} {seen} key {j}, against the declared {self.rule} ({more} pairs reached that should not be, "
                f"{fewer} not reached that should be)")


@dataclass(frozen=True, eq=False)
class Visibility:
    """Every attention layer's reach on one input of `length` tokens."""

    model: str
    part: str
    length: int
    layers: tuple[LayerReach, ...]

    def table(self) -> list[dict[str, Any]]:
        """One row per layer: its number, the declared rule and the verdict."""
        return [{"layer": r.layer, "declared": r.rule, "verdict": r.verdict} for r in self.layers]

    @property
    def disagreeing(self) -> tuple[int, ...]:
        """The layers whose measured reach is not their declared one."""
        return tuple(r.layer for r in self.layers if not r.as_declared)


def declared_rule(config: Any, layer: int, causal: bool) -> tuple[str, int | None, int | None]:
    """(the rule in words, window, chunk) the config declares for this layer."""
    types = getattr(config, "layer_types", None) or getattr(config, "attention_layers", None)  # GPT-Neo: local, global
    kind = types[layer] if types is not None and layer < len(types) else None
    size = getattr(config, "sliding_window", None) or getattr(config, "window_size", None)
    window = chunk = None
    if kind in ("sliding_attention", "local") or (kind is None and size):
        window = int(size)
    elif kind == "chunked_attention":
        chunk = int(config.attention_chunk_size)
    words = "causal" if causal else "both ways"
    words += f", window {window}" if window is not None else f", chunks of {chunk}" if chunk is not None else ""
    return words, window, chunk


def declared_reach(T: int, causal: bool, window: int | None, chunk: int | None) -> np.ndarray:
    """(T, T) bool: the keys each query may see under this rule (attention.py's masks, inverted). A causal window
    holds the query and the window - 1 keys before it; a window both ways the keys up to `window` away on each side
    (ModernBERT's sliding_window: half its local_attention)."""
    hidden = torch.zeros(T, T, dtype=torch.bool)
    if causal:
        hidden |= causal_mask(T, T)
    if window is not None:
        hidden |= window_mask(T, T, window if causal else window + 1)
    if chunk is not None:
        hidden |= chunk_mask(T, T, chunk)
    return (~hidden).numpy()


@torch.no_grad()
def visibility(model: PretrainedModel, length: int, *, seed: int = 0) -> Visibility:
    """Each attention layer's measured reach on `length` random tokens (seed) against its declared one (module
    docstring). ValueError for a length the model cannot read or a model whose attention cannot be probed."""
    adapter = getattr(model, "adapter", None)
    if adapter is None:  # a TransformerLens model (mha_viz.pretrained.hooked)
        raise ValueError(f"{model.name} is a TransformerLens model: visibility probes a Hugging Face model's modules")
    limit = model.max_tokens
    if not 2 <= length <= limit:
        raise ValueError(f"length {length} is not one {model.name} reads here: from 2 to {limit} tokens")
    if adapter.kind == "encoder-decoder":
        raise ValueError(f"{model.name} is an encoder-decoder: its visibility is not probed yet")
    part = "decoder" if adapter.kind == "decoder" else "encoder"
    vocab = model.tokenizer.vocab_size
    special = set(getattr(model.tokenizer, "all_special_ids", ()))
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.choice([i for i in range(min(vocab, 5000)) if i not in special], length)]
    layers = [layer for layer in range(model.num_layers[part]) if model.layer_kinds(part)[layer] == "softmax"]
    sites = {layer: adapter.site(part, layer) for layer in layers}
    calls: dict[nn.Module, list[tuple[tuple, dict]]] = {}
    with contextlib.ExitStack() as hooks:
        for module in {id(s.attention): s.attention for s in sites.values()}.values():
            calls[module] = []
            hooks.callback(module.register_forward_pre_hook(_keep_call(calls[module]), with_kwargs=True).remove)
        adapter.forward(ids)
    causal = adapter.causal(part)
    reaches = []
    generator = torch.Generator().manual_seed(seed)
    for layer in layers:
        site = sites[layer]
        args, kwargs = calls[site.attention][site.call]
        try:
            measured = _probe(site.attention, args, kwargs, generator)
        except (RuntimeError, TypeError, AttributeError, KeyError, IndexError) as error:
            # a module that needs more than its call's arguments (a cache another layer filled, say)
            raise ValueError(f"layer {layer}'s attention module cannot be called again on its own input "
                             f"({type(error).__name__}: {error}), so its reach is not probed") from error
        rule, window, chunk = declared_rule(model.model.config, layer, causal)
        reaches.append(LayerReach(layer, rule, measured, declared_reach(length, causal, window, chunk)))
    return Visibility(model.name, part, length, tuple(reaches))


def _probe(module: nn.Module, args: tuple, kwargs: dict, generator: torch.Generator) -> np.ndarray:
    """(T, T) bool: [i, j] True where the module's output at i changes when its input at j does.

    The input is the mean of what the module received, the same vector at every position, so that no key scores far
    above another for its content: a trained head's peaks would leave other keys at a weight too small to move the
    output in float32, looking unreached. Key j's input then changes three ways along a random direction u_j: pushed
    far both ways (+- PUSHES[0] * rms * u_j), so that in one of the two it scores high for any query that can see it
    even where positions alone make a head peaked, and nudged (PUSHES[1]), which shows the query's own position (a
    push far enough moves its query too, and may leave all its weight on keys whose values are the same vector).
    Each call holds the unchanged input first, so that the changed ones are compared with an output of the same
    batched kernels."""
    received, rest_args, rest_kwargs, positional = _split(args, kwargs)
    T, d = received.shape[1:]
    hidden = received.mean(1, keepdim=True).expand(-1, T, -1)  # (1, T, d): one vector at every position
    rms = float(received.float().pow(2).mean().sqrt()) or 1.0
    directions = torch.randn(T, d, generator=generator)
    unit = (rms * directions / directions.pow(2).mean(-1, keepdim=True).sqrt()).to(received)  # (T, d)
    changes = (PUSHES[0], -PUSHES[0], PUSHES[1])  # per key
    n = len(changes)
    reach = np.zeros((T, T), dtype=bool)
    batched = True
    step = max(1, PROBES_AT_ONCE // n)  # keys a call
    for start in range(0, T, step):
        keys = range(start, min(T, start + step))
        probes = hidden.expand(n * len(keys) + 1, -1, -1).clone()  # (1 + n c, T, d): the input, then the changes
        for b, j in enumerate(keys):
            for c, push in enumerate(changes):
                probes[1 + n * b + c, j] += push * unit[j]
        try:
            if not batched:
                raise RuntimeError("one at a time")
            out = _output(module, probes, rest_args, rest_kwargs, positional).float()  # (1 + n c, T, n_out)
        except RuntimeError:  # a module whose arguments carry the batch (Bloom's ALiBi): one input per call
            batched = False
            out = torch.cat([_output(module, probes[b:b + 1], rest_args, rest_kwargs, positional).float()
                             for b in range(len(probes))])
        moved = (out[1:] - out[0]).abs().amax(-1) > CHANGED * float(out[0].abs().max())  # (n c, T)
        reach[:, keys.start:keys.stop] = moved.unflatten(0, (len(keys), n)).any(1).T.numpy()  # [query i, key j]
    return reach


CACHES = ("past_key_values", "past_key_value", "cache", "layer_past")  # never written to by a probe


def _split(args: tuple, kwargs: dict) -> tuple[torch.Tensor, tuple, dict, bool]:
    """The module's hidden_states, its other arguments (without any cache) and whether hidden_states came first."""
    rest = {k: (None if k in CACHES else v) for k, v in kwargs.items()}
    if args:
        return args[0], args[1:], rest, True
    return rest.pop("hidden_states"), (), rest, False


def _output(module: nn.Module, hidden: torch.Tensor, args: tuple, kwargs: dict, positional: bool) -> torch.Tensor:
    out = module(hidden, *args, **kwargs) if positional else module(*args, hidden_states=hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _keep_call(store: list[tuple[tuple, dict]]):
    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        store.append((args, dict(kwargs)))
    return hook
