"""A TransformerLens HookedTransformer behind the app's pretrained page: a ModelSource on load_model(hooked) draws the
Heads view and every Analysis section without an exception."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.renderer_json import shown_layer

pytest.importorskip("transformer_lens")
pytestmark = pytest.mark.usefixtures("one_thread")


def hooked_page() -> None:
    """The pretrained page on a 2-layer, 4-head HookedTransformer (rotary, grouped-query, random weights).

    AppTest runs this function's source alone: everything it needs is imported here."""
    import streamlit as st

    from mha_viz.params import ViewState
    from mha_viz.pretrained import load_model
    from mha_viz.sources import ModelSource
    from mha_viz.ui.pages import pretrained_page
    from tests.unit.test_hooked import CONFIGS, hooked

    @st.cache_resource
    def model():  # one model across reruns, as the app's cached loader keeps one
        return load_model(hooked(**CONFIGS["rotary, grouped-query"]))

    def no_other_model(name: str):
        raise ValueError("no other model in this test")

    text = "red fox blue sky red fox green tree"
    pretrained_page(ViewState(mode="Pretrained", text=text, part="decoder"), ModelSource(model(), text, "decoder"),
                    no_other_model)


def chart_keys(at: AppTest) -> list[str]:
    return [c.key for c in at.get("plotly_chart")]


def test_heads_view_and_every_other_view_draw_the_hooked_model_layer() -> None:
    at = AppTest.from_function(hooked_page, default_timeout=120).run()
    assert not at.exception and not at.error
    at.segmented_control(key="view").set_value("Heads").run()
    assert not at.exception and not at.error
    labels = shown_layer(at)[0]["queries"]  # the renderer paints the heads, labelled as text
    assert labels[0].endswith("<bos>")  # the model's own tokens, [BOS] first, label the axes
    views = at.segmented_control(key="view").options
    assert "Generate" in views and "Concat → W_O" in views  # a causal LM whose every intermediate is traced
    for view in views:
        at.segmented_control(key="view").set_value(view).run()
        assert not at.exception, (view, at.exception)
        assert not at.error, view


def test_every_analysis_section_runs_on_the_hooked_model() -> None:
    at = AppTest.from_function(hooked_page, default_timeout=120).run()
    at.segmented_control(key="view").set_value("Analysis").run()
    assert not at.exception and not at.error
    sections = at.segmented_control(key="section").options
    assert "Knockout" in sections and "Head detectors" in sections
    for name in sections:
        at.segmented_control(key="section").set_value(name).run()
        assert not at.exception, (name, at.exception)
        assert not at.error, name
    at.segmented_control(key="section").set_value("Head detectors").run()
    assert "analysis_detectors" in chart_keys(at)
