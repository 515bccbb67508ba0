"""The first hour of a new user, driven with AppTest: each defect of issue 11 that a browser is not needed for."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_app import APP, figure, new_app
from tests.app.test_export_app import deferred  # noqa: F401 - fixture
from tests.renderer_json import renderer_data, shown_layer


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


def url(at: AppTest) -> dict[str, str]:
    return {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}


def relaunch(at: AppTest) -> AppTest:
    """A new session opened from the first one's URL: what a copied link shows."""
    return new_app(**url(at)).run()


def test_a_model_that_fails_to_load_says_so_in_the_main_area_with_the_way_back(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = new_app(mode="Pretrained", model="mha-viz-tests/no-such-model").run()
    assert not at.exception
    assert any("could not be downloaded" in e.value for e in at.main.error)  # not only in the sidebar
    at.button(key="to_bundled").click().run()
    assert not at.exception and not at.main.error
    assert at.text_input(key="model").value == "" and len(shown_layer(at)[1]) == 12


def test_a_link_reproduces_the_analysis_state() -> None:
    at = new_app(view="Analysis").run()
    at.button_group(key="section").set_value("Knockout").run()
    at.multiselect(key="off").set_value([0, 2]).run()
    assert url(at)["section"] == "Knockout" and url(at)["off"] == "0,2"
    copy = relaunch(at)
    assert copy.button_group(key="section").value == "Knockout" and list(copy.multiselect(key="off").value) == [0, 2]
    assert chart(copy, "analysis_knockout") == chart(at, "analysis_knockout")
    at.button_group(key="section").set_value("Compare").run()
    at.text_input(key="other_text").set_value("The animal didn't cross the road because it was too wide").run()
    at.selectbox(key="compare_head").set_value(1).run()
    copy = relaunch(at)
    assert copy.text_input(key="other_text").value.endswith("too wide") and copy.selectbox(key="compare_head").value == 1
    assert chart(copy, "analysis_compare") == chart(at, "analysis_compare")


def test_a_link_reproduces_the_pretrained_comparison_with_another_model() -> None:
    at = new_app(mode="Pretrained", view="Analysis", section="Compare", compare_with="Another model",
                 other_model="bundled", layer="2").run()
    assert not at.exception
    assert at.radio(key="compare_with").value == "Another model" and at.text_input(key="other_model").value == "bundled"
    assert "is the model shown above" in at.info[0].value


@pytest.mark.slow
def test_train_mode_has_export_and_share_and_its_link_reproduces_it() -> None:
    at = new_app(mode="Train", h="2", d_model="32", steps="40").run()
    at.session_state["export_open"] = True
    at.run()
    assert not at.exception and len(at.get("download_button")) == 5  # trace x 2, report, figure x 2
    link = " ".join(c.value for c in at.code)
    assert all(part in link for part in ("mode=Train", "h=2", "d_model=32", "steps=40"))
    at.button_group(key="view").set_value("One head").run()
    copy = relaunch(at)
    assert copy.button_group(key="view").value == "One head" and chart(copy, "head_steps") == chart(at, "head_steps")


@pytest.mark.parametrize(("params", "files"), [
    ({"view": "One head"}, ["-heads", "-steps", "-q0-k0", "-W_QKV"]),
    ({"view": "Analysis", "section": "Redundancy"}, ["-heads", "-redundancy"]),
    ({"mode": "Pretrained", "view": "Overview", "compare": "3"}, ["-heads", "-overview", "-layer0"]),
    ({"mode": "Train", "h": "2", "d_model": "32", "steps": "40"}, ["-heads", "-relations", "-heads", "-relations",
                                                                     "-curves"]),
])
def test_the_report_holds_what_is_on_screen(deferred, params: dict, files: list[str]) -> None:  # noqa: F811
    at = new_app(**params).run()
    at.session_state["export_open"] = True
    at.run()
    assert not at.exception
    report = next(fn for fn, mime, _ in deferred if mime == "text/html")()
    captions = re.findall(r"<figcaption>([^<]*)</figcaption>", report)
    assert [next(f for f in files if c.endswith(f)) for c in captions] == files, captions
    assert report.count("Plotly.newPlot(") == len(files)
    assert report.count('"automargin":true') > 0  # labels get the room they need, as in the app


@pytest.mark.parametrize("view", ["One head", "Concat → W_O", "Heads", "Lines"])
def test_hiding_special_tokens_applies_to_every_view(view: str) -> None:
    at = new_app(mode="Pretrained", special="false", view=view, text="the cat sat on the mat").run()
    assert not at.exception
    if view == "Heads":  # the renderer paints the heads, from the labels the server sends
        labels = " ".join(shown_layer(at)[0]["queries"])
    else:
        fig = figure(at)
        labels = " ".join(" ".join(axis.get("ticktext", [])) for k, axis in fig["layout"].items() if k.startswith("yaxis"))
        labels += " ".join(json.dumps(t.get("text", "")) for t in fig["data"])
    assert "cat" in labels and "[CLS]" not in labels and "[SEP]" not in labels


def test_text_the_model_does_not_know_gets_a_warning() -> None:
    at = new_app(mode="Pretrained", text="我喜欢学习机器学习，也喜欢注意力").run()
    assert any("unknown to sentence-transformers/all-MiniLM-L6-v2" in w.value for w in at.warning)
    at = new_app(mode="Pretrained", text="مرحبا بالعالم كيف حالك اليوم").run()
    assert any("one character at a time" in i.value for i in at.info)
    at = new_app(mode="Pretrained", text="The cat sat on the mat").run()
    assert not at.warning and not [i for i in at.info if "character" in i.value]


def test_formulas_number_heads_from_zero_and_name_the_inputs_x_and_c() -> None:
    at = new_app(view="Formulas").run()
    latex = " ".join(x.value for x in at.latex)
    assert r"h = 0, \dots, 3" in latex and r"\mathrm{head}_0" in latex and r"\sum_{h=0}^{3}" in latex
    assert "K_h = X W^K_h" in latex and "16{,}384" in latex and r"\{,}" not in latex
    at = new_app(view="Formulas", cross="true", context="a b c").run()
    assert "K_h = C W^K_h" in " ".join(x.value for x in at.latex)
    at = new_app(view="One head").run()
    titles = [a["text"] for a in figure(at)["layout"]["annotations"]]
    assert "K = X W_K  [13×16]" in titles and not any("c W" in t for t in titles)


def test_token_labels_are_all_shown_while_there_is_room_else_every_nth_and_the_page_says_so() -> None:
    words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
            "seventeen eighteen nineteen twenty"
    positioned = [f"{i}: {w}" for i, w in enumerate(words.split())]
    for h in ("2", "8"):  # the renderer gets every token's label (it writes them where a cell is tall enough)
        meta, _ = renderer_data(new_app(text=words, h=h).run(), "heads")
        assert meta["queries"] == meta["keys"] == positioned, h


def test_png_downloads_are_named_after_the_view_and_keep_the_figure_size() -> None:
    at = new_app(h="8", d_model="128").run()
    at.multiselect(key="compare").set_value([0, 1]).run()  # the heads grid is the renderer's; the comparison is Plotly
    compare = chart(at, "compare_heads")
    (element,) = [c for c in at.get("plotly_chart") if c.key == "compare_heads"]
    config = json.loads(element.proto.config)["toImageButtonOptions"]
    assert config["filename"] == "configurable-h8-d128-compare"
    assert config["height"] == compare["layout"]["height"] and config["width"] >= 1000


def test_one_head_explains_one_score_and_draws_the_projections() -> None:
    at = new_app(view="One head", head="2", q_pos="9", k_pos="1").run()
    assert not at.exception
    terms = chart(at, "score_terms")
    products = np.array(terms["data"][2]["y"]["bdata"] if isinstance(terms["data"][2]["y"], dict) else terms["data"][2]["y"])
    assert len(terms["data"]) == 3 and products.size > 0
    text = " ".join(m.value for m in at.markdown)
    assert "query 9 (**it**)" in text and "key 1 (**animal**)" in text and "weight" in text
    projections = chart(at, "projections")
    assert [t["type"] for t in projections["data"]] == ["heatmap"] * 3
    assert [a["text"].split("  ")[0] for a in projections["layout"]["annotations"]] == ["W_Q[2]", "W_K[2]", "W_V[2]"]


def test_hostile_analysis_params_fall_back_with_notices() -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in {"view": "Analysis", "section": "Nope", "off": "0,99", "threshold": "nan", "pick": "z1",
                       "compare_head": "-1", "other_model": "../../etc"}.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception
    notices = " ".join(w.value for w in at.warning).replace("\\", "")
    for key in ("section", "off", "threshold", "pick", "compare_head", "other_model"):
        assert f"{key}=" in notices, key
