"""The bundled hybrid mha-viz/hybrid-2l in the app (AppTest): its sidebar button opens Heads on a short haystack, the
layer buttons name each layer's kind, the Gated DeltaNet layer is drawn as its signed mixing matrices, and every view
and analysis section draws or says why, never an exception."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.pretrained import HYBRID_MODEL, load_model
from mha_viz.ui.pretrained import HYBRID_EXAMPLE
from tests.app.test_app_families import APP
from tests.app.test_recall_app import assert_every_view_and_section_draws_or_says_why, opened_by_button
from tests.renderer_json import shown_layer


@pytest.fixture(scope="module")
def opened() -> AppTest:
    return opened_by_button("pick_hybrid-2l")


def test_its_button_opens_heads_on_a_short_haystack_with_each_layers_kind(opened: AppTest) -> None:
    at = opened
    assert not at.exception and not at.error
    assert at.text_input(key="model").value == HYBRID_MODEL and at.text_area(key="text").value == HYBRID_EXAMPLE
    assert at.button_group(key="view").value == "Heads"
    meta, _ = shown_layer(at)
    assert meta["layer_marks"] == ["lin", "attn"]


def test_the_linear_layer_is_drawn_as_its_signed_mixing_matrices() -> None:
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(mode="Pretrained", model=HYBRID_MODEL, text=HYBRID_EXAMPLE, view="Heads", layer="0")
    at.run()
    assert not at.exception and not at.error
    meta, drawn = shown_layer(at)
    trace = load_model(HYBRID_MODEL).trace(HYBRID_EXAMPLE, 0)
    step = (meta["hi"] - meta["lo"]) / 65534  # one uint16 code: the payload's resolution (mha_viz/layer_payload.py)
    np.testing.assert_allclose(drawn, trace.weights, rtol=0, atol=step + 1e-6)
    assert trace.kind == "linear" and trace.weights.min() < 0  # signed: the delta rule subtracts
    assert any("mixing matrix" in c.value and "centred at 0" in c.value for c in at.caption)


@pytest.mark.slow
def test_every_view_and_section_draws_or_says_why(opened: AppTest) -> None:
    assert_every_view_and_section_draws_or_says_why(opened)
