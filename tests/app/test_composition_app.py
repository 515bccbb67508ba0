"""The Composition section in the app: offered for models of two or more layers, drawn, shared in the URL, and on
the bundled induction model the previous-token head's row is highest at the induction heads' keys."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.params import CAUSAL_EXAMPLE
from mha_viz.pretrained import INDUCTION_MODEL
from tests.app.test_app import new_app, z_matrix

pytestmark = pytest.mark.usefixtures("one_thread")
CAUSAL = {"mode": "Pretrained", "model": INDUCTION_MODEL, "text": CAUSAL_EXAMPLE}


def chart(at: AppTest) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == "analysis_composition"]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


def test_offered_only_for_two_or_more_layers() -> None:
    at = new_app(view="Analysis").run()  # the configurable layer: one layer
    assert not at.exception and "Composition" not in at.button_group(key="section").options
    at = new_app(view="Analysis", section="Composition").run()  # asked for by a link: the first section instead
    assert not at.exception and at.button_group(key="section").value == "Head statistics"
    at = new_app(mode="Pretrained", view="Analysis").run()  # the bundled encoder: 6 layers
    assert not at.exception and "Composition" in at.button_group(key="section").options


def test_the_induction_models_k_composition_shows_the_previous_token_head_feeding_the_induction_heads() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Composition").run()
    assert not at.exception and not at.error and at.radio(key="composition").value == "k"
    fig = chart(at)
    z = z_matrix(fig["data"][0])  # rows: layer 0's heads writing; columns: layer 1's heads reading
    assert z.shape == (4, 4)
    assert list(fig["layout"]["yaxis"]["ticktext"]) == ["0.0", "0.1", "0.2", "0.3"]
    assert (np.argmax(z, axis=0) == 2).all()  # head 0.2, the previous-token head, highest in every column
    assert "random" in fig["data"][0]["colorbar"]["title"]["text"]
    assert fig["layout"]["title"]["text"] == "K-composition of mha-viz/induction-2l"
    words = " ".join(m.value for m in at.markdown)
    assert "previous-token head 0.2" in words and "mechanism of induction" in words
    assert "1.0, 1.1, 1.2, 1.3" in words
    at.radio(key="composition").set_value("v").run()
    assert not at.exception and at.query_params["composition"] in ("v", ["v"])
    assert "V-composition" in chart(at)["layout"]["title"]["text"]
    assert "mechanism of induction" not in " ".join(m.value for m in at.markdown)


def test_the_url_opens_a_kind_and_refuses_a_bad_one() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Composition", composition="q").run()
    assert not at.exception and at.radio(key="composition").value == "q"
    assert "Q-composition" in chart(at)["layout"]["title"]["text"]
    at = new_app(**CAUSAL, view="Analysis", section="Composition", composition="x").run()
    assert not at.exception and at.radio(key="composition").value == "k"
    texts = [e.value for kind in ("warning", "info", "caption", "markdown") for e in getattr(at, kind)]
    assert any("composition='x'" in t for t in texts), texts
