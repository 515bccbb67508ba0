"""The analysis view driven headlessly: a configurable layer, and the bundled MiniLM."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.params import SECTIONS
from tests.app.test_app import heatmaps, z_matrix


def configurable_app() -> None:
    """Four heads (b_O = 0) on one sentence; the compare section traces other sentences with the same layer."""
    from mha_viz import MHAConfig
    from mha_viz.sources import ConfigurableSource
    from mha_viz.ui.analysis import analysis_view

    source = ConfigurableSource("the cat sat on the mat and the dog sat on the cat", MHAConfig(32, 4))
    analysis_view(source.trace(0), source, name="configurable")


def bundled_app() -> None:
    from mha_viz.sources import ModelSource
    from mha_viz.ui.analysis import analysis_view
    from tests.unit.test_analysis_pretrained import bundled

    source = ModelSource(bundled(), "the cat sat on the mat", "encoder")
    analysis_view(source.trace(2), source, layer=2, name="minilm")


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, f"expected one chart {key!r}, got {[c.key for c in at.get('plotly_chart')]}"
    return json.loads(matches[0].proto.spec)


def labelled_values(at: AppTest) -> dict[str, str]:
    """The labelled values the page shows (views.labelled_value: "label  \\n**value**" in Markdown)."""
    pairs = (m.value.split("  \n**", 1) for m in at.markdown if "  \n**" in m.value and m.value.endswith("**"))
    return {label: value[:-2] for label, value in pairs}


def show(at: AppTest, section: str) -> AppTest:
    at.segmented_control(key="section").set_value(section).run()
    assert not at.exception and not at.error
    return at


@pytest.fixture
def app() -> AppTest:
    at = AppTest.from_function(configurable_app, default_timeout=60).run()
    assert not at.exception
    return at


def test_head_statistics_table_opens_the_picked_head(app: AppTest) -> None:
    table = app.dataframe[0].value
    assert list(table["head"]) == [0, 1, 2, 3]
    assert {"entropy", "confidence", "first", "special", "previous", "same", "next", "distance"} <= set(table)
    assert ((table["entropy"] > 0) & (table["entropy"] <= 1)).all()
    assert len(heatmaps(chart(app, "analysis_stats_chart"))) == 1
    assert chart(app, "analysis_stats_head")["layout"]["title"]["text"] == "head 0"  # a row is always picked
    app.session_state["analysis_stats"] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    app.run()
    opened = chart(app, "analysis_stats_head")
    assert opened["layout"]["title"]["text"] == "head 2" and app.session_state["head"] == 2
    first = chart(app, "analysis_stats_chart")
    assert len(heatmaps(opened)) == 1 and first["data"][1]["type"] == "bar"  # distance beside the shares


def test_every_section_renders(app: AppTest) -> None:
    for section in SECTIONS:
        show(app, section)
    show(app, "Rollout")
    assert "single attention layer" in app.info[0].value and not app.get("plotly_chart")
    show(app, "Redundancy")
    D = z_matrix(heatmaps(chart(app, "analysis_divergence"))[0])
    assert D.shape == (4, 4) and np.allclose(np.diag(D), 0) and np.allclose(D, D.T)
    show(app, "Concat vs sum")
    assert len(labelled_values(app)) == 3 and chart(app, "analysis_concat_sum")["data"][0]["type"] == "bar"
    assert not app.metric  # no grey placeholder while the browser fetches st.metric's code


def test_concat_vs_sum_makes_its_point_on_the_default_page() -> None:
    """The app's default layer and sentence: the section says what summing loses, not that its fit says nothing."""
    from tests.app.test_app import new_app

    at = new_app(view="Analysis", section="Concat vs sum").run()
    assert not at.exception and not at.error
    said = [e.value for e in (*at.warning, *at.info, *at.markdown)]
    assert not any("says nothing" in text for text in said)
    verdict = [text for text in said if text.startswith("**Summing loses.**")]
    assert len(verdict) == 1 and "misses" in verdict[0]
    fitted = float(labelled_values(at)["sum · best shared W' (fitted to every head's term)"].rstrip("%"))
    assert fitted > 10 and not at.metric


def test_norm_switch_and_knockout(app: AppTest) -> None:
    show(app, "Contribution")
    raw = [z_matrix(t) for t in heatmaps(chart(app, "analysis_weight_heads"))]
    assert len(raw) == 4 and np.allclose([r.sum(1) for r in raw], 1, atol=1e-5)
    app.toggle(key="norm").set_value(True).run()
    normed = [z_matrix(t) for t in heatmaps(chart(app, "analysis_norm_heads"))]
    assert not np.allclose([n.sum(1) for n in normed], 1, atol=1e-3)  # weights times value lengths
    assert len(heatmaps(chart(app, "analysis_contributions"))) == 1
    show(app, "Knockout")
    ranking = chart(app, "analysis_ranking")["data"]
    assert len(ranking) == 1 and len(ranking[0]["x"]) == 4
    app.multiselect(key="off").set_value([0, 1, 2, 3]).run()
    assert not app.exception
    assert labelled_values(app)["Change in this layer's output"] == "100.0%"  # only b_O = 0 is left
    assert len(chart(app, "analysis_knockout")["data"]) == 1


def test_compare_with_the_same_and_with_another_sentence(app: AppTest) -> None:
    show(app, "Compare")
    app.text_input(key="other_text").set_value("the cat sat on the mat and the dog sat on the cat").run()
    maps = heatmaps(chart(app, "analysis_compare"))
    assert len(maps) == 3 and np.allclose(z_matrix(maps[2]), 0)  # same tokens, same layer: no difference
    app.text_input(key="other_text").set_value("a dog ran").run()
    assert "differ in number (13 vs 3)" in app.info[0].value
    assert len(heatmaps(chart(app, "analysis_compare"))) == 2  # side by side, no difference map


@pytest.mark.slow
def test_bundled_model_sections_render() -> None:
    at = AppTest.from_function(bundled_app, default_timeout=120).run()
    assert not at.exception
    for section in SECTIONS:
        show(at, section)
    show(at, "Rollout")
    rollout = z_matrix(heatmaps(chart(at, "analysis_rollout"))[0])
    assert rollout.shape == (8, 8) and np.allclose(rollout.sum(1), 1, atol=1e-5)
    show(at, "Knockout")
    assert "encoder model" in at.info[0].value  # no next-token view, with the reason
    at.multiselect(key="off").set_value([0, 3]).run()
    assert not at.exception
    assert list(labelled_values(at)) == ["Change in this layer's output", "Change in the final hidden state"]
    assert len(chart(at, "analysis_knockout")["data"]) == 2  # per token: layer output and final hidden state


def bundled_app_comparing_models() -> None:
    """The bundled MiniLM at layer 2; "" (or "bundled") is itself, anything else loads that model."""
    from mha_viz.pretrained import load_model
    from mha_viz.sources import ModelSource
    from mha_viz.ui.analysis import analysis_view
    from tests.unit.test_analysis_pretrained import bundled

    source = ModelSource(bundled(), "the cat sat on the mat", "encoder")
    analysis_view(source.trace(2), source, layer=2, name="minilm",
                  other_model=lambda name: source.model if name == "" else load_model(name))


@pytest.fixture(scope="module")
def tiny_bert_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random 2-layer, 4-head BERT with the bundled model's tokenizer: same tokens, other heads."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from mha_viz.pretrained import bundled_model_dir

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-bert")
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(folder)
    return str(folder)


def test_compare_with_another_model(tiny_bert_folder: str) -> None:
    at = AppTest.from_function(bundled_app_comparing_models, default_timeout=120).run()
    show(at, "Compare")
    at.radio(key="compare_with").set_value("Another model").run()
    assert not at.exception and not at.warning
    assert "Type another model" in at.info[0].value and not at.get("plotly_chart")  # not the model itself
    at.text_input(key="other_model").set_value("bundled").run()
    assert "is the model shown above" in at.info[0].value and not at.get("plotly_chart")
    at.text_input(key="other_model").set_value(tiny_bert_folder).run()
    assert not at.exception and not at.warning
    assert "number of heads differs (12 vs 4)" in at.info[0].value
    maps = heatmaps(chart(at, "analysis_compare"))
    assert len(maps) == 2 and z_matrix(maps[1]).shape == (8, 8)  # side by side: the tiny model's last layer
    assert "layer 1" in json.dumps(chart(at, "analysis_compare")["layout"])
    at.text_input(key="other_model").set_value("/no/such/folder").run()
    assert not at.exception and "Could not load the other model" in at.warning[0].value


def test_hosted_demo_compares_only_with_allowed_models(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.app.test_app import APP

    monkeypatch.setenv("MHA_VIZ_ALLOWED_MODELS", "bundled")
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(mode="Pretrained", view="Analysis", text="the cat sat on the mat")
    at.run()
    show(at, "Compare")
    at.radio(key="compare_with").set_value("Another model").run()
    at.text_input(key="other_model").set_value("gpt2").run()
    assert not at.exception
    assert "this demo only loads the bundled model" in at.warning[0].value
