"""Every source is a mha_viz.sources.Source, and its capability flags say what it can do."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mha_viz import MHAConfig
from mha_viz.sources import ConfigurableSource, ModelSource, Source, TrainedSource
from mha_viz.trace import AttentionTrace
from mha_viz.training import trained_layer
from tests.unit.test_analysis_pretrained import bundled
from tests.unit.test_induction_model import bundled_induction


def flags(source: Source) -> tuple[int, bool, bool, bool]:
    return source.num_layers, source.causal_lm, source.trainable, source.long


def test_the_three_sources_are_sources_with_their_flags() -> None:
    configurable = ConfigurableSource("the cat sat on the mat", MHAConfig(16, 2))
    trained = TrainedSource(trained_layer("prev-first", 2, 64), "a b c d a b")
    encoder = ModelSource(bundled(), "the cat sat on the mat", "encoder")
    causal = ModelSource(bundled_induction(), "red fox blue sky red", "decoder")
    for source in (configurable, trained, encoder, causal):
        assert isinstance(source, Source)
        assert isinstance(source.with_text("the dog sat"), Source)
        assert source.trace(source.num_layers - 1).weights.ndim == 3
    assert flags(configurable) == (1, False, True, True) and configurable.model is None
    assert flags(trained) == (1, False, True, False) and trained.model is None
    assert flags(encoder) == (6, False, False, False) and encoder.model is bundled()
    assert flags(causal) == (2, True, False, False)
    assert causal.logit_attribution(position=-1).heads.shape == (2, 4)  # what causal_lm promises


def test_what_lacks_a_member_is_not_a_source() -> None:
    @dataclass(frozen=True)
    class NoFlags:  # the methods, but no capability flags
        num_layers: int = 1
        model: None = None

        def trace(self, layer: int) -> AttentionTrace:
            raise NotImplementedError

        def with_text(self, text: str) -> NoFlags:
            return self

        def attentions(self) -> np.ndarray | None:
            return None

    assert not isinstance(NoFlags(), Source)
    assert not isinstance("the cat sat", Source)
