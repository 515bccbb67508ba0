"""The Diff variant in Configurable mode: every even h draws h/2 signed heads and the Two maps view, an odd h from a
link is explained, One head and Concat → W_O work; and the Two maps view on a tiny random DiffLlama."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoModel

from mha_viz import MHAConfig
from mha_viz.sources import configurable_trace
from mha_viz.variants import LayerVariant
from tests.app.test_gqa_app import new_app, texts, titles
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import assert_draws_trace, drawn_heads, paints_heads, renderer_data

TEXT = "the cat sat on the mat"


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_every_even_h_draws_half_as_many_signed_heads() -> None:
    at = new_app(d_model="64", text=TEXT).run()
    at.segmented_control(key="variant").set_value("diff").run()
    offered = list(at.select_slider(key="h").options)
    evens = [int(h) for h in offered if int(h) % 2 == 0]
    assert evens == [2, 4, 8, 16]
    for h in evens:
        at.select_slider(key="h").set_value(h).run()
        assert not at.exception and not at.error, h
        weights = drawn_heads(at)[1]
        assert len(weights) == h // 2, h
        # signed weights: the renderer paints a signed scale centred at 0 when a weight is below 0
        assert renderer_data(at, "heads")[0]["lo"] < 0 and np.nanmin(weights) < 0, h
        assert_draws_trace(at, configurable_trace(TEXT, MHAConfig(64, h), variant=LayerVariant("diff")))
        assert "map₁ − λ·map₂" in texts(at) and f"{h // 2} differential heads" in texts(at)


@pytest.mark.parametrize("params", [{"h": "1"}, {"h": "3", "d_k": "8", "d_v": "8"}])
def test_an_odd_h_from_a_link_is_explained(params: dict[str, str]) -> None:
    at = new_app(variant="diff", text=TEXT, **params).run()
    assert not at.exception
    assert any("h must be even" in e.value for e in at.error)
    assert not paints_heads(at)


@pytest.mark.parametrize("causal", ["0", "1"])
def test_two_maps_view_draws_both_maps_their_difference_and_the_common_mode(causal: str) -> None:
    at = new_app(variant="diff", h="8", view="Two maps", text=TEXT, causal=causal).run()
    assert not at.exception and not at.error
    maps, common, keys, demo = charts(at)
    panels = heatmaps(maps)
    assert len(panels) == 3 and any("λ·map₂" in t for t in titles(maps))
    z1, z2, diff = (z_matrix(p) for p in panels)
    assert np.allclose(diff, z1 - z2, atol=1e-5) and (diff < 0).any()
    assert np.allclose(z1.sum(-1), 1, atol=1e-5)
    axis = maps["layout"]["coloraxis"]
    assert axis["colorscale"][0][1] != "rgb(247,251,255)" and axis["cmin"] == -axis["cmax"]
    assert len(common["data"]) == 3 and len(common["data"][0]["x"]) == 4  # cancelled, kept, negative per head
    assert len(keys["data"]) == 3
    first, _, weights = (z_matrix(p) for p in heatmaps(demo))  # the demonstration: the shared first token cancels
    assert np.allclose(first[:, 0], 0.8, atol=1e-3) and np.allclose(weights[:, 0], 0, atol=1e-3)
    assert "differential amplifier" in texts(at) and "λ = " in texts(at)
    at.selectbox(key="head").set_value(3).run()
    assert not at.exception and "Differential head 3" in charts(at)[0]["layout"]["title"]["text"]


def test_two_maps_is_offered_only_for_diff() -> None:
    at = new_app(variant="diff", h="4", text=TEXT).run()
    assert "Two maps" in at.segmented_control(key="view").options
    at.segmented_control(key="variant").set_value("mha").run()
    assert not at.exception and "Two maps" not in at.segmented_control(key="view").options


@pytest.mark.parametrize("view", ["One head", "Concat → W_O"])
def test_one_head_and_concat_work(view: str) -> None:
    at = new_app(variant="diff", h="4", view=view, text=TEXT).run()
    assert not at.exception and not at.error
    assert at.get("plotly_chart")


def test_two_maps_on_a_real_diffllama(tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.app.test_app_families import CONFIGS, app_with
    from tests.tiny_causal import saved_random_models

    folder = saved_random_models({"diffllama": CONFIGS["diffllama"][0]}, AutoModel, tmp_path_factory)["diffllama"]
    at = app_with(folder, "Heads")
    assert "Two maps" in at.segmented_control(key="view").options
    at.segmented_control(key="view").set_value("Two maps").run()
    assert not at.exception and not at.error
    panels = heatmaps(charts(at)[0])
    assert len(panels) == 3
    z1, z2, diff = (z_matrix(p) for p in panels)
    assert np.allclose(diff, z1 - z2, atol=1e-5)
