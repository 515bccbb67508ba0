"""The "W_O at work" section (AppTest): in Train mode it says, from the numbers, which head writes which relation's
answer (h = 2: one head each; h = 1: one head for both), draws the numbers it says, and keeps its state in the URL;
for the bundled induction model it names the induction heads; it is not offered for random weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.analysis import trained_readout
from mha_viz.params import SECTIONS
from mha_viz.training import trained_layer
from tests.app.test_app import new_app, z_matrix

SECTION = "W_O at work"


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, f"expected one chart {key!r}, got {[c.key for c in at.get('plotly_chart')]}"
    return json.loads(matches[0].proto.spec)


def said(at: AppTest) -> list[str]:
    return [m.value.strip("*") for m in at.markdown if m.value.startswith("**") and "identity" in m.value
            or m.value.startswith("**") and "every relation" in m.value]


def train_page(h: int) -> AppTest:
    at = new_app(mode="Train", view="Analysis", section=SECTION, h=str(h)).run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    return at


@pytest.fixture(scope="module")
def two() -> AppTest:
    return train_page(2)


def test_h2_says_one_head_per_relation_and_draws_those_numbers(two: AppTest) -> None:
    expected = trained_readout(trained_layer("prev-first", 2, 64, 0, 600))
    words = said(two)
    assert words == list(expected.sentences()) and len(words) == 2
    (prev,), (first,) = expected.serving()
    assert prev != first
    assert words[0].startswith(f"Head {prev} writes the previous token's identity where the 'previous' readout looks")
    assert words[1].startswith(f"Head {first} writes the first token's identity")
    heat = chart(two, "analysis_wo_contributions")["data"][0]
    np.testing.assert_allclose(z_matrix(heat), expected.contributions, atol=1e-4)
    token_map = z_matrix(chart(two, "analysis_wo_token_map")["data"][0])
    np.testing.assert_allclose(token_map, expected.token_maps[0, 0], atol=1e-4)  # head 0, 'previous'
    assert token_map.shape == (26, 26)


def test_picking_the_first_readout_and_a_head_redraws_the_map_and_keeps_it_in_the_url(two: AppTest) -> None:
    expected = trained_readout(trained_layer("prev-first", 2, 64, 0, 600))
    two.segmented_control(key="wo_answer").set_value(1).run()
    two.selectbox(key="head").set_value(1).run()
    assert not two.exception
    shown = z_matrix(chart(two, "analysis_wo_token_map")["data"][0])
    np.testing.assert_allclose(shown, expected.token_maps[1, 1], atol=1e-4)
    assert two.query_params["wo_answer"] in ("1", ["1"]) and two.query_params["head"] in ("1", ["1"])
    again = new_app(mode="Train", view="Analysis", section=SECTION, h="2", wo_answer="1", head="1").run()
    assert not again.exception
    np.testing.assert_allclose(z_matrix(chart(again, "analysis_wo_token_map")["data"][0]), shown, atol=1e-6)


def test_h1_says_the_single_head_serves_both_and_the_words_differ_from_h2(two: AppTest) -> None:
    one = train_page(1)
    expected = trained_readout(trained_layer("prev-first", 1, 64, 0, 600))
    (words,) = said(one)
    assert words == expected.sentences()[0]
    assert words.startswith("Head 0 serves every relation at once")
    assert f"+{expected.contributions[0, 0]:.1f} for 'previous'" in words
    assert words not in said(two)
    assert z_matrix(chart(one, "analysis_wo_contributions")["data"][0]).shape == (1, 2)


def test_offered_for_trained_layers_and_the_induction_model_only() -> None:
    from mha_viz import INDUCTION_MODEL, load_model
    from mha_viz.config import MHAConfig
    from mha_viz.sources import ConfigurableSource, ModelSource, TrainedSource

    layer = trained_layer("prev-first", 2, 64, 0, 600)
    assert SECTION in SECTIONS.menu("Train", TrainedSource(layer, ""))
    assert SECTION in SECTIONS.menu("Configurable", TrainedSource(layer, ""))  # trained weights in Configurable mode
    assert SECTION not in SECTIONS.menu("Configurable", ConfigurableSource("a b c", MHAConfig(8, 2)))
    assert SECTION in SECTIONS.menu("Pretrained", ModelSource(load_model(INDUCTION_MODEL), "red blue", "decoder"))


def induction_app() -> None:
    from mha_viz import INDUCTION_MODEL, load_model
    from mha_viz.sources import ModelSource
    from mha_viz.ui.analysis import analysis_view

    source = ModelSource(load_model(INDUCTION_MODEL), "red blue green red blue", "decoder")
    analysis_view(source.trace(1), source, layer=1, name="induction")


def test_the_induction_model_names_its_induction_heads() -> None:
    at = AppTest.from_function(induction_app, default_timeout=180)
    at.session_state["section"] = SECTION
    at.run()
    assert not at.exception and not at.error
    (words,) = said(at)
    assert words.startswith("L1 H0, L1 H1, L1 H2 and L1 H3 write the attended token's identity into the unembedding")
    assert z_matrix(chart(at, "analysis_wo_contributions")["data"][0]).shape == (8, 1)
    assert z_matrix(chart(at, "analysis_wo_token_map")["data"][0]).shape == (169, 169)
