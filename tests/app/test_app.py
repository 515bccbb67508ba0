"""The Streamlit app, driven headlessly with streamlit.testing.v1.AppTest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz import MHAConfig
from mha_viz.sources import configurable_trace
from mha_viz.text import DEFAULT_TEXT
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import assert_draws_trace, drawn_heads, paints_heads, renderer_data

APP = str(Path(__file__).resolve().parents[2] / "page.py")  # the script app.py serves


def new_app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    return at


def figure(at: AppTest, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def test_default_page_shows_one_heatmap_per_head() -> None:
    at = new_app().run()
    assert not at.exception
    h = at.select_slider(key="h").value
    labels, weights = drawn_heads(at)
    assert len(labels) == len(weights) == h == 4
    _, T, S = weights.shape
    assert T == S  # self-attention: T x T
    # every row is a softmax: a row of S cells, each within 2e-5 of the trace's, sums to 1 within S * 2e-5
    np.testing.assert_allclose(weights.sum(axis=2), 1.0, atol=S * 2e-5)
    assert_draws_trace(at, configurable_trace(DEFAULT_TEXT, MHAConfig(64, 4)))  # the library's own trace


@pytest.mark.parametrize("d_model", [64, 48, 12, 768])
def test_every_position_of_the_head_slider_draws_heads(d_model: int) -> None:
    """The slider offers only the h that divide d_model, so no position lands on an error."""
    at = new_app(d_model=str(d_model)).run()
    slider = at.select_slider(key="h")
    offered = [int(o) for o in slider.options]
    assert offered == [h for h in range(1, 17) if d_model % h == 0]
    for h in offered:
        at.select_slider(key="h").set_value(h).run()
        assert not at.exception and not at.error, h
        assert len(drawn_heads(at)[1]) == h
        assert at.query_params.get("h", ["4"]) in ([str(h)], str(h))  # the default h = 4 stays out of the URL


def test_changing_d_model_keeps_h_valid_and_says_so() -> None:
    at = new_app(h="12", d_model="48").run()
    at.selectbox(key="d_model").set_value(64).run()  # 12 does not divide 64
    assert not at.exception and not at.error
    assert at.select_slider(key="h").value in (8, 16)
    assert any("does not divide d_model = 64" in c.value for c in at.caption)
    assert len(drawn_heads(at)[1]) == at.select_slider(key="h").value


def test_any_h_with_explicit_head_widths() -> None:
    at = new_app(d_k="8", d_v="8").run()
    assert [int(o) for o in at.select_slider(key="h").options] == list(range(1, 17))
    at.select_slider(key="h").set_value(5).run()
    assert not at.exception and len(drawn_heads(at)[1]) == 5


def test_invalid_head_count_from_a_link_is_explained_with_nearest_choices() -> None:
    at = new_app(h="5").run()
    assert not at.exception
    message = " ".join(e.value for e in at.error)
    assert "does not divide d_model = 64" in message and "12.8" in message
    assert not paints_heads(at)
    at.button(key="use_h_4").click().run()
    assert at.select_slider(key="h").value == 4
    assert len(drawn_heads(at)[1]) == 4


def test_query_params_are_reflected_in_the_widgets() -> None:
    at = new_app(h="2", d_model="32", seed="7", causal="true", text="the cat saw the dog").run()
    assert not at.exception
    assert at.select_slider(key="h").value == 2
    assert at.selectbox(key="d_model").value == 32
    assert at.number_input(key="seed").value == 7
    assert at.toggle(key="causal").value is True
    assert at.text_area(key="text").value == "the cat saw the dog"
    labels, weights = drawn_heads(at)
    assert labels == ["head 0", "head 1"]
    assert np.all(np.triu(weights[0], 1) == 0)  # causal: nothing above the diagonal (code 0 decodes to lo = 0 exactly)
    assert_draws_trace(at, configurable_trace("the cat saw the dog", MHAConfig(32, 2), seed=7, causal=True))


def test_advanced_section_is_built_only_when_open_and_keeps_its_values() -> None:
    at = new_app().run()
    assert not at.toggle and not at.number_input  # closed: its widgets are not even sent
    at.session_state["advanced_open"] = True
    at.run()
    at.toggle(key="causal").set_value(True).run()
    at.session_state["advanced_open"] = False
    at.run()
    assert not at.toggle and at.query_params["causal"] in ("true", ["true"])  # closed again, still causal
    z = drawn_heads(at)[1][0]
    assert np.all(np.triu(z, 1) == 0)


def test_invalid_query_params_fall_back_with_a_notice() -> None:
    at = new_app(h="abc", d_model="1000000000", seed="-3", bogus="1").run()
    assert not at.exception
    notices = " ".join(w.value for w in at.warning).replace("\\", "")  # shown verbatim: Markdown escaped
    assert "h='abc'" in notices and "d_model='1000000000'" in notices and "seed='-3'" in notices
    assert "bogus" in notices
    assert at.select_slider(key="h").value == 4 and at.selectbox(key="d_model").value == 64


@pytest.mark.parametrize("view", ["Heads", "Concat → W_O"])
def test_charts_are_sent_to_be_drawn_once(view: str) -> None:
    """No template and a fixed datarevision: Streamlit's post-mount Plotly.react then redraws nothing."""
    at = new_app(view=view).run()
    for chart in at.get("plotly_chart"):
        layout = json.loads(chart.proto.spec)["layout"]
        assert "template" not in layout and layout["datarevision"]
        assert chart.proto.theme == ""  # theme=None: the front end adds no template either
        assert all("automargin" in v for k, v in layout.items() if k.startswith(("xaxis", "yaxis")))


def test_repeated_tokens_keep_their_own_tick_labels() -> None:
    at = new_app(text="the cat and the dog and the bird").run()
    meta, _ = renderer_data(at, "heads")
    words = ["the", "cat", "and", "the", "dog", "and", "the", "bird"]
    assert meta["keys"] == meta["queries"] == [f"{i}: {w}" for i, w in enumerate(words)]  # one label per position


def test_cross_attention_uses_the_second_sentence_as_keys() -> None:
    at = new_app(cross="true", text="one two three", context="a b c d e").run()
    assert not at.exception
    _, weights = drawn_heads(at)
    assert weights.shape[1:] == (3, 5)


@pytest.mark.parametrize("view", ["One head", "Concat → W_O", "Shapes & cost", "Formulas"])
def test_every_view_renders(view: str) -> None:
    at = new_app(view=view).run()
    assert not at.exception
    if view == "One head":
        assert len(heatmaps(figure(at))) == 6
    elif view == "Concat → W_O":
        fig = figure(at)
        assert [z_matrix(t).shape for t in heatmaps(fig)] == [(13, 64), (64, 64), (13, 64)]
        verdicts = [m.value.split("**")[1] for m in at.markdown if m.value.startswith(("concat @", "sum of head"))]
        assert verdicts == ["equal ✓", "equal ✓"]  # a verdict, not a bare number
        assert not at.metric  # Markdown: no grey placeholder while the browser fetches st.metric's code
        assert all("equal within float32 rounding" in c.value for c in at.caption if "difference" in c.value)
    elif view == "Shapes & cost":
        cells = json.dumps([t.proto.SerializeToString().decode("latin-1") for t in at.table])
        assert "16,384" in cells  # 4 * 64^2 weights
    else:
        assert any("4 \\cdot 64^2" in latex.value for latex in at.latex)


def test_empty_text_gives_a_message_not_an_error() -> None:
    at = new_app(text="   ").run()
    assert not at.exception
    assert any("no visible characters" in i.value for i in at.info)


def test_every_analysis_section_renders_for_the_configurable_model() -> None:
    from mha_viz.params import SECTIONS

    at = new_app(view="Analysis").run()
    assert at.dataframe  # the sortable head-statistics table
    for section in SECTIONS:
        if section not in at.button_group(key="section").options:  # e.g. Composition: it needs two layers
            assert SECTIONS.part(section).needs, section
            continue
        at.button_group(key="section").set_value(section).run()
        if section == "Compare":
            at.text_input(key="other_text").set_value("The animal didn't cross the road because it was too wide").run()
        assert not at.exception and not at.error, section
        if section == "Rollout":  # one layer: nothing to chain, and the app says so
            assert any("single attention layer" in i.value for i in at.info)
        elif section in ("Logit attribution", "Head detectors", "Layer reach"):  # they need a model
            assert any("need" in i.value for i in at.info) and not at.get("plotly_chart")
        else:
            assert at.get("plotly_chart"), section


def test_export_offers_npz_json_and_an_html_report() -> None:
    at = new_app(h="2").run()
    assert not at.get("download_button")  # a closed "Export and share" builds nothing
    at.session_state["export_open"] = True
    at.run()
    buttons = at.get("download_button")
    assert [b.label.split(" (")[0] for b in buttons] == ["Trace", "Trace", "Report", *["Figure for a paper"] * 2]
    assert "h=2" in " ".join(c.value for c in at.code)  # the shareable link carries the state


def test_url_task_names_are_the_training_tasks() -> None:
    from mha_viz.params import TASK_NAMES
    from mha_viz.training import TASKS

    assert tuple(TASKS) == TASK_NAMES


@pytest.mark.slow
def test_train_mode_trains_and_opens_the_trained_layer_in_other_views() -> None:
    at = new_app(mode="Train", h="2", d_model="32", steps="60").run()
    assert not at.exception and not at.error
    assert paints_heads(at)
    at.button_group(key="view").set_value("Concat → W_O").run()
    assert not at.exception
    fig = figure(at)
    assert [z_matrix(t).shape[1] for t in heatmaps(fig)][:2] == [32, 32]  # concat [T, h*d_v], W_O [d_out, h*d_v]
