"""The app on the traced variants (tiny random gpt-oss and DiffLlama, loaded from a saved folder): DiffLlama's signed
weights on a colour scale centred at 0 with lambda in the caption, gpt-oss's sink column in the head statistics, and
GQA groups and sliding-window layers marked in the overview."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoModel

from tests.app.test_app_families import CONFIGS, app_with
from tests.renderer_json import shown_layer
from tests.tiny_causal import saved_random_models

NAMES = ("gpt_oss", "diffllama")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return saved_random_models({name: CONFIGS[name][0] for name in NAMES}, AutoModel, tmp_path_factory)



def coloraxis(at, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)["layout"]["coloraxis"]


def test_heads_view_draws_differential_weights_signed_and_softmax_weights_from_zero(folders):
    at = app_with(folders["diffllama"], "Heads")
    assert not at.exception and not at.error
    meta, maps = shown_layer(at)  # the renderer gets the signed values (it paints negatives red, positives blue)
    assert meta["lo"] < 0 and np.nanmin(maps) < 0 < np.nanmax(maps)
    caption = next(c.value for c in at.caption if "map₁ − λ·map₂" in c.value)
    assert "λ = " in caption
    softmax = app_with(folders["gpt_oss"], "Heads")  # ordinary softmax weights: 0 ... max, in Blues
    meta, maps = shown_layer(softmax)
    assert meta["lo"] == 0 and np.nanmin(maps) >= 0 and meta["paint"]["colorscale"][0][1] == [247, 251, 255]
    assert not any("map₁" in c.value for c in softmax.caption)


def test_head_statistics_show_the_sink_mass_of_gpt_oss(folders):
    at = app_with(folders["gpt_oss"], "Analysis")
    at.button_group(key="section").set_value("Head statistics").run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe)
    sink = np.asarray(table["sink"], dtype=float)
    assert sink.shape == (4,) and (sink > 0).all() and (sink < 1).all()
    assert any("sink logit per head" in c.value for c in at.caption)


def test_overview_marks_kv_groups_and_windowed_layers(folders):
    at = app_with(folders["gpt_oss"], "Overview")
    assert not at.exception and not at.error
    layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
    labels = [a["text"] for a in layout["annotations"]]
    assert "L0 (window 4)" in labels and "L1" in labels
    assert "H0<br>KV0" in labels and "H3<br>KV1" in labels
    assert len(layout["shapes"]) == 1  # one line between the two groups of query heads
    assert any("Grouped-query attention" in c.value for c in at.caption)


def test_overview_draws_differential_weights_signed(folders):
    at = app_with(folders["diffllama"], "Overview")
    assert not at.exception and not at.error
    layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
    assert layout["coloraxis"]["cmin"] < 0 and layout["coloraxis"]["cmin"] == -layout["coloraxis"]["cmax"]
    assert sum(a["text"].startswith("H") for a in layout["annotations"]) == 2  # the 2 differential heads, not 4 maps
