"""The app's pretrained mode on the bundled all-MiniLM-L6-v2, driven with AppTest."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_app import APP, figure, heatmaps, z_matrix
from tests.renderer_json import renderer_data, shown_layer, tokens

BOUND = 1.53e-5  # the uint16 codes' error in [0, 1] (mha_viz/layer_payload.py's docstring)


@pytest.fixture(scope="module")
def bundled_attentions() -> np.ndarray:
    from mha_viz.pretrained import load_model

    return load_model().attentions("the cat sat on the mat")  # (layers, heads, T, T)


def pretrained_app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["mode"] = "Pretrained"
    at.query_params["text"] = "the cat sat on the mat"
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def layer_control(at: AppTest) -> tuple[dict, int]:
    """The header of the layer control's data (the renderer, mha_viz.ui.heads_component) and its weights' bytes."""
    meta, values = renderer_data(at)
    return meta, 2 * values.size


@pytest.mark.parametrize("view", ["Heads", "Lines", "One head", "Overview", "Concat → W_O", "Analysis"])
def test_the_layer_has_one_control_whose_subtitle_names_it(view: str) -> None:
    """The layer buttons above the view are the one layer control (no sidebar slider saying another layer after a
    click); their subtitle, which a click rewrites in the browser, names the layer; in Heads they carry every
    layer's weights to switch the chart without the server."""
    at = pretrained_app(view=view, layer="2")
    assert not at.exception and not at.error
    assert not [s for s in at.slider if s.key == "layer" or s.label == "Layer"]
    header, weight_bytes = layer_control(at)
    assert header["active"] == 2 and header["layers"] == 6
    subtitle = str(2).join(header["subtitle"])
    assert "encoder layer 2 of 6 · 12 heads" in subtitle
    assert not any("layer 2 of 6" in c.value for c in at.caption)  # said once, by the control
    if view == "Heads":
        assert header["view"] == "heads" and weight_bytes == 2 * 6 * 12 * 8 * 8  # 6 layers x 12 heads x 8 x 8 tokens
        assert not at.get("plotly_chart") or "heads" not in [c.key for c in at.get("plotly_chart")]  # drawn once
    else:
        assert header["view"] == "buttons" and weight_bytes == 0  # a click asks the server at once


def test_pretrained_mode_shows_the_bundled_models_twelve_heads(bundled_attentions: np.ndarray) -> None:
    at = pretrained_app()
    assert not at.exception and not at.error
    meta, maps = shown_layer(at)
    assert len(maps) == 12
    assert tokens(meta["keys"]) == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    for h, z in enumerate(maps):  # the heatmaps are the model's own layer-0 attentions
        np.testing.assert_allclose(z, bundled_attentions[0, h], atol=BOUND)


def test_changing_the_layer_changes_the_figure(bundled_attentions: np.ndarray) -> None:
    at = pretrained_app()
    before = shown_layer(at)[1][0]
    at.session_state["layer"] = 5  # what the layer buttons' callback sets
    at.run()
    assert not at.exception
    after = shown_layer(at)[1][0]
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, bundled_attentions[5, 0], atol=BOUND)
    assert at.query_params["layer"] in ("5", ["5"])


def test_hiding_special_tokens_renormalises_rows() -> None:
    at = pretrained_app(special="false")
    meta, maps = shown_layer(at)
    assert tokens(meta["keys"]) == ["the", "cat", "sat", "on", "the", "mat"]
    for z in maps:
        np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=6 * BOUND)


@pytest.mark.parametrize("view", ["Overview", "One head", "Concat → W_O"])
def test_pretrained_views_render(view: str) -> None:
    at = pretrained_app(view=view, layer="2")
    assert not at.exception and not at.error
    fig = figure(at)
    if view == "Overview":
        assert len(heatmaps(fig)) == 6 * 12
    elif view == "One head":
        assert len(heatmaps(fig)) == 6
    else:
        assert [z_matrix(t).shape for t in heatmaps(fig)] == [(8, 384), (384, 384), (8, 384)]
        assert [m.value.split("**")[1] for m in at.markdown if "vs output  \n" in m.value] == ["equal ✓", "equal ✓"]


def test_long_input_is_truncated_with_a_notice() -> None:
    at = pretrained_app(text=" ".join(["word"] * 600))
    assert not at.exception
    assert any("cut off" in w.value for w in at.warning)
    assert len(shown_layer(at)[0]["keys"]) > 0


def test_out_of_range_layer_in_the_url_is_clamped_with_a_notice() -> None:
    at = pretrained_app(layer="40")
    assert not at.exception
    assert at.session_state["layer"] == 5 and layer_control(at)[0]["active"] == 5
    assert any("URL parameter layer='40' is not valid here (" in w.value and "6 encoder layers, 0 to 5); using 5"
               in w.value for w in at.warning)


def test_unloadable_model_gives_a_message() -> None:
    at = pretrained_app()
    at.text_input(key="model").set_value("../../etc/passwd").run()
    assert not at.exception
    assert any("Could not load the model" in e.value for e in at.error)
    assert "model" not in at.query_params  # a value the URL parser would refuse is never written


@pytest.fixture(scope="module")
def model_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Tiny random BART (encoder-decoder), LLaMA (grouped-query) and MPNet (not adapted) saved as local folders."""
    import torch
    from transformers import AutoTokenizer, BartConfig, BartModel, LlamaConfig, LlamaModel, MPNetConfig, MPNetModel

    from mha_viz.pretrained import bundled_model_dir

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    small = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    configs = {
        "bart": (BartModel, BartConfig(vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=64, bos_token_id=101,
                                       decoder_start_token_id=102)),
        "llama": (LlamaModel, LlamaConfig(vocab_size=30522, num_key_value_heads=2, max_position_embeddings=64, **small)),
        "mpnet": (MPNetModel, MPNetConfig(vocab_size=30522, max_position_embeddings=64, **small)),
    }
    folders = {}
    for name, (cls, config) in configs.items():
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(name)
        cls(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[name] = str(folder)
    return folders


def test_encoder_decoder_offers_encoder_decoder_and_cross_attention(model_folders: dict[str, str]) -> None:
    at = pretrained_app()
    at.text_input(key="model").set_value(model_folders["bart"]).run()
    assert not at.exception and not at.error
    assert at.radio(key="part").options == ["Encoder self-attention", "Decoder self-attention (causal)", "Cross-attention"]
    at.text_area(key="context").set_value("a dog ran").run()
    at.radio(key="part").set_value("cross").run()
    assert not at.exception
    meta, maps = shown_layer(at)
    assert len(maps) == 4
    assert tokens(meta["queries"])[1:] == ["[CLS]", "a", "dog", "ran"]  # decoder queries (shifted right)
    assert tokens(meta["keys"]) == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]  # encoder keys
    at.radio(key="part").set_value("decoder").run()
    z = shown_layer(at)[1][0]
    assert np.all(np.triu(z, 1) == 0)  # the decoder never looks ahead


def test_grouped_query_heads_are_labelled_with_their_kv_head(model_folders: dict[str, str]) -> None:
    at = pretrained_app()
    at.text_input(key="model").set_value(model_folders["llama"]).run()
    assert not at.exception and not at.error
    titles = shown_layer(at)[0]["labels"]
    assert titles == ["head 0 (K/V head 0)", "head 1 (K/V head 0)", "head 2 (K/V head 1)", "head 3 (K/V head 1)"]


def test_unadapted_architecture_shows_what_the_generic_path_holds(model_folders: dict[str, str]) -> None:
    """MPNet has no adapter: the generic path gives weights, head outputs, concat, W_O and output, not Q, K, V."""
    at = pretrained_app()
    at.text_input(key="model").set_value(model_folders["mpnet"]).run()
    assert not at.exception and not at.error
    assert len(shown_layer(at)[1]) == 4
    assert any("holds the attention weights, head outputs, concat, W_O and output" in i.value for i in at.info)
    at.button_group(key="view").set_value("Concat → W_O").run()
    assert not at.exception and at.get("plotly_chart")  # drawn from the captured concat and W_O
    assert [m.value.split("**")[1] for m in at.markdown if "vs output  \n" in m.value] == ["equal ✓", "equal ✓"]
    at.button_group(key="view").set_value("One head").run()
    assert not at.exception and not at.get("plotly_chart")
    assert any("needs queries, keys, values, scores" in i.value for i in at.info)
    at.button_group(key="view").set_value("Analysis").run()
    at.button_group(key="section").set_value("Knockout").run()
    assert not at.exception and not at.error and at.get("plotly_chart")  # knockout works on the generic path


@pytest.mark.slow
def test_every_analysis_section_renders_for_the_bundled_model() -> None:
    from mha_viz.params import SECTIONS

    at = pretrained_app(view="Analysis", layer="1")
    for section in SECTIONS:
        at.button_group(key="section").set_value(section).run()
        if section == "Compare":
            at.text_input(key="other_text").set_value("The animal didn't cross the road because it was too wide").run()
        assert not at.exception and not at.error, section
        if section == "Logit attribution":  # an encoder predicts no next token, and the app says so
            assert any("needs a causal language model" in i.value for i in at.info)
        else:
            assert at.get("plotly_chart"), section
