"""Where a trace comes from: one object that views and analyses ask for a layer, another text, all layers.

Every source is a `Source` (the Protocol below):
    source.trace(layer)      the AttentionTrace of that layer on the source's text
    source.with_text(other)  the same model on another text (for comparisons)
    source.attentions()      every layer's attention weights [L, H, T, S], or None for a single layer
    source.model             the PretrainedModel behind it (knockout through the whole model), or None
and says what else it can do, so that a view asks what a source can do, not what type it is:
    source.num_layers        how many attention layers trace() reads (1: a single layer)
    source.causal_lm         a causal language model: generate() and logit_attribution() work
    source.trainable         mha-viz's own layer (d_model, h), which mha_viz.training can train on a task
    source.long              is_long() and long_trace() read inputs longer than max_tokens
    source.composable        two or more self-attention layers with known weights: heads compose across layers
    source.score_attribution(head, query)  a single layer's scores split by its input's parts (the configurable
                             layer: token vectors and positional encoding; a trained one: token and position
                             embeddings); absent where a model's stream is split instead
    source.token_readout     a known readout over a small vocabulary, to follow each head's W_O to (a trained layer's
                             relation readouts, a small language model's unembedding): mha_viz.analysis.readout
Sources are frozen dataclasses: equal arguments, equal sources (an app can cache on them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch

from .attention import MultiHeadAttention
from .config import MHAConfig
from .limits import MAX_LONG_TOKENS, MAX_TOKENS
from .long import LongTrace, long_trace
from .sampling import GREEDY, Sampling
from .text import embed_tokens, positional_encoding, tokenize
from .trace import MIXING_KINDS, AttentionTrace
from .variants import VARIANTS, LayerVariant, variant_layer

if TYPE_CHECKING:
    from .analysis.score_attribution import ScoreAttribution
    from .pretrained import PretrainedModel
    from .pretrained.attribution import LogitAttribution
    from .pretrained.generation import Generation
    from .pretrained.long import ModelLongTrace
    from .training import TrainedLayer

T = TypeVar("T")


@runtime_checkable
class Source(Protocol):
    """What every source gives a view, and the flags that say what else it can do (module docstring)."""

    @property
    def num_layers(self) -> int: ...

    @property
    def causal_lm(self) -> bool: ...

    @property
    def trainable(self) -> bool: ...

    @property
    def long(self) -> bool: ...

    @property
    def model(self) -> PretrainedModel | None: ...

    def trace(self, layer: int) -> AttentionTrace: ...

    def with_text(self, text: str) -> Source: ...

    def attentions(self) -> np.ndarray | None: ...


def text_tokens(text: str, what: str = "text", max_tokens: int = MAX_TOKENS) -> tuple[tuple[str, ...], int]:
    """mha-viz's tokens of text, cut to max_tokens: (tokens, how many were cut). ValueError if there are none.

    Tokenising stops early: the count of cut tokens stops at 8 * max_tokens (a huge text costs no more).
    """
    tokens = tokenize(text, 8 * max_tokens)
    if not tokens:
        raise ValueError(f"the {what} has no tokens (no visible characters)")
    return tuple(tokens[:max_tokens]), max(0, len(tokens) - max_tokens)


def _configurable_inputs(
    text: str, cfg: MHAConfig, seed: int, positional: bool, context: str | None, max_tokens: int,
    variant: LayerVariant | None = None,
) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor | None, tuple[str, ...], tuple[str, ...] | None, int]:
    """The configurable layer and its inputs: (layer, x, context vectors or None, query tokens, key tokens, tokens cut).

    variant None: multi-head attention, grouped-query where cfg.kv_heads < h.
    """
    q_tokens, q_cut = text_tokens(text, "text", max_tokens)
    k_tokens, k_cut = text_tokens(context, "second sentence", max_tokens) if context is not None else (None, 0)
    if variant is None:
        mha = MultiHeadAttention(cfg.d_model, cfg.num_heads, d_k=cfg.d_k, d_v=cfg.d_v, d_out=cfg.d_out,
                                 kv_heads=cfg.kv_heads, seed=seed)
    else:
        mha = variant_layer(cfg, variant, seed=seed)
    x = embed_tokens(list(q_tokens), cfg.d_model, seed=seed, positional=positional)  # (T, d_model)
    c = None if k_tokens is None else embed_tokens(list(k_tokens), cfg.d_model, seed=seed, positional=positional)  # (S, d_model)
    return mha, x, c, q_tokens, k_tokens, q_cut + k_cut


def configurable_trace(
    text: str,
    cfg: MHAConfig,
    *,
    seed: int = 0,
    causal: bool = False,
    positional: bool = True,
    context: str | None = None,
    max_tokens: int = MAX_TOKENS,
    variant: LayerVariant | None = None,
) -> AttentionTrace:
    """The configurable layer (random Xavier weights from seed) on text; context: cross-attention keys and values.

    variant: an attention variant of the layer (mha_viz.variants; None: cfg as it is, multi-head or grouped-query).
    Texts longer than max_tokens are cut; meta["truncated"] says how many tokens were dropped.
    The same function serves the app and `python -m mha_viz report`.
    """
    mha, x, c, q_tokens, k_tokens, cut = _configurable_inputs(text, cfg, seed, positional, context, max_tokens, variant)
    with torch.inference_mode():
        trace = mha(x, c, causal=causal, query_tokens=q_tokens, key_tokens=k_tokens)
    kind = variant.kind if variant is not None else "gqa" if cfg.group_size > 1 else "mha"
    params = {} if variant is None else variant.params()
    # the layer's own meta wins over a parameter of the same name (MLA's meta["kv_latent"] is the latent itself)
    return replace(trace, meta={**params, **trace.meta, "weights": "random", "seed": seed, "truncated": cut,
                                "variant": kind})


def configurable_score_attribution(
    text: str, cfg: MHAConfig, *, head: int, query: int, key: int | None = None, seed: int = 0, causal: bool = False,
    positional: bool = True, max_tokens: int = MAX_TOKENS, variant: LayerVariant | None = None,
) -> ScoreAttribution:
    """The configurable layer's score of (query, key) of one head split into (token, position, bias) x (token,
    position, bias) terms: its input is the token vectors plus the positional encoding (analysis.score_attribution's
    input_score_attribution). A differential layer's head h + h/2 is differential head h's second map; MLA's latent
    norms are frozen at their scales. ValueError where the layer's queries are not affine in its input."""
    from .analysis.score_attribution import input_score_attribution

    mha, _, _, q_tokens, _, _ = _configurable_inputs(text, cfg, seed, positional, None, max_tokens, variant)
    parts = {"token": embed_tokens(list(q_tokens), cfg.d_model, seed=seed, positional=False)}  # (T, d_model)
    if positional:
        parts["position"] = positional_encoding(len(q_tokens), cfg.d_model)  # x = token + position, as embed_tokens
    def run(inputs: torch.Tensor) -> AttentionTrace:
        with torch.inference_mode():
            return _softmax_heads(mha)(inputs, None, causal=causal, query_tokens=q_tokens, key_tokens=None)

    return input_score_attribution(run, parts, head=head, query=query, key=key, layer=mha)


def _softmax_heads(attention: torch.nn.Module) -> Callable[..., AttentionTrace]:
    """The trace score attribution splits, as a layer's forward: its softmax heads, the layer's own trace or a
    differential layer's maps, each a head (DifferentialAttention.map_trace: head i + h/2 is differential head i's
    second map, as DiffLlama's query heads)."""
    return getattr(attention, "map_trace", attention)


def trained_score_attribution(layer: TrainedLayer, sequence: str | None, *, head: int, query: int
                              ) -> ScoreAttribution:
    """A trained layer's scores of one query (on sequence, None: its task's probe) split into (token, position,
    bias) x (token, position, bias) terms: its input is the token embedding plus the learned position embedding
    (analysis.score_attribution's input_score_attribution). Does the query find its key by what it is, or where?"""
    from .analysis.score_attribution import input_score_attribution
    from .training.tasks import get_task

    tokens = layer.probe() if sequence is None else layer.parse(sequence)
    vocab = get_task(layer.task).vocab
    ids = torch.tensor([vocab.index(t) for t in tokens])  # (T,)
    model = layer.model()
    with torch.no_grad():
        parts = {"token": model.tok_emb(ids), "position": model.pos_emb.weight[:len(ids)]}  # (T, d_model) each

    def run(x: torch.Tensor) -> AttentionTrace:
        with torch.no_grad():
            return _softmax_heads(model.attention)(x, causal=True, query_tokens=tuple(tokens))

    return input_score_attribution(run, parts, head=head, query=query, layer=model.attention)


def long_configurable_trace(
    text: str,
    cfg: MHAConfig,
    *,
    seed: int = 0,
    causal: bool = False,
    positional: bool = True,
    context: str | None = None,
    max_tokens: int = MAX_LONG_TOKENS,
) -> LongTrace:
    """configurable_trace for inputs of thousands of tokens: a LongTrace (an overview, and exact blocks on demand)."""
    mha, x, c, q_tokens, k_tokens, cut = _configurable_inputs(text, cfg, seed, positional, context, max_tokens)
    trace = long_trace(mha, x, c, causal=causal, query_tokens=q_tokens, key_tokens=k_tokens)
    return replace(trace, meta={**trace.meta, "weights": "random", "seed": seed, "truncated": cut})


@dataclass(frozen=True)
class ConfigurableSource:
    """The configurable layer with random, seeded weights (one layer)."""

    text: str
    cfg: MHAConfig
    seed: int = 0
    causal: bool = False
    positional: bool = True
    context: str | None = None
    max_tokens: int = MAX_TOKENS
    long_tokens: int = MAX_LONG_TOKENS  # the longest input long_trace() reads (mha and gqa only)
    variant: LayerVariant | None = None  # an attention variant (mha_viz.variants); None: cfg as it is (mha or gqa)
    num_layers: int = field(default=1, init=False)
    model: None = field(default=None, init=False)
    causal_lm: ClassVar[bool] = False
    trainable: ClassVar[bool] = True
    long: ClassVar[bool] = True
    composable: ClassVar[bool] = False  # one layer

    def trace(self, layer: int = 0) -> AttentionTrace:
        _single_layer(layer)
        return configurable_trace(self.text, self.cfg, seed=self.seed, causal=self.causal, positional=self.positional,
                                  context=self.context, max_tokens=self.max_tokens, variant=self.variant)

    @property
    def variant_kind(self) -> str:
        """The attention variant the layer computes: a kind of mha_viz.variants.KINDS."""
        if self.variant is not None:
            return self.variant.kind
        return "gqa" if self.cfg.group_size > 1 else "mha"

    # The capability flag of the variant views (mha_viz.parts: Part.needs): the variant's (VariantSpec.flag).
    variant_flags = property(lambda self: (VARIANTS[self.variant_kind].flag,), doc="its variant's capability flag")

    @property
    def layer_config(self) -> MHAConfig:
        """cfg as the variant computes it (gqa: with its kv_heads); ValueError when the variant cannot run."""
        return self.cfg if self.variant is None else self.variant.config(self.cfg)

    def key(self) -> tuple:
        """What the traces depend on, as a plain tuple: a cache key that a subclass redefined on every run of a
        Streamlit script (a new class object each time, so its instances never compare equal) can use."""
        return (self.text, self.cfg, self.seed, self.causal, self.positional, self.context, self.max_tokens,
                self.long_tokens, self.variant)

    def is_long(self) -> bool:
        """Whether the text (or the second sentence) has more than max_tokens tokens and long_trace() reads more."""
        if self.long_tokens <= self.max_tokens or self.variant is not None and not self.variant.spec.long:
            return False
        texts = (self.text,) if self.context is None else (self.text, self.context)
        return any(len(tokenize(t, self.max_tokens + 1)) > self.max_tokens for t in texts)

    def long_trace(self) -> LongTrace:
        """The layer on up to long_tokens tokens: an overview of every head and exact blocks (mha_viz.long)."""
        return long_configurable_trace(self.text, self.layer_config, seed=self.seed, causal=self.causal,
                                       positional=self.positional, context=self.context, max_tokens=self.long_tokens)

    def with_text(self, text: str) -> ConfigurableSource:
        return replace(self, text=text)

    def attentions(self) -> np.ndarray | None:
        return None

    def score_attribution(self, head: int, query: int) -> ScoreAttribution:
        """The score of every key the query sees, split by the layer's input parts (token, position, bias)."""
        if self.context is not None:
            raise ValueError("score attribution splits self-attention: this layer reads a second sentence")
        return configurable_score_attribution(self.text, self.cfg, head=head, query=query, seed=self.seed,
                                              causal=self.causal, positional=self.positional,
                                              max_tokens=self.max_tokens, variant=self.variant)


@dataclass(frozen=True, eq=False)
class TrainedSource:
    """A layer trained on a synthetic task (mha_viz.training), on a sequence of that task's tokens."""

    layer: TrainedLayer
    sequence: str  # task tokens separated by spaces; "" is the task's probe sequence
    num_layers: int = field(default=1, init=False)
    model: None = field(default=None, init=False)
    causal_lm: ClassVar[bool] = False  # causal attention over task tokens, but no language model head
    trainable: ClassVar[bool] = True
    long: ClassVar[bool] = False
    composable: ClassVar[bool] = False  # one layer

    def trace(self, layer: int = 0) -> AttentionTrace:
        _single_layer(layer)
        return self.layer.trace(self.sequence or None)

    @property
    def variant_kind(self) -> str:
        """The attention variant the trained layer computes: a kind of mha_viz.variants.KINDS."""
        return self.layer.variant.kind

    @property
    def token_readout(self) -> bool:
        """One readout per relation over the task's few tokens, followed through each head's W_V W_O: not for MLA and
        differential layers, whose weights do not split per head (TrainedLayer.head_weights says why)."""
        return not self.layer.variant.spec.training.unsplit

    # The capability flag of the variant views (mha_viz.parts: Part.needs): the variant's (VariantSpec.flag).
    variant_flags = property(lambda self: (VARIANTS[self.variant_kind].flag,), doc="its variant's capability flag")

    def with_text(self, text: str) -> TrainedSource:
        return replace(self, sequence=text)

    def score_attribution(self, head: int, query: int) -> ScoreAttribution:
        """The score of every key the query sees, split by the layer's input parts (token, position, bias)."""
        return trained_score_attribution(self.layer, self.sequence or None, head=head, query=query)

    def attentions(self) -> np.ndarray | None:
        return None


@dataclass(frozen=True, eq=False)
class ModelSource:
    """A pretrained model's part (encoder, decoder or cross) on a text (and an encoder-decoder's decoder text)."""

    model: PretrainedModel
    text: str
    part: str
    decoder_text: str | None = None
    long_tokens: int | None = None  # the most tokens long_trace() reads (None: the model's positions)
    trainable: ClassVar[bool] = False
    long: ClassVar[bool] = False

    @property
    def num_layers(self) -> int:
        return self.model.num_layers[self.part]

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """What mixes the tokens in each layer (mha_viz.mixers.KINDS): softmax attention, or a hybrid model's
        linear-attention and state-space layers."""
        return self.model.layer_kinds(self.part)

    @property
    def hybrid(self) -> bool:
        """Whether some layer is not softmax attention (a linear-attention or state-space layer, traced as a mixing
        matrix): the capability flag views read (mha_viz.parts.capable)."""
        return any(kind in MIXING_KINDS for kind in self.layer_kinds)

    @property
    def causal_lm(self) -> bool:
        """Whether the model predicts next tokens (a decoder-only model with its LM head): model.next_token_unavailable
        says why not."""
        return self.model.next_token_unavailable is None

    @property
    def composable(self) -> bool:
        """Whether heads of one layer can compose with heads of a later one (mha_viz.analysis.composition): a
        self-attention stack (not cross-attention) of two or more layers whose weights are opened up."""
        return self.part != "cross" and self.num_layers >= 2 and self.model.unavailable is None

    @property
    def differential(self) -> bool:
        """Whether its heads are differential attention (DiffLlama: two softmax maps a head, the Two maps view)."""
        return self.model.architecture == "diffllama"

    @property
    def latent(self) -> bool:
        """Whether the layers are multi-head latent attention (DeepSeek-V2/V3), traced with their cached latent."""
        return self.model.architecture in ("deepseek_v2", "deepseek_v3") and self.model.unavailable is None

    @property
    def token_readout(self) -> bool:
        """Whether each head's W_O can be followed to the unembedding over the whole vocabulary: a causal language
        model's decoder with at most analysis.readout.MAX_VOCAB tokens (the bundled induction model)."""
        from .analysis.readout import MAX_VOCAB

        return self.part == "decoder" and self.causal_lm and self.model.vocab_size <= MAX_VOCAB

    def trace(self, layer: int) -> AttentionTrace:
        return self.model.trace(self.text, layer, part=self.part, decoder_text=self.decoder_text)

    def trace_loader(self, layer: int) -> Callable[[], AttentionTrace]:
        """A function that returns trace(layer), for what outlives a run (a download's callable). This one holds
        the model; a source whose models are cached by name (the app's) returns one that holds only the name."""
        return lambda: self.trace(layer)

    def with_text(self, text: str) -> ModelSource:
        """Another text where the queries come from: the decoder text of an encoder-decoder's decoder, else the text."""
        if self.model.kind == "encoder-decoder" and self.part == "decoder":
            return replace(self, decoder_text=text)
        return replace(self, text=text)

    def attentions(self) -> np.ndarray | None:
        """[L, H, T, S] from the model itself; None for cross-attention, whose maps do not chain into a rollout."""
        if self.part == "cross":
            return None
        return self.model.attentions(self.text, part=self.part, decoder_text=self.decoder_text)

    def long_limit(self) -> int | None:
        """The most tokens long_trace() reads: the model's positions, at most long_tokens (None: no limit)."""
        limits = [n for n in (self.model.adapter.max_positions(), self.long_tokens) if n]
        return min(limits) if limits else None

    def text_tokens(self) -> tuple[int, ...]:
        """The text's token ids as the model reads them (special tokens added), not cut to max_tokens; a text of
        more than CHARS_PER_TOKEN characters a token of long_limit() is cut to that before tokenising."""
        from .pretrained.encoded import CHARS_PER_TOKEN

        limit = self.long_limit()
        text = self.text if limit is None else self.text[: CHARS_PER_TOKEN * (limit + 1)]
        return tuple(int(i) for i in self.model.tokenizer(text, verbose=False)["input_ids"])

    def is_long(self) -> bool:
        """Whether the text has more tokens than max_tokens (what the other views read) and long_trace() reads
        more: a self-attention stack whose positions (and long_tokens) allow it."""
        limit = self.long_limit()
        return (self.part != "cross" and (limit is None or limit > self.model.max_tokens)
                and len(self.text_tokens()) > self.model.max_tokens)

    def long_ids(self) -> tuple[int, ...]:
        """The ids long_trace() reads: text_tokens() cut to long_limit() (the closing special token kept)."""
        ids, limit = self.text_tokens(), self.long_limit()
        return ids if limit is None or len(ids) <= limit else (*ids[: limit - 1], ids[-1])

    def long_trace(self, progress: Callable[[int, int], None] | None = None, max_bytes: int | None = None
                   ) -> ModelLongTrace:
        """Every head of every layer over the whole text (up to long_limit() tokens), exact on demand:
        PretrainedModel.long_trace (progress, max_bytes: see mha_viz.pretrained.long_pass.trace_model)."""
        return self.model.long_trace(ids=self.long_ids(), progress=progress, max_bytes=max_bytes)

    def generate(self, max_new_tokens: int, sampling: Sampling = GREEDY,
                 should_stop: Callable[[], bool] | None = None) -> Generation:
        """The model writing after the text (PretrainedModel.generate; should_stop: asked between tokens), within
        generation_limit()."""
        limit = self.generation_limit()
        return self.model.generate(self.text, max_new_tokens, sampling, should_stop,
                                   **({} if limit is None else {"max_length": limit}))

    def generation_limit(self) -> int | None:
        """The most tokens generate() reads and writes past the model's max_tokens: long_limit() on a model that
        steps from its KV cache (a longer prompt goes into the cache in chunks), else None (max_tokens)."""
        if not getattr(getattr(self.model, "adapter", None), "steps_from_cache", False):
            return None
        limit = self.long_limit()
        return limit if limit is not None and limit > self.model.max_tokens else None

    def logit_attribution(self, *, ids: tuple[int, ...] | None = None, position: int = -1,
                          token: int | str | None = None) -> LogitAttribution:
        """Which heads wrote a logit after position of the text (or of ids): PretrainedModel.logit_attribution."""
        return self.model.logit_attribution(None if ids is not None else self.text, ids=ids, position=position,
                                            token=token)

    def head_scores(self, *, seed: int = 0) -> dict[str, np.ndarray]:
        """Previous-token, duplicate-token and induction scores [layers, heads] (mha_viz.analysis.detect_heads)."""
        from .analysis import detect_heads

        return detect_heads(self.model, seed=seed)

    def memo(self, what: Hashable, compute: Callable[[], T]) -> T:
        """compute(), something derived from this source named by `what`: a hook where an app keeps a cache."""
        return compute()


TraceSource = Source  # the name the app's views use


def _single_layer(layer: int) -> None:
    if layer != 0:
        raise IndexError(f"this model has one attention layer (layer 0), not layer {layer}")
