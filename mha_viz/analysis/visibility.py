"""What a layer lets a token see: each attention layer's reach measured by probing the model, against what its config
declares.

Measured: one forward pass on `length` random tokens keeps what each layer's attention module receives (its mask,
its positions). The module is then called again, on the mean of its input at every position, and its attention
kernel (transformers' AttentionInterface: sdpa or eager, the family's own code) is run with key j's key and value
rows replaced by those of an input pushed far along a random direction, both ways (_kernel_reach says why); query i
reaches key j when its output moves, head by head. A module that does not call the interface (Bloom, GPT-Neo) is
probed whole instead (_module_reach). Nothing of the config is read: a mask the code builds wrong, a window off by
one, a layer that skips its mask all show. Declared, from the config alone (transformers' conventions):
    causal                       a decoder: key j <= query i; an encoder sees both ways
    layer_types[L] / window      "sliding_attention": keys less than `sliding_window` back (i - j < sliding_window),
                                 or in an encoder up to sliding_window away each way (|i - j| <= sliding_window); a
                                 config with a sliding_window and no layer_types (Mistral, Phi-3) slides on every
                                 layer; GPT-Neo's "local" layers slide by window_size
    chunked_attention            Llama 4: keys in the query's chunk of attention_chunk_size (i // C == j // C)
Positions, too: swapping two adjacent keys that a query reaches moves its output only where the layer itself reads
positions (rotary, ALiBi), not in a NoPE layer or one whose positions are in its input (GPT-2's); declared from the
config's rope_parameters, no_rope_layers (SmolLM3, Llama 4), ALiBi (Bloom), and Cohere 2's rotary-free global layers.
The report gives, per layer, "as declared" or the first (query, key) where the two differ, and which way, whether the
key order moves the output against the declared positions, and names the heads whose reach is not the layer's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..attention import causal_mask, chunk_mask, window_mask

if TYPE_CHECKING:
    from ..pretrained.model import PretrainedModel

KERNELS = ("sdpa", "eager")  # the attention kernels a probe runs (transformers' AttentionInterface names)
PROBE = "mha_viz_probe"  # the probe's registered attention function is PROBE + "_" + the kernel it runs
PUSH = 64.0  # how far a key's input is pushed, in units of the input's root mean square
KEY_GAIN = 256.0  # a kernel probe's key moves this many times as far as the pushed input moves it (_kernel_probes)
CHANGED = 1e-6  # an output changed when it moved by more than this share of the output's largest entry
SWAPS = 3  # adjacent key pairs swapped to see whether a layer reads positions (_reads_positions)
ORDER_CHANGED = 1e-4  # a swap changed an output when it moved by more than this share of the output's largest entry
KERNEL_BYTES = 64 * 2**20  # one kernel call's probes: about this many bytes of [probe, head, query, key] scores
PROBES_AT_ONCE = 33  # a whole module's probes in one call (11 keys, three changes each)
NUDGE = 1.0  # a whole module's third change of a key (PUSH, -PUSH, NUDGE), in input rms


@dataclass(frozen=True, eq=False)
class LayerReach:
    """One layer's reach: measured [query, key] (True: the query's output moves with the key's input) and declared;
    heads: the same per query head [head, query, key], where the kernel was probed (None: the module, whole)."""

    layer: int
    rule: str  # what the config declares, in words: "causal", "causal, window 4", "causal, chunks of 4", "both ways"
    measured: np.ndarray  # (T, T) bool: reached by any head
    declared: np.ndarray  # (T, T) bool
    heads: np.ndarray | None = None  # (H, T, T) bool
    positions: str = ""  # what the config declares of positions inside the layer: "rotary", "ALiBi", "none (NoPE)"
    reads_positions: bool | None = None  # measured: swapping two keys moves a query that sees both (None: no such query)

    @property
    def positions_as_declared(self) -> bool:
        return self.reads_positions is None or self.reads_positions == (not self.positions.startswith("none"))

    @property
    def as_declared(self) -> bool:
        return (bool((self.measured == self.declared).all()) and not self.differing_heads
                and self.positions_as_declared)

    @property
    def differing_heads(self) -> tuple[int, ...]:
        """The heads whose reach is not the layer's (the union of its heads')."""
        if self.heads is None:
            return ()
        return tuple(int(h) for h in np.flatnonzero((self.heads != self.measured).any((1, 2))))

    @property
    def first_difference(self) -> tuple[int, int] | None:
        """The first (query, key), in reading order, where measured and declared differ; None: none."""
        where = np.argwhere(self.measured != self.declared)
        return None if len(where) == 0 else (int(where[0][0]), int(where[0][1]))

    @property
    def verdict(self) -> str:
        """ "as declared", or where and which way the layer differs from its config, and which heads see less."""
        first, heads = self.first_difference, self.differing_heads
        words = []
        if first is not None:
            i, j = first
            seen = "sees" if self.measured[i, j] else "does not see"
            more = int((self.measured & ~self.declared).sum())
            fewer = int((~self.measured & self.declared).sum())
            words.append(f"query {i} {seen} key {j}, against the declared {self.rule} ({more} pairs reached that should "
                         f"not be, {fewer} not reached that should be)")
        if not self.positions_as_declared:
            words.append(f"the order of its keys {'moves' if self.reads_positions else 'does not move'} its output, "
                         f"against the declared positions: {self.positions}")
        if heads:
            assert self.heads is not None
            missing = ", ".join(f"{h} ({int((self.measured & ~self.heads[h]).sum())})" for h in heads)
            words.append(f"heads not reaching every pair the layer reaches (pairs missed): {missing}")
        return "; ".join(words) or "as declared"


@dataclass(frozen=True, eq=False)
class Visibility:
    """Every attention layer's reach on one input of `length` tokens, probed through `kernel`."""

    model: str
    part: str
    length: int
    kernel: str  # the attention implementation probed: "sdpa", "eager", or the model's own where it cannot be switched
    layers: tuple[LayerReach, ...]

    def table(self) -> list[dict[str, Any]]:
        """One row per layer: its number, the declared rule, the verdict and what was probed."""
        return [{"layer": r.layer, "declared": r.rule, "positions": r.positions, "verdict": r.verdict,
                 "probed": f"{self.kernel} kernel, per head" if r.heads is not None else "the whole module"}
                for r in self.layers]

    @property
    def disagreeing(self) -> tuple[int, ...]:
        """The layers whose measured reach is not their declared one, or whose heads differ."""
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


def declared_positions(config: Any, layer: int) -> str:
    """What the config says the layer itself does with positions: "rotary", "ALiBi", or "none (...)" where it reads
    none (a NoPE layer of SmolLM3 or Llama 4, Cohere 2's full-attention layers, or a family that adds learned
    positions to the input)."""
    nope = getattr(config, "no_rope_layers", None)  # 1: rotary, 0: none
    if nope is not None and layer < len(nope):
        return "rotary" if nope[layer] else "none (NoPE layer)"
    types = getattr(config, "layer_types", None)
    if config.model_type == "cohere2" and types is not None and types[layer] == "full_attention":
        return "none (NoPE: Cohere 2's full-attention layers)"  # its code rotates on sliding layers only
    if getattr(config, "alibi", False) or config.model_type in ("bloom", "mpt"):
        return "ALiBi"
    if getattr(config, "rope_parameters", None) is not None:
        return "rotary"
    return "none (positions are added to the input)"


def declared_reach(T: int, causal: bool, window: int | None, chunk: int | None, start: int = 0) -> np.ndarray:
    """(T, T) bool: the keys each query may see under this rule (attention.py's masks, inverted). A causal window
    holds the query and the window - 1 keys before it; a window both ways the keys up to `window` away on each side
    (ModernBERT's sliding_window: half its local_attention); chunks count from position `start` (the first token
    after left padding, as transformers counts them)."""
    hidden = torch.zeros(T, T, dtype=torch.bool)
    if causal:
        hidden |= causal_mask(T, T)
    if window is not None:
        hidden |= window_mask(T, T, window if causal else window + 1)
    if chunk is not None:
        shifted = chunk_mask(T + chunk - start % chunk, T + chunk - start % chunk, chunk)  # chunk k starts at start + kC
        hidden |= shifted[chunk - start % chunk:, chunk - start % chunk:]
    return (~hidden).numpy()


@torch.no_grad()
def visibility(model: PretrainedModel, length: int, *, seed: int = 0, kernel: str | None = None,
               padding: int = 0) -> Visibility:
    """Each attention layer's measured reach on `length` random tokens (seed) against its declared one (module
    docstring). kernel: "sdpa" or "eager" (None: sdpa where the family has it, the default transformers loads).
    padding: the first `padding` positions are padding (attention_mask 0, as batched generation pads on the left):
    declared hidden from every query; a padding query's own row is not compared (no key is declared for it).
    ValueError for a length the model cannot read, an unknown kernel, padding that leaves fewer than 2 tokens, or a
    model whose attention cannot be probed."""
    adapter = getattr(model, "adapter", None)
    if adapter is None:  # a TransformerLens model (mha_viz.pretrained.hooked)
        raise ValueError(f"{model.name} is a TransformerLens model: visibility probes a Hugging Face model's modules")
    limit = model.max_tokens
    if not 2 <= length <= limit:
        raise ValueError(f"length {length} is not one {model.name} reads here: from 2 to {limit} tokens")
    if adapter.kind == "encoder-decoder":
        raise ValueError(f"{model.name} is an encoder-decoder: its visibility is not probed yet")
    hf = model.model
    kernel = kernel or probe_kernels(model)[0]
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r} is not one the probe runs: {', '.join(KERNELS)}")
    if kernel not in probe_kernels(model):
        raise ValueError(f"{model.name} has no sdpa kernel in transformers: its attention runs eager")
    if not 0 <= padding <= length - 2:
        raise ValueError(f"padding {padding} leaves fewer than 2 of {length} positions as tokens")
    part = "decoder" if adapter.kind == "decoder" else "encoder"
    vocab = model.tokenizer.vocab_size
    special = set(getattr(model.tokenizer, "all_special_ids", ()))
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.choice([i for i in range(min(vocab, 5000)) if i not in special], length)]
    layers = [layer for layer in range(model.num_layers[part]) if model.layer_kinds(part)[layer] == "softmax"]
    sites = {layer: adapter.site(part, layer) for layer in layers}
    calls: dict[nn.Module, list[tuple[tuple, dict]]] = {}
    reaches = []
    generator = torch.Generator().manual_seed(seed)
    with _probing(hf, kernel, [s.attention for s in sites.values()]) as probed:
        with contextlib.ExitStack() as hooks:
            for module in {id(s.attention): s.attention for s in sites.values()}.values():
                calls[module] = []
                hooks.callback(module.register_forward_pre_hook(_keep_call(calls[module]), with_kwargs=True).remove)
            adapter.forward(ids, attention_mask=[0] * padding + [1] * (length - padding) if padding else None)
        causal = adapter.causal(part)
        for layer in layers:
            site = sites[layer]
            args, kwargs = calls[site.attention][site.call]
            try:
                heads = _kernel_reach(site.attention, args, kwargs, generator) if probed else None
                measured = heads.any(0) if heads is not None else _module_reach(site.attention, args, kwargs, generator)
                tokens = measured.copy()
                tokens[:padding] = False  # a padding query's row is not read
                reads = _reads_positions(site.attention, args, kwargs, tokens)
            except (RuntimeError, TypeError, AttributeError, KeyError, IndexError) as error:
                # a module that needs more than its call's arguments (a cache another layer filled, say)
                raise ValueError(f"layer {layer}'s attention module cannot be called again on its own input "
                                 f"({type(error).__name__}: {error}), so its reach is not probed") from error
            rule, window, chunk = declared_rule(hf.config, layer, causal)
            declared = declared_reach(length, causal, window, chunk, start=padding)
            if padding:
                rule += f", the first {padding} positions padding"
                declared[:, :padding] = False
                declared[:padding] = measured[:padding]  # a padding query: no key declared, its row not compared
            reaches.append(LayerReach(layer, rule, measured, declared, heads, declared_positions(hf.config, layer),
                                      reads))
        used = kernel if probed else str(hf.config._attn_implementation)
    return Visibility(model.name, part, length, used, tuple(reaches))


def probe_kernels(model: Any) -> tuple[str, ...]:
    """The kernels visibility probes on this model, its default first: sdpa where the family has it, and eager; ()
    for a model without a Hugging Face module (TransformerLens)."""
    if getattr(model, "adapter", None) is None:
        return ()
    return KERNELS if getattr(type(model.model), "_supports_sdpa", False) else ("eager",)


_ACTIVE = threading.local()  # the probe running in this thread: (module, its input at each change, reach found)


@contextlib.contextmanager
def _probing(hf: nn.Module, kernel: str, modules: list[nn.Module]) -> Iterator[bool]:
    """While open, hf's attention runs `kernel` through the probe's registered function (True), which does what
    `kernel` does except for the module this thread probes; False (and nothing changed) where the model cannot be
    switched: a family whose modules do not call transformers' AttentionInterface, or without `kernel`'s code."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    if kernel == "eager" and not all(_eager(m) for m in modules):
        yield False
        return
    name = f"{PROBE}_{kernel}"
    AttentionInterface.register(name, _probe_function(kernel))  # the same function each time
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[kernel])  # the kernel's own masks
    before = hf.config._attn_implementation
    try:
        hf.set_attn_implementation(name)
    except (ValueError, ImportError):
        yield False
        return
    try:
        yield hf.config._attn_implementation == name
    finally:
        hf.set_attn_implementation(before)


def _eager(module: nn.Module) -> Callable | None:
    """The family's own eager attention function (what its modules run when no other kernel is set), or None."""
    return getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)


def _probe_function(kernel: str) -> Callable:
    def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        from transformers import AttentionInterface

        real = _eager(module) if kernel == "eager" else AttentionInterface()[kernel]
        if kernel != "eager":
            kwargs.pop("output_attentions", None)  # only eager returns weights (the hooked forward asks every kernel)
        probe = getattr(_ACTIVE, "probe", None)
        if probe is not None and probe["module"] is module:
            probe["heads"] = _kernel_probes(real, module, query, key, value, attention_mask, kwargs)
        return real(module, query, key, value, attention_mask, **kwargs)
    return attention


def _kernel_reach(module: nn.Module, args: tuple, kwargs: dict, generator: torch.Generator) -> np.ndarray | None:
    """(H, T, T) bool [head, query i, key j]: head h's output at i moves with key j (None: the module did not call
    the probe's kernel). The module runs once on three inputs: the mean of what it received, at every position, and
    that pushed far along a random direction per position, both ways; its projections are position by position, so
    row j of their keys and values is what key j's input pushed alone gives (_kernel_probes)."""
    received, rest_args, rest_kwargs, positional = _split(args, kwargs)
    hidden, unit = _probe_input(received, generator)
    two = torch.cat([hidden, hidden + PUSH * unit])  # (2, T, d)
    _ACTIVE.probe = {"module": module, "heads": None}
    try:
        _output(module, two, rest_args, rest_kwargs, positional)
        return _ACTIVE.probe["heads"]
    finally:
        _ACTIVE.probe = None


def _kernel_probes(real: Callable, module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   mask: Any, kwargs: dict) -> np.ndarray:
    """query (3, H, T, d), key and value (3, H_kv, T, d): the unchanged input's, then pushed both ways (_kernel_reach).

    Each probe keeps the unchanged queries and every key and value but key j's, which is replaced by a pushed one:
    key j then scores far above or below its neighbours for every query, so one of the two pushes lifts it over any
    weighting the positions give (ALiBi's far keys, say, whose weight underflows to 0 unpushed), and its value moves.
    The queries stay as they were, so that a query's own key is probed like any other. A call holds the unchanged
    input first, so that the changed ones are compared with an output of the same batched kernel."""
    H, T = query.shape[1], key.shape[2]
    moved_key, moved_value = key[1] - key[0], value[1] - value[0]  # (H_kv, T, d): what the pushed input moves
    per_call = max(1, KERNEL_BYTES // (8 * H * T * T))  # keys a call: two probes each, scores and weights in float32
    heads = np.zeros((H, T, T), dtype=bool)
    for start in range(0, T, per_call):
        keys = torch.arange(start, min(T, start + per_call))
        n = 2 * len(keys) + 1
        k, v = key[:1].repeat(n, 1, 1, 1), value[:1].repeat(n, 1, 1, 1)  # (n, H_kv, T, d)
        for way, sign in ((0, 1.0), (1, -1.0)):  # key j moved one way, then the other
            rows = 1 + 2 * torch.arange(len(keys)) + way
            k[rows, :, keys] = (key[0] + sign * KEY_GAIN * moved_key)[:, keys].transpose(0, 1)  # (keys, H_kv, d)
            v[rows, :, keys] = (value[0] + sign * moved_value)[:, keys].transpose(0, 1)
        out = real(module, query[:1].expand(n, -1, -1, -1), k, v, mask, **kwargs)[0].float()  # (n, T, H, d)
        moved = (out[1:] - out[0]).abs().amax(-1) > CHANGED * _largest(out[0])  # (2 keys, T, H)
        heads[:, :, start:start + len(keys)] = moved.unflatten(0, (len(keys), 2)).any(1).permute(2, 1, 0).numpy()
    return heads


def _reads_positions(module: nn.Module, args: tuple, kwargs: dict, reach: np.ndarray) -> bool | None:
    """Whether the layer reads positions: on the input it received (a different vector at each position), SWAPS
    pairs of adjacent keys (j, j + 1) swap places, and a query that reaches both, and is neither, sees the same set of
    keys in another order. A layer without positions (a NoPE layer, GPT-2's, whose positions are in its input) gives
    it the same output, to float rounding; rotary or ALiBi move it. None: no query reaches both keys of any pair."""
    received, rest_args, rest_kwargs, positional = _split(args, kwargs)
    T = received.shape[1]
    both = reach[:, :-1] & reach[:, 1:]  # (T, T - 1): query i reaches keys j and j + 1
    both[np.arange(T - 1), np.arange(T - 1)] = both[np.arange(1, T), np.arange(T - 1)] = False  # i is neither
    useful = [(j, j + 1) for j in np.flatnonzero(both.any(0))]
    chosen = [useful[int(n)] for n in np.linspace(0, len(useful) - 1, min(SWAPS, len(useful)))] if useful else []
    if not chosen:
        return None
    probes = received.expand(len(chosen) + 1, -1, -1).clone()  # (1 + pairs, T, d): the input, then each swap
    for b, (j, k) in enumerate(chosen, 1):
        probes[b, [j, k]] = received[0, [k, j]]
    out, _ = _outputs(module, probes, rest_args, rest_kwargs, positional)
    scale = _largest(out[0]) or 1.0
    for b, (j, k) in enumerate(chosen, 1):
        queries = [i for i in range(T) if i not in (j, k) and reach[i, j] and reach[i, k]]
        if float((out[b, queries] - out[0, queries]).abs().max()) > ORDER_CHANGED * scale:
            return True
    return False


def _largest(out: torch.Tensor) -> float:
    """The largest |entry| of an output, rows a kernel left NaN left out (a padding query with no key to see)."""
    return float(torch.nan_to_num(out, nan=0.0).abs().max())


def _probe_input(received: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, T, d) the mean of what the module received, the same vector at every position, so that no key scores far
    above another for its content (a trained head's peaks would leave other keys at a weight too small to move the
    output in float32); (T, d) a random direction per position, scaled to the input's root mean square."""
    T, d = received.shape[1:]
    hidden = received.mean(1, keepdim=True).expand(-1, T, -1)
    rms = float(received.float().pow(2).mean().sqrt()) or 1.0
    directions = torch.randn(T, d, generator=generator)
    return hidden, (rms * directions / directions.pow(2).mean(-1, keepdim=True).sqrt()).to(received)


def _module_reach(module: nn.Module, args: tuple, kwargs: dict, generator: torch.Generator) -> np.ndarray:
    """(T, T) bool: [i, j] True where the whole module's output at i changes when its input at j does (for a module
    whose kernel cannot be reached). Key j's input changes three ways: pushed far both ways, as in _kernel_probes,
    and nudged, which shows the query's own position (a push far enough moves its query too, and may leave all its
    weight on keys whose values are the same vector). Each call holds the unchanged input first."""
    received, rest_args, rest_kwargs, positional = _split(args, kwargs)
    hidden, unit = _probe_input(received, generator)
    T = received.shape[1]
    changes = (PUSH, -PUSH, NUDGE)  # per key
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
        out, batched = _outputs(module, probes, rest_args, rest_kwargs, positional, batched)  # (1 + n c, T, n_out)
        moved = (out[1:] - out[0]).abs().amax(-1) > CHANGED * _largest(out[0])  # (n c, T)
        reach[:, keys.start:keys.stop] = moved.unflatten(0, (len(keys), n)).any(1).T.numpy()  # [query i, key j]
    return reach


CACHES = ("past_key_values", "past_key_value", "cache", "layer_past")  # never written to by a probe


def _split(args: tuple, kwargs: dict) -> tuple[torch.Tensor, tuple, dict, bool]:
    """The module's hidden_states, its other arguments (without any cache) and whether hidden_states came first."""
    rest = {k: (None if k in CACHES else v) for k, v in kwargs.items()}
    if args:
        return args[0], args[1:], rest, True
    return rest.pop("hidden_states"), (), rest, False


def _outputs(module: nn.Module, probes: torch.Tensor, args: tuple, kwargs: dict, positional: bool,
             batched: bool = True) -> tuple[torch.Tensor, bool]:
    """The module's float32 outputs on a batch of probes (B, T, d), and whether one call took them all: a module
    whose arguments carry the batch (Bloom's ALiBi) gets one input per call (so does any, once batched is False)."""
    if batched:
        try:
            return _output(module, probes, args, kwargs, positional).float(), True
        except RuntimeError:
            pass
    return torch.cat([_output(module, probes[b:b + 1], args, kwargs, positional).float()
                      for b in range(len(probes))]), False


def _output(module: nn.Module, hidden: torch.Tensor, args: tuple, kwargs: dict, positional: bool) -> torch.Tensor:
    out = module(hidden, *args, **kwargs) if positional else module(*args, hidden_states=hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _keep_call(store: list[tuple[tuple, dict]]):
    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        store.append((args, dict(kwargs)))
    return hook
