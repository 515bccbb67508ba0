"""PretrainedModel: a Hugging Face model and its tokenizer, traced one attention layer at a time.

Parts and texts:
    encoder   self-attention over `text`                      (encoders, encoder-decoders)
    decoder   causal self-attention: over `text` in a decoder-only model,
              over `decoder_text` in an encoder-decoder
    cross     queries from `decoder_text`, keys and values from `text` (encoder-decoders)
In an encoder-decoder `text` is always the encoder input. The decoder reads `decoder_text`
(default: `text` again) shifted right, as in training: [decoder start] + its tokens minus the last.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..checks import verify
from ..sampling import GREEDY, Sampling
from ..token_labels import token_labels
from ..trace import AttentionTrace
from ..weights import HeadWeights
from . import attribution, generation, long, long_pass, weights
from .adapter import HeadMasks, HeadValues, TraceRequest, to_numpy
from .architectures import adapter_for
from .encoded import CHARS_PER_TOKEN, Coverage, Encoded
from .modality import refuse_non_text

_NO_LIMIT = 1_000_000  # tokenizers without a length limit report a huge model_max_length


def heads_padded(layers: Sequence[np.ndarray]) -> np.ndarray:
    """Each layer's [H_l, ...] stacked as [L, max H_l, ...]: a layer with fewer heads (a hybrid's) gets NaN in the
    others."""
    H = max(a.shape[0] for a in layers)
    return np.stack([a if a.shape[0] == H else np.concatenate([a, np.full((H - a.shape[0], *a.shape[1:]), np.nan,
                                                                          dtype=a.dtype)]) for a in layers])


class PretrainedModel:
    """A pretrained transformer opened up for attention tracing.

    The model is switched, in place, to eval mode, eager attention (the only implementation that
    returns attention weights) and dtype: float32 by default; None keeps the model's own dtype (half
    precision; a model dispatched by accelerate's device_map is never cast). Traces are float32 numpy
    whatever the model's dtype. max_tokens: longer inputs are truncated; at most (and by default) the
    model's own limit. ModelLoadError for a model that does not read text (vision, audio, multimodal).
    Every trace is checked against the model's own numbers (meta["check"], mha_viz.checks): a failed check warns
    (TraceCheckWarning), or with strict=True (here, or on one trace call) raises TraceCheckError.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        name: str | None = None,
        max_tokens: int | None = None,
        dtype: torch.dtype | None = torch.float32,
        strict: bool = False,
    ):
        refuse_non_text(model)
        self.strict = strict
        if model.config._attn_implementation != "eager":
            model.set_attn_implementation("eager")
        dispatched = bool(getattr(model, "hf_device_map", None))
        self.model = model.eval() if dtype is None or dispatched else model.eval().to(dtype)
        self.tokenizer = tokenizer
        self.name = name or model.config.name_or_path or model.config.model_type
        self.architecture: str = model.config.model_type
        self.adapter = adapter_for(model)
        self.kind: str = self.adapter.kind
        self.parts: tuple[str, ...] = self.adapter.parts
        # Why queries, keys, values, ... are missing from traces; None when the architecture is opened up.
        self.unavailable: str | None = self.adapter.unavailable
        limits = (max_tokens, self.adapter.max_positions(), tokenizer.model_max_length)
        self.max_tokens: int = min((n for n in limits if n and n < _NO_LIMIT), default=512)
        self._lock = threading.Lock()  # hooks are per module: one traced forward pass at a time
        outputs = self._forward(*self._inputs("attention", None))  # a probe: how many layers and heads
        attentions = {part: self.adapter.model_attentions(outputs, part) for part in self.parts}
        self.num_layers: dict[str, int] = {part: len(a) for part, a in attentions.items()}
        # Heads of each layer: equal in most models; a hybrid's mixer layers can have more or fewer than its softmax ones
        self.layer_heads: dict[str, tuple[int, ...]] = {
            part: tuple(self.adapter.trace_heads(x.shape[1]) for x in a) for part, a in attentions.items()}
        self.num_heads: dict[str, int] = {part: max(heads) for part, heads in self.layer_heads.items()}  # the most

    def __repr__(self) -> str:
        return f"PretrainedModel({self.name!r}, {self.architecture}, {self.kind}, layers={self.num_layers})"

    def layer_kinds(self, part: str | None = None) -> tuple[str, ...]:
        """What mixes the tokens in each layer of part (mha_viz.mixers.KINDS): "softmax" everywhere but in hybrid
        models, whose linear-attention and state-space layers are traced as mixing matrices."""
        part = self._part(part)
        return tuple(self.adapter.layer_kind(part, layer) for layer in range(self.num_layers[part]))

    @property
    def vocab_size(self) -> int:
        """How many token ids the input embeddings have."""
        return self.model.get_input_embeddings().num_embeddings

    @property
    def lock(self) -> threading.Lock:
        """Held around every hooked forward pass: hold it around your own (hooks are per module)."""
        return self._lock

    def tokens(self, text: str, *, decoder: bool = False) -> list[str]:
        """The model's tokens for text, special tokens included; decoder=True: as the decoder reads it."""
        return list(self.encode(text, decoder=decoder).tokens)

    def coverage(self, text: str) -> Coverage:
        """How many of text's tokens the vocabulary does not know ([UNK]) or only knows character by character."""
        enc = self.encode(text)
        special = set(self.tokenizer.all_special_ids)
        unk = self.tokenizer.unk_token_id
        ids = [(i, t) for i, t in zip(enc.ids, enc.tokens, strict=True) if i not in special or i == unk]
        pieces = [t.removeprefix("##").lstrip("Ġ▁ ") for i, t in ids if i != unk]  # byte-level labels: " 你"
        return Coverage(len(ids), sum(i == unk for i, _ in ids) if unk is not None else 0,
                        sum(len(p) == 1 and not p.isascii() for p in pieces))

    def trace(
        self,
        text: str,
        layer: int,
        *,
        part: str | None = None,
        decoder_text: str | None = None,
        head_mask: Sequence[float] | None = None,
        strict: bool | None = None,
    ) -> AttentionTrace:
        """Every intermediate of one attention layer (part defaults to parts[0]).

        head_mask (one value per head; 1 keeps a head, 0 knocks it out) scales each head's block
        of the concat before W_O, inside the real model: later layers see the change too.
        meta: model, architecture, part, layer, truncated (tokens dropped from text and
        decoder_text), head_mask, check (max abs errors against the model's own numbers). A check beyond rounding
        warns (TraceCheckWarning); strict (default: the model's strict) raises TraceCheckError instead.
        """
        part = self._part(part)
        traces = self._traces(text, [self._layer(part, layer)], part, decoder_text, head_mask)
        verify(traces, strict=self.strict if strict is None else strict)
        return traces[0]

    def traces(self, text: str, *, part: str | None = None, decoder_text: str | None = None,
               strict: bool | None = None) -> tuple[AttentionTrace, ...]:
        """Every layer of part from one forward pass: traces(text)[layer] equals trace(text, layer); checked as
        trace() is."""
        part = self._part(part)
        traces = tuple(self._traces(text, range(self.num_layers[part]), part, decoder_text, None))
        verify(traces, strict=self.strict if strict is None else strict)
        return traces

    def _traces(
        self, text: str, layers: Sequence[int], part: str, decoder_text: str | None, head_mask: Sequence[float] | None
    ) -> list[AttentionTrace]:
        enc, dec = self._inputs(text, decoder_text)
        queries = dec if dec is not None and part != "encoder" else enc
        keys = dec if dec is not None and part == "decoder" else enc
        mask = None
        if head_mask is not None:
            mask = torch.as_tensor(np.asarray(head_mask, dtype=np.float32))  # (H,)
            H = {self.layer_heads[part][layer] for layer in layers}
            if len(H) != 1 or mask.shape != (*H,) or not torch.isfinite(mask).all():
                raise ValueError(f"head_mask needs {' or '.join(map(str, sorted(H)))} finite values, one per head of "
                                 "the layer")
        meta = {
            "model": self.name,
            "architecture": self.architecture,
            "part": part,
            "truncated": enc.dropped + (dec.dropped if dec is not None else 0),
            "head_mask": None if mask is None else mask.tolist(),
        }
        with self._lock:
            return self.adapter.traces(TraceRequest(
                part,
                tuple(layers),
                ids=enc.ids,
                query_tokens=queries.tokens,
                key_tokens=keys.tokens,
                decoder_ids=None if dec is None else dec.ids,
                head_mask=mask,
                meta=meta,
            ))

    def long_trace(
        self,
        text: str | None = None,
        *,
        ids: Sequence[int] | None = None,
        layers: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
        max_bytes: int | None = None,
    ) -> long.ModelLongTrace:
        """Every head of every layer (or of layers) over a long text or token ids, exact on demand: .overview(layer),
        .block(layer, head, q_start, k_start, size), .row(layer, head, query), .stats(). One forward pass with
        mha-viz's chunked attention kernel; see mha_viz.pretrained.long (what is kept, progress, max_bytes)."""
        with self._lock:
            return long_pass.trace_model(self, text, ids=ids, layers=layers, progress=progress, max_bytes=max_bytes)

    def attentions(self, text: str, *, part: str | None = None, decoder_text: str | None = None) -> np.ndarray:
        """The model's own attention weights for every layer of part: [layers, heads, T, S] (a hybrid's mixing matrices
        on its mixer layers; NaN in the heads a layer does not have, where layers differ in heads: layer_heads)."""
        part = self._part(part)
        enc, dec = self._inputs(text, decoder_text)
        with self._lock:
            outputs = self._forward(enc, dec)
        return heads_padded([to_numpy(a[0]) for a in self.adapter.model_attentions(outputs, part)])

    def attentions_for_ids(self, ids: Sequence[int]) -> np.ndarray:
        """The model's own attention weights [layers, heads, T, T] for token ids exactly as given (no special
        tokens added, nothing truncated), in an encoder or a decoder-only model; one map per trace head (differential
        attention: its signed weights, Adapter.head_attentions)."""
        if self.kind == "encoder-decoder":
            raise ValueError(f"{self.name} is an encoder-decoder model; attentions_for_ids needs one self-attention "
                             "stack (an encoder or a decoder-only model)")
        ids = list(ids)
        vocab_size = self.vocab_size
        if not 1 <= len(ids) <= self.max_tokens:
            raise ValueError(f"need 1 ... {self.max_tokens} token ids for {self.name}, got {len(ids)}")
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < vocab_size for i in ids):
            raise ValueError(f"token ids must be integers in 0 ... {vocab_size - 1} for {self.name}")
        with self._lock:
            outputs = self.adapter.forward([int(i) for i in ids])
            own = self.adapter.model_attentions(outputs, self.parts[0])
            return heads_padded([to_numpy(a[0]) for a in self.adapter.head_attentions(own, self.parts[0])])

    def final_hidden(
        self,
        text: str,
        *,
        part: str | None = None,
        decoder_text: str | None = None,
        head_masks: dict[int, Sequence[float]] | None = None,
        head_values: dict[int, dict[int, np.ndarray]] | None = None,
    ) -> np.ndarray:
        """The last hidden state [T, d_model] of part's stack (the encoder's for "encoder", else the
        decoder's), with head_masks {layer of part: one value per head} applied inside the real model:
        0 knocks a head out (its concat block is zeroed before W_O), 1 keeps it. head_values {layer: {head:
        [T, d_v] or [d_v]}} sets heads' concat blocks instead (mean and resample ablation)."""
        part = self._part(part)
        enc, dec = self._inputs(text, decoder_text)
        masks, values = self._head_masks(part, head_masks), self._head_values(part, head_values)
        with self._lock, masks, values:
            outputs = self._forward(enc, dec)
        return to_numpy(self.adapter.final_hidden(outputs, part)[0])

    @property
    def next_token_unavailable(self) -> str | None:
        """Why next_token_probs cannot run for this model, or None when it can."""
        if self.kind != "decoder":
            return (f"{self.name} is an {self.kind} model; next-token prediction needs a decoder-only (causal) "
                    "language model")
        if self.model is self.adapter.base or self.model.get_output_embeddings() is None:
            return (f"{self.name} was loaded without its language-model head (AutoModel gives the bare transformer); "
                    "load it with AutoModelForCausalLM and wrap it: PretrainedModel(model, tokenizer)")
        return None

    def next_token_probs(
        self,
        text: str,
        *,
        head_masks: dict[int, Sequence[float]] | None = None,
        head_values: dict[int, dict[int, np.ndarray]] | None = None,
    ) -> np.ndarray:
        """softmax(logits) of the LM head after the last token of text: [vocab]; head_masks and head_values as in
        final_hidden."""
        reason = self.next_token_unavailable
        if reason is not None:
            raise ValueError(f"next-token probabilities are unavailable: {reason}")
        enc = self.encode(text)
        masks, values = self._head_masks("decoder", head_masks), self._head_values("decoder", head_values)
        with self._lock, masks, values, torch.no_grad():
            ids = torch.tensor([list(enc.ids)], device=self.adapter.device())  # (1, T)
            logits = self.model(input_ids=ids, use_cache=False).logits  # (1, T, vocab)
        return to_numpy(logits[0, -1].float().softmax(-1))  # (vocab,)

    def generate(self, prompt: str, max_new_tokens: int, sampling: Sampling = GREEDY,
                 should_stop: Callable[[], bool] | None = None, *, max_length: int | None = None
                 ) -> generation.Generation:
        """Write up to max_new_tokens tokens after prompt, one step at a time with the KV cache.

        sampling (mha_viz.sampling.Sampling): greedy by default (the tokens of transformers'
        generate(do_sample=False)); otherwise softmax(logits / temperature), then top_k, then top_p, drawn
        reproducibly from its seed. Each step keeps its distribution (.probs) and the predicting query's attention
        [layers, heads, keys] (.attentions). Stops early after the model's end-of-sequence token, or before a token
        once should_stop() says so (asked from the second token on; stop_reason "stopped", the tokens so far kept).
        ValueError if the prompt plus max_new_tokens would not fit max_length (default max_tokens; up to the model's
        positions, a longer prompt is read into the cache in chunks). See mha_viz.pretrained.generation.
        """
        with self._lock:
            return generation.generate(self, prompt, max_new_tokens, sampling, should_stop, max_length)

    def logit_attribution(
        self,
        text: str | None = None,
        *,
        ids: Sequence[int] | None = None,
        position: int = -1,
        token: int | str | None = None,
    ) -> attribution.LogitAttribution:
        """Direct logit attribution of token (id or token string; None: the top prediction) after position of
        text (or of token ids as given, e.g. Generation.input_ids(step)): .heads [layers, heads], .terms
        (embeddings, biases, MLPs), .logit (the model's own) and .total (their sum), with the final norm frozen
        at its measured scale. See mha_viz.pretrained.attribution."""
        with self._lock:
            return attribution.logit_attribution(self, text, ids=ids, position=position, token=token)

    def head_weights(self, part: str | None = None) -> HeadWeights:
        """Every head's W_Q, W_K, W_V, W_O of part's self-attention layers, with the embeddings and the unembedding,
        norms folded in (mha_viz.weights)."""
        return weights.model_weights(self, self._part(part))

    def _head_masks(self, part: str, head_masks: dict[int, Sequence[float]] | None) -> HeadMasks:
        """Knockout hooks for {layer: head_mask} of part, checked: layers in range, one finite value per head."""
        if head_masks and not self.adapter.knockout:
            raise ValueError(f"heads cannot be switched off: {self.unavailable}")
        sites = []
        for layer, values in (head_masks or {}).items():
            mask = torch.as_tensor(np.asarray(values, dtype=np.float32))  # (H,)
            H = self.layer_heads[part][self._layer(part, layer)]
            if mask.shape != (H,) or not torch.isfinite(mask).all():
                raise ValueError(f"head_masks[{layer}] needs {H} finite values, one per head of that layer")
            sites.append((self.adapter.site(part, self._layer(part, layer)), mask))
        return HeadMasks(sites)

    def _head_values(self, part: str, head_values: dict[int, dict[int, np.ndarray]] | None) -> HeadValues:
        """Hooks setting {layer: {head: value [T, d_v] or [d_v]}} of part, checked: layers and heads in range."""
        if head_values and not self.adapter.knockout:
            raise ValueError(f"heads cannot be set: {self.unavailable}")
        sites = []
        for layer, heads in (head_values or {}).items():
            site, H = self.adapter.site(part, self._layer(part, layer)), self.layer_heads[part][self._layer(part, layer)]
            if not all(isinstance(h, (int, np.integer)) and 0 <= h < H for h in heads):
                raise ValueError(f"head_values[{layer}] names heads outside 0 ... {H - 1}")
            sites.append((site, (H, {int(h): torch.as_tensor(np.asarray(v, dtype=np.float32)) for h, v in heads.items()})))
        return HeadValues(sites)

    def _forward(self, enc: Encoded, dec: Encoded | None) -> Any:
        return self.adapter.forward(enc.ids, None if dec is None else dec.ids)

    def _inputs(self, text: str, decoder_text: str | None) -> tuple[Encoded, Encoded | None]:
        if self.kind != "encoder-decoder":
            if decoder_text is not None:
                raise ValueError(f"decoder_text is for encoder-decoder models; {self.name} is a {self.kind} model")
            return self.encode(text), None
        return self.encode(text), self.encode(text if decoder_text is None else decoder_text, decoder=True)

    def encode(self, text: str, *, decoder: bool = False) -> Encoded:
        """text as the model reads it, cut to max_tokens (special tokens kept at the ends); decoder=True: as the
        decoder reads it (shifted right after the decoder start token).

        A text of more than CHARS_PER_TOKEN * max_tokens characters is cut to that before it is
        tokenised (no model's tokens are that long), so a huge paste costs no more than a long text;
        `dropped` then counts the tokens cut from what was read.
        """
        text = text[: CHARS_PER_TOKEN * self.max_tokens]
        full = self.tokenizer(text, verbose=False)["input_ids"]
        fits = len(full) <= self.max_tokens  # else truncate, keeping the special tokens at the ends
        ids = full if fits else self.tokenizer(text, truncation=True, max_length=self.max_tokens)["input_ids"]
        if not ids:
            raise ValueError(f"{text!r} has no tokens")
        if decoder:
            start = self.model.config.decoder_start_token_id
            if start is None:
                start = getattr(getattr(self.model, "generation_config", None), "decoder_start_token_id", None)
            if start is None:
                raise ValueError(f"{self.name} has no decoder_start_token_id to start the decoder input with")
            ids = [start, *ids[:-1]]
        return Encoded(tuple(ids), token_labels(self.tokenizer, ids), len(full) - len(ids))

    def _part(self, part: str | None) -> str:
        if part is None:
            return self.parts[0]
        if part not in self.parts:
            raise ValueError(f"part must be one of {self.parts} for {self.name}, got {part!r}")
        return part

    def _layer(self, part: str, layer: int) -> int:
        n = self.num_layers[part]
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < n:
            raise IndexError(f"layer must be 0 ... {n - 1} for the {part} of {self.name}, got {layer!r}")
        return int(layer)
