"""A view asks a source what it can do (its flags), not what type it is: a toy source, no subclass of the library's,
gets the Analysis sections its flags promise."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("one_thread")


def toy_app(causal_lm: bool) -> None:
    """The bundled causal model behind a toy source of its own (not a ModelSource); causal_lm: its flag.

    AppTest runs this function's source alone (no postponed annotations): no annotation names Toy."""
    from dataclasses import dataclass, replace

    import numpy as np

    from mha_viz.pretrained import PretrainedModel
    from mha_viz.pretrained.attribution import LogitAttribution
    from mha_viz.sources import Source
    from mha_viz.trace import AttentionTrace
    from mha_viz.ui.analysis import analysis_view
    from tests.unit.test_induction_model import bundled_induction

    @dataclass(frozen=True, eq=False)
    class Toy:
        model: PretrainedModel
        text: str
        causal_lm: bool
        part: str = "decoder"
        decoder_text: None = None
        trainable: bool = False
        long: bool = False

        @property
        def num_layers(self) -> int:
            return self.model.num_layers[self.part]

        def trace(self, layer: int) -> AttentionTrace:
            return self.model.trace(self.text, layer, part=self.part)

        def with_text(self, text: str) -> Source:
            return replace(self, text=text)

        def attentions(self) -> np.ndarray | None:
            return self.model.attentions(self.text, part=self.part)

        def logit_attribution(self, *, position: int = -1, token: int | str | None = None) -> LogitAttribution:
            return self.model.logit_attribution(self.text, position=position, token=token)

    toy = Toy(bundled_induction(), "red fox blue sky green tree red", causal_lm)
    assert isinstance(toy, Source)
    analysis_view(toy.trace(1), toy, layer=1, name="toy")


def section(at: AppTest, name: str) -> AppTest:
    at.segmented_control(key="section").set_value(name).run()
    assert not at.exception and not at.error
    return at


def chart_keys(at: AppTest) -> list[str]:
    return [c.key for c in at.get("plotly_chart")]


def test_a_toy_causal_lm_gets_logit_attribution_and_knockout_through_its_model() -> None:
    at = AppTest.from_function(toy_app, args=(True,), default_timeout=120).run()
    assert not at.exception
    section(at, "Logit attribution")
    assert "analysis_dla" in chart_keys(at)
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.key == "analysis_dla").proto.spec)
    assert "'fox'" in spec["layout"]["title"]["text"]  # the model's top prediction after the last "red"
    section(at, "Knockout")
    at.multiselect(key="off").set_value([0]).run()
    assert not at.exception
    assert any("Change in the final hidden state" in m.value for m in at.markdown)  # the model behind it ran


def test_a_toy_without_the_causal_lm_flag_is_told_why() -> None:
    at = AppTest.from_function(toy_app, args=(False,), default_timeout=120).run()
    section(at, "Logit attribution")
    assert "analysis_dla" not in chart_keys(at)
    assert any("needs a causal language model" in i.value for i in at.info)
