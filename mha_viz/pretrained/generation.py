"""Generation step by step: a causal language model writes one token at a time, and each step keeps the
distribution its token was drawn from and the attention of the query that predicted it.

    step t:  logits_t = LM(prompt + generated[:t]) at the last position     KV cache: one new position per step
    greedy   (Sampling temperature 0): token_t = argmax logits_t,   probs_t = softmax(logits_t)   (filters unused)
    sampling: p = softmax(logits_t / temperature)
              top_k: keep the k largest p, renormalise;  top_p: keep the smallest set of the largest p whose
              sum reaches top_p, renormalise;  token_t ~ p   (torch.Generator seeded with seed)
    attentions_t[l, h, j] = weight on key j of the query that produced logits_t (the last position), in layer l,
              head h; keys j: the prompt, then generated[:t]  ->  [layers, heads, len(prompt) + t]
              (differential attention, DiffLlama: the head's signed weight map_h - lambda map_(h+H), as in its trace)
    sliding windows: a windowed layer l (windows[l] = w, not None) lets a query see only itself and the w - 1 keys
              before it. transformers' cache keeps only those on such a layer (Mistral, Qwen2, Gemma2, ...; GPT-Neo
              keeps every key and masks), so the model returns fewer keys. Each row is put back at its keys'
              positions (the cache keeps them in order, the newest last) and is 0 outside the window, as in a
              forward pass without a cache.
A prompt longer than the model's max_tokens (the views' window) is written after when max_length allows it (up to
the model's positions, on a model that steps from its KV cache): the prompt but its last token goes into the cache
max_tokens positions at a time, without attention weights (a chunk's [H, max_tokens, T] at most), and the last token
then asks for the first row, so every step's row is still the model's own and memory stays linear in the keys.
Generation stops after max_new_tokens tokens, or right after an end-of-sequence token of the model's
generation_config (kept in the output), as transformers' generate() does, or (stop_reason "stopped") before a token
when the caller's should_stop() says so (asked before every token after the first: a time budget keeps the tokens
written so far).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from ..sampling import GREEDY, Sampling
from ..token_labels import id_label, token_labels
from .adapter import to_numpy

if TYPE_CHECKING:
    from .interface import TextModel


@dataclass(frozen=True, eq=False)
class GenerationStep:
    """One generated token."""

    token_id: int
    token: str
    probs: np.ndarray  # (V,) float32: the distribution the token was drawn from (plain softmax when greedy)
    attentions: np.ndarray  # (layers, heads, keys) float32: the predicting query's attention, keys = prompt + earlier
    # (0 outside a windowed layer's window: Generation.windows)


@dataclass(frozen=True, eq=False)
class Generation:
    """A prompt and what the model wrote after it, step by step."""

    prompt_ids: tuple[int, ...]
    prompt_tokens: tuple[str, ...]
    steps: tuple[GenerationStep, ...]
    stop_reason: str  # "max_new_tokens", "eos" or "stopped" (should_stop said so before the next token)
    text: str  # the generated tokens decoded (special tokens skipped)
    sampling: Sampling  # how each token was picked
    windows: tuple[int | None, ...] = ()  # per layer: its sliding window (keys a query sees, itself included) or None

    @property
    def windowed_layers(self) -> tuple[int, ...]:
        """The layers whose queries see only a sliding window of keys."""
        return tuple(layer for layer, window in enumerate(self.windows) if window is not None)

    def outside_window(self, step: int) -> dict[int, int]:
        """layer -> how many of steps[step]'s keys (the earliest) lie outside that layer's window (weight 0)."""
        keys = len(self.prompt_ids) + step
        return {layer: keys - w for layer, w in enumerate(self.windows) if w is not None and keys > w}

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The generated ids, without the prompt."""
        return tuple(s.token_id for s in self.steps)

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(s.token for s in self.steps)

    def key_tokens(self, step: int) -> tuple[str, ...]:
        """The labels of steps[step].attentions' last axis: the prompt, then the tokens generated before it."""
        return self.prompt_tokens + self.tokens[:step]

    def input_ids(self, step: int) -> tuple[int, ...]:
        """What the model read when it chose steps[step].token: the prompt, then the tokens generated before it."""
        return self.prompt_ids + self.token_ids[:step]


def sampling_distribution(logits: Tensor, sampling: Sampling) -> Tensor:
    """The next-token distribution (V,) for logits (V,): see the module docstring. Greedy: softmax(logits)."""
    if sampling.greedy:
        return logits.softmax(-1)  # (V,)
    scaled = logits / sampling.temperature  # (V,)
    if not torch.isfinite(scaled).all():
        raise ValueError(f"temperature {sampling.temperature} is too small: logits / temperature overflows")
    probs = scaled.softmax(-1)  # (V,)
    top_k, top_p = sampling.top_k, sampling.top_p
    if top_k is not None and top_k < len(probs):
        keep = torch.zeros_like(probs, dtype=torch.bool)  # (V,)
        keep[probs.topk(top_k).indices] = True  # exactly k entries, ties broken by topk
        probs = probs * keep / (probs * keep).sum()  # (V,)
    if top_p is not None and top_p < 1:
        ordered, order = probs.sort(descending=True, stable=True)  # (V,), (V,)
        before = ordered.cumsum(-1) - ordered  # (V,) mass of the larger entries: keep while it is below top_p
        keep = torch.zeros_like(probs, dtype=torch.bool)  # (V,)
        keep[order[before < top_p]] = True
        probs = probs * keep / (probs * keep).sum()  # (V,)
    return probs


ATTENTION_KINDS = ("full_attention", "sliding_attention")  # layer_types of layers that report attention weights


def sliding_windows(config: object, num_layers: int) -> tuple[int | None, ...]:
    """Each attention layer's sliding window (None: full causal attention), as transformers' configs state it:
    layer_types ("sliding_attention" layers take sliding_window; a hybrid's other layers, e.g. convolutions, are
    either traced as mixers, windowless, or report no weights and are not layers here), else sliding_window on every
    layer where the config uses it (Mistral, Phi-3, Starcoder2; Qwen's use_sliding_window), else GPT-Neo's "local"
    layers of window_size."""
    config = getattr(config, "get_text_config", lambda: config)()
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        kinds = [kind for kind in layer_types if kind in ATTENTION_KINDS]  # the attention layers only
        if len(layer_types) != num_layers and len(kinds) == num_layers:  # a hybrid whose other layers are not traced
            layer_types = kinds
        if len(layer_types) == num_layers:  # every layer traced, a hybrid's mixers too (LFM3's convolutions)
            return tuple(window if kind == "sliding_attention" else None for kind in layer_types)
        return (None,) * num_layers  # unknown: placed_rows refuses a row its window would have to explain
    if window is not None and getattr(config, "use_sliding_window", True):
        return (int(window),) * num_layers
    local = getattr(config, "attention_layers", None)
    if local is not None and getattr(config, "window_size", None) is not None:
        return tuple(config.window_size if kind == "local" else None for kind in local[:num_layers])
    return (None,) * num_layers


def placed_rows(attentions: Sequence[Tensor], keys: int, windows: Sequence[int | None]) -> Tensor:
    """The last query's row of each layer's weights (1, H_l, T, S_l), placed at its keys' positions: (L, H, keys),
    H the most heads of any layer (NaN in the heads a layer does not have).

    A windowed layer's cache holds only the newest S_l < keys keys, in order: its row fills the last S_l
    positions and the earlier ones, outside the window, are 0."""
    rows = []
    for layer, a in enumerate(attentions):
        row = a[0, :, -1]  # (H, S_l)
        held = row.shape[-1]
        if held != keys:
            window = windows[layer] if layer < len(windows) else None
            if window is None or held > keys or held < min(window, keys):
                raise ValueError(
                    f"layer {layer} returned {held} keys for {keys} positions"
                    + ("" if window is None else f" with a sliding window of {window}")
                    + ": the cache does not hold what mha-viz expects, so the row cannot be labelled"
                )
            row = torch.cat([row.new_zeros(row.shape[0], keys - held), row], dim=-1)  # (H, keys)
        rows.append(row)
    H = max(row.shape[0] for row in rows)  # a hybrid's layers can differ in heads: NaN in the heads a layer lacks
    return torch.stack([torch.cat([row, row.new_full((H - row.shape[0], keys), float("nan"))]) for row in rows])


def eos_token_ids(lm: torch.nn.Module) -> set[int]:
    """The end-of-sequence ids transformers' generate() stops at: the generation_config's (else the config's)."""
    config = getattr(lm, "generation_config", None) or lm.config
    eos = getattr(config, "eos_token_id", None)
    return set() if eos is None else {eos} if isinstance(eos, int) else set(eos)


def stop_asked(should_stop: Callable[[], bool] | None, written: int) -> bool:
    """Whether to write no more: should_stop() says so, asked once at least one token is written."""
    return should_stop is not None and written > 0 and should_stop()


def generation_limit(model: TextModel, max_length: int | None = None) -> int:
    """The most tokens a prompt and its generation may have: max_length, or model.max_tokens. ValueError for a
    max_length past the model's positions, or past max_tokens on a model that does not step from its KV cache (a
    hybrid's mixers read the whole sequence at every step: its mixing matrices stay within the views' window)."""
    if max_length is None or max_length == model.max_tokens:
        return model.max_tokens
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise ValueError(f"max_length must be an integer >= 1, got {max_length!r}")
    positions = model.adapter.max_positions()
    if positions is not None and max_length > positions:
        raise ValueError(f"max_length {max_length} is past {model.name}'s {positions} positions")
    if max_length > model.max_tokens and not model.adapter.steps_from_cache:
        raise ValueError(f"{model.name} reads the whole sequence again at every step (its linear or state-space "
                         f"layers have no KV cache): it generates within {model.max_tokens} tokens, not {max_length}")
    return int(max_length)


def check_request(model: TextModel, max_new_tokens: object, sampling: object) -> None:
    """ValueError for a model that cannot generate or a max_new_tokens that is not an integer >= 1, TypeError for a
    sampling that is not a Sampling."""
    reason = model.next_token_unavailable
    if reason is not None:
        raise ValueError(f"generation is unavailable: {reason}")
    if not isinstance(max_new_tokens, (int, np.integer)) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a mha_viz.sampling.Sampling, got {type(sampling).__name__}")


@torch.no_grad()
def generate(
    model: TextModel,
    prompt: str,
    max_new_tokens: int,
    sampling: Sampling = GREEDY,
    should_stop: Callable[[], bool] | None = None,
    max_length: int | None = None,
) -> Generation:
    """Let model write up to max_new_tokens tokens after prompt, picked as sampling says; see the module docstring.
    should_stop: asked before every token after the first; True ends the generation there (stop_reason "stopped").
    max_length: the most tokens the prompt and the new ones may have together (default: model.max_tokens; more, up
    to the model's positions, on a model that steps from its KV cache: generation_limit).

    ValueError for a model without a causal LM head, bad arguments, or when prompt + max_new_tokens
    would not fit max_length; the prompt is never truncated. ValueError too when a layer's cache returns fewer keys
    than its sliding window explains (its row's keys could not be labelled).
    """
    check_request(model, max_new_tokens, sampling)
    limit = generation_limit(model, max_length)
    tokenizer, lm = model.tokenizer, model.model
    prompt_ids = tuple(tokenizer(prompt, verbose=False)["input_ids"])
    if not prompt_ids:
        raise ValueError(f"{prompt!r} has no tokens")
    room = limit - len(prompt_ids)
    if max_new_tokens > room:
        raise ValueError(
            f"the prompt has {len(prompt_ids)} tokens and {model.name} reads at most {limit}: "
            + (f"at most {room} new tokens fit, not {max_new_tokens}" if room > 0 else "no room for new tokens")
        )
    device = model.adapter.device()
    generator = torch.Generator(device=device).manual_seed(sampling.seed)
    cache_argument = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"
    eos = eos_token_ids(lm)
    cached = model.adapter.steps_from_cache  # else (mixer layers) the whole sequence again, no cache
    cache, feed, steps, stop_reason = None, list(prompt_ids), [], "max_new_tokens"
    if cached and len(prompt_ids) > model.max_tokens:  # into the cache a chunk at a time, without weights
        for start in range(0, len(prompt_ids) - 1, model.max_tokens):
            chunk = prompt_ids[start:min(start + model.max_tokens, len(prompt_ids) - 1)]
            held = {} if cache is None else {cache_argument: cache}
            cache = lm(input_ids=torch.tensor([chunk], device=device), **held, use_cache=True)[cache_argument]
        feed = [prompt_ids[-1]]
    windows = sliding_windows(lm.config, model.num_layers["decoder"])
    for t in range(int(max_new_tokens)):
        if stop_asked(should_stop, t):
            stop_reason = "stopped"
            break
        outputs = lm(
            input_ids=torch.tensor([feed], device=device),  # the cache holds the rest
            **({cache_argument: cache} if cached else {}),
            use_cache=cached,
            output_attentions=True,
        )
        cache = outputs[cache_argument] if cached else None
        logits = outputs.logits[0, -1].float()  # (V,)
        probs = sampling_distribution(logits, sampling)  # (V,)
        if sampling.greedy:
            token_id = int(logits.argmax())
        else:
            token_id = int(torch.multinomial(probs, 1, generator=generator))
        own = model.adapter.model_attentions(outputs, "decoder")  # per layer (1, maps, 1, keys held)
        attentions = placed_rows(model.adapter.head_attentions(own, "decoder"), len(prompt_ids) + t, windows)
        token = id_label(tokenizer, token_id)
        steps.append(GenerationStep(token_id, token, to_numpy(probs), to_numpy(attentions)))
        if token_id in eos:
            stop_reason = "eos"
            break
        feed = [token_id] if cached else [*feed, token_id]
    generated = [s.token_id for s in steps]
    return Generation(
        prompt_ids=prompt_ids,
        prompt_tokens=token_labels(tokenizer, prompt_ids),
        steps=tuple(steps),
        stop_reason=stop_reason,
        text=tokenizer.decode(generated, skip_special_tokens=True),
        sampling=sampling,
        windows=windows,
    )
