"""The app's Heads view of a 4096-token text (AppTest): the overview, the exact zoom, its URL, compare, One head."""

from __future__ import annotations

import json

import pytest

from mha_viz.limits import MAX_LONG_TOKENS
from mha_viz.text import tokenize
from mha_viz.ui.views import ZOOM_HEADS
from tests.app.test_app import new_app
from tests.plotly_json import heatmaps, z_matrix


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
    overview, zoom = chart(at, "heads_long"), chart(at, "heads_zoom")
    assert len(heatmaps(overview)) == 12 and len(heatmaps(zoom)) == ZOOM_HEADS == 4  # the zoom: the first 4 heads
    assert z_matrix(heatmaps(overview)[0]).shape == (128, 128) and heatmaps(overview)[0]["dx"] == 32
    at.slider(key="zoom").set_value(2000).run()
    at.slider(key="zoom_k").set_value(1500).run()
    assert at.query_params["zoom"] == "2000" and at.query_params["zoom_k"] == "1500"
    first = heatmaps(chart(at, "heads_zoom"))[0]
    assert (first["y0"], first["x0"]) == (2000, 1500)
    marks = chart(at, "heads_long")["layout"]["shapes"]  # the overview's red squares moved with the zoom
    assert len(marks) == 12 and all((m["y0"], m["x0"], m["y1"]) == (1999.5, 1499.5, 2127.5) for m in marks)
    rows = z_matrix(first)
    assert rows.shape == (128, 128) and 0 < rows.sum(-1).max() <= 1.0 + 1e-5  # a part of each softmax row
    at.multiselect(key="compare").set_value([7, 11]).run()
    assert [t["name"] for t in heatmaps(chart(at, "heads_zoom"))] == ["head 7", "head 11"]
    at.segmented_control(key="view").set_value("One head").run()
    assert not at.exception and any("first 512 tokens of 4096" in c.value for c in at.caption)
