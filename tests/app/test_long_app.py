"""The app's Heads view of a 4096-token text (AppTest): the overview, the exact zoom, its URL, compare, One head."""

from __future__ import annotations

import json

import pytest

from mha_viz.limits import MAX_LONG_TOKENS
from mha_viz.text import tokenize
from mha_viz.ui.views import ZOOM_HEADS
from tests.app.test_app import new_app
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import renderer_data


def chart(at, key: str) -> dict:
    (match,) = [c for c in at.get("plotly_chart") if c.key == key]
    return json.loads(match.proto.spec)


@pytest.mark.slow
def test_the_app_draws_a_long_text_as_overview_and_zoom() -> None:
    at = new_app(h="12", d_model="768").run()
    at.selectbox(key="example").set_value(f"A long text ({MAX_LONG_TOKENS} tokens)").run()
    assert not at.exception
    assert len(tokenize(at.text_area(key="text").value)) == MAX_LONG_TOKENS
    assert any("4096 tokens" in e.value for e in at.info)
    meta, overview = renderer_data(at, "heads_long")  # the overview, painted by the renderer
    zoom = chart(at, "heads_zoom")
    assert overview.shape == (1, 12, 128, 128) and len(heatmaps(zoom)) == ZOOM_HEADS == 4  # the zoom: the first 4
    assert meta["labels"] == [f"head {h}" for h in range(12)] and meta["zoomable"]
    assert meta["queries"][0].startswith("0-31: ") and meta["keys"][-1].startswith("4064-4095: ")  # blocks of 32
    at.slider(key="zoom").set_value(2000).run()
    at.slider(key="zoom_k").set_value(1500).run()
    assert at.query_params["zoom"] == "2000" and at.query_params["zoom_k"] == "1500"
    first = heatmaps(chart(at, "heads_zoom"))[0]
    assert (first["y0"], first["x0"]) == (2000, 1500)
    # the overview's red squares moved with the zoom, in its cells of 32 x 32 positions
    assert renderer_data(at, "heads_long")[0]["mark"] == [2000 / 32, 1500 / 32, 2128 / 32, 1628 / 32]
    rows = z_matrix(first)
    assert rows.shape == (128, 128) and 0 < rows.sum(-1).max() <= 1.0 + 1e-5  # a part of each softmax row
    at.multiselect(key="compare").set_value([7, 11]).run()
    assert [t["name"] for t in heatmaps(chart(at, "heads_zoom"))] == ["head 7", "head 11"]
    at.segmented_control(key="view").set_value("One head").run()
    assert not at.exception and any("first 512 tokens of 4096" in c.value for c in at.caption)
