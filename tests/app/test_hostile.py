"""Hostile input: every case gets a clear message and bounded work, never a traceback or a crash."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

import mha_viz
from mha_viz.params import DEFAULTS, PARSERS, ViewState, parse_query
from tests.app.test_app import APP
from tests.renderer_json import paints_heads, renderer_data, shown_layer

XSS = "<script>alert(1)</script> <img src=x onerror=alert(1)>"
TEXTS = {
    "empty": "",
    "spaces": "   \t  ",
    "100k characters": "attention " * 10_000,
    "emoji and ZWJ": "👩‍👩‍👧 family 👍🏽 🇮🇳 ok",
    "right-to-left": "مرحبا بالعالم שלום עולם",
    "CJK": "注意力机制很有用 注意",
    "Devanagari and Hinglish": "नमस्ते दुनिया yaar ye attention kya hai",
    "control characters": "a\x00b\x07c\u202ed\x1b[31m e",
    "HTML and JavaScript": XSS,
}


def run(params: dict[str, str], mode: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    if mode:
        at.query_params["mode"] = mode
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["Configurable", "Pretrained"])
@pytest.mark.parametrize("name", list(TEXTS))
def test_hostile_text_is_shown_as_text_with_bounded_work(name: str, mode: str) -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["mode"] = mode
    at.run()
    at.text_area(key="text").set_value(TEXTS[name]).run()
    assert not at.exception and not at.error
    if not TEXTS[name].strip():
        assert any("no visible characters" in i.value for i in at.info)
        return
    # the renderer paints the heads (a pretrained model's layer control, the configurable layer's Heads view or a
    # long input's overview); it writes labels as text (tests/unit/test_renderer.py)
    if mode == "Pretrained":
        meta, maps = shown_layer(at)
    else:
        (key,) = [e.key for e in at.get("bidi_component") if e.key in ("heads", "heads_long")]
        meta, layers = renderer_data(at, key)
        maps = layers[0]
    assert len(maps) and len(meta["queries"]) == maps.shape[1]
    T = len(meta["queries"])  # a long input's overview: a label per block of positions
    assert T <= 512  # bounded: the 100k-character text is cut to the token limit


PARAMS = {
    "h=0": {"h": "0"},
    "h=-3": {"h": "-3"},
    "h=abc": {"h": "abc"},
    "d_model=10**9": {"d_model": str(10**9)},
    "huge seed": {"seed": "9" * 5000},
    "unknown key": {"evil": "1"},
    "markdown in a value": {"h": "[x](javascript:alert(1))"},
    "path as model": {"mode": "Pretrained", "model": "../../etc/passwd"},
    "layer=-1": {"mode": "Pretrained", "layer": "-1"},
    "view=<script>": {"view": "<script>"},
}


@pytest.mark.parametrize("name", list(PARAMS))
def test_hostile_query_params_fall_back_with_a_notice(name: str) -> None:
    at = run(PARAMS[name])
    assert not at.exception and not at.error
    notices = [w.value for w in at.warning]
    assert len(notices) == 1
    assert "javascript" not in notices[0] or "\\[x\\]" in notices[0]  # Markdown escaped: no live link
    assert paints_heads(at)  # the page still works, on defaults
    state, _ = parse_query({k: v for k, v in PARAMS[name].items()})
    assert state.h == DEFAULTS.h and state.d_model == DEFAULTS.d_model and state.model == DEFAULTS.model


def test_a_model_that_needs_remote_code_is_refused_without_running_it(tmp_path) -> None:
    marker = tmp_path / "ran.txt"
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "evil-model", "architectures": ["EvilModel"],
         "auto_map": {"AutoConfig": "modeling_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}}
    ))
    (tmp_path / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    with pytest.raises((mha_viz.pretrained.ModelLoadError, ValueError)):
        mha_viz.load_model(tmp_path)
    at = run({}, mode="Pretrained")
    at.text_input(key="model").set_value(str(tmp_path)).run()
    assert not at.exception
    assert any("Could not load the model" in e.value for e in at.error)
    assert not marker.exists()


def test_hosted_demo_loads_only_allowed_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MHA_VIZ_ALLOWED_MODELS", "bundled")
    at = run({"model": "gpt2"}, mode="Pretrained")
    assert not at.exception and not at.error
    assert at.selectbox(key="model").options == ["sentence-transformers/all-MiniLM-L6-v2 (bundled)"]
    assert any("only loads the models listed" in w.value for w in at.warning)
    assert len(shown_layer(at)[1]) == 12


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*PARSERS, "x", ""]), st.text(max_size=40), max_size=6))
def test_any_query_params_parse_to_a_valid_state(params: dict[str, str]) -> None:
    state, notices = parse_query(params)
    assert isinstance(state, ViewState) and len(notices) <= len(params)
    assert 1 <= state.h <= 16 and state.d_model in (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300), st.integers(1, 4), st.booleans())
def test_any_text_traces_or_says_it_has_no_tokens(text: str, h: int, causal: bool) -> None:
    try:
        tokens, x = mha_viz.embed_text(text, 16, max_tokens=64)
    except ValueError as err:
        assert "no tokens" in str(err) and not mha_viz.tokenize(text)
        return
    trace = mha_viz.MultiHeadAttention(16, [1, 2, 4, 8][h - 1], seed=0)(x, query_tokens=tokens, causal=causal)
    np.testing.assert_allclose(trace.weights.sum(-1), 1.0, atol=1e-5)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200), st.sampled_from(["1", "2", "5", "x", "-1"]))
def test_the_page_survives_random_text_and_params(text: str, h: str) -> None:
    at = run({"h": h, "text": text})
    assert not at.exception


# ------------------------------------------------------------------------------------------ crafted clicks

NAN, INF = float("nan"), float("inf")
CRAFTED = [-1, -(10**12), 10**12, NAN, INF, -INF, 2.5, True, None, "3", "x", [1], {"a": 1}]


def test_values_a_crafted_browser_sends_back_are_checked_like_url_values() -> None:
    """The layer control's value, a heatmap click's customdata, a long overview's clicked cell and a picked row:
    anything but a whole number in range is refused (None), as the URL's own values are."""
    from mha_viz.figures.lines import picked_token
    from mha_viz.figures.overview import picked_head
    from mha_viz.figures.score_attribution import picked_cell
    from mha_viz.limits import MAX_LAYERS, client_int
    from mha_viz.ui.heads_component import picked, zoom_cell

    for bad in CRAFTED:
        assert client_int(bad, 0, 15) is None
        assert picked({"layer": bad}, "layer", MAX_LAYERS) is None
        assert picked_head([{"customdata": [bad, 0]}]) is None and picked_head([{"customdata": [0, bad]}]) is None
        assert picked_token([{"customdata": ["query", bad]}]) is None
        assert picked_cell([{"customdata": [bad, 0]}], 16, 16) is None and picked_cell([{"customdata": [0, bad]}], 16, 16) is None
        assert picked_cell([{"customdata": {"0": bad, "1": 0}}], 16, 16) is None
        assert zoom_cell({"zoom": {"row": bad, "col": 0}}, 16, 16) is None
        assert zoom_cell({"zoom": {"row": 0, "col": bad}}, 16, 16) is None
    for bad_shape in (None, "x", 3, [], [3], [1, 2, 3]):
        assert picked(bad_shape, "layer", MAX_LAYERS) is None and picked_head(bad_shape) is None
        assert zoom_cell(bad_shape, 16, 16) is None and zoom_cell({"zoom": bad_shape}, 16, 16) is None
    assert picked_token("points") is None and picked_head([None, "x", {"customdata": "ab"}]) is None
    for bad_shape in (None, "x", 3, [], [3], [1, 2, 3], {"0": 1}, {"0": 1, "2": 3}):
        assert picked_cell([{"customdata": bad_shape}], 16, 16) is None and picked_cell(bad_shape, 16, 16) is None
    # the pattern's cell as a browser sends it (a typed array's row as an object) and as a list
    assert picked_cell([{"customdata": {"0": 5, "1": 2}}], 16, 16) == (5, 2) == picked_cell([{"customdata": [5, 2.0]}], 16, 16)
    assert picked_cell([{"customdata": [16, 2]}], 16, 16) is None  # past the text's end
    # what a real browser sends still works (JSON numbers may come as floats)
    assert picked({"layer": 3}, "layer", MAX_LAYERS) == 3 and picked({"layer": 3.0}, "layer", MAX_LAYERS) == 3
    assert picked({"layer": MAX_LAYERS}, "layer", MAX_LAYERS) is None
    assert picked_head([{"customdata": [2, 5]}]) == (2, 5) and picked_token([{"customdata": ["key", 7]}]) == ("key", 7)
    assert picked_head([{"customdata": [1, 40]}]) == (1, 40)  # a pretrained model may have more heads than a link names
    assert zoom_cell({"zoom": {"row": 15, "col": 0.0}}, 16, 16) == (15, 0)
    assert zoom_cell({"zoom": {"row": 16, "col": 0}}, 16, 16) is None  # past the grid's last cell


INJECT = '''
import runpy

import streamlit as st

crafted = st.session_state.pop("_crafted", None)
if crafted is not None:
    st.session_state.update(crafted)  # what a callback (layer switch, click, box, row) writes before the run
runpy.run_path({page!r}, run_name="__main__")
'''


@pytest.mark.parametrize(("params", "crafted"), [
    ({"mode": "Pretrained"}, [{"layer": -1}, {"layer": NAN}, {"layer": "x"}, {"layer": 10**9}, {"layer": 2.5}]),
    ({"mode": "Pretrained", "view": "Overview"}, [{"compare": (-1,)}, {"compare": (99,)}, {"compare": ["a"]},
                                                 {"compare": (1, NAN, 2)}, {"compare": "zz"},
                                                 {"layer": -3, "compare": (NAN,)}]),
    ({"view": "Lines"}, [{"pick": "q-1"}, {"pick": "qx"}, {"pick": 5}, {"head": -1}, {"head": NAN}]),
    ({"text": " ".join(["many words"] * 200)}, [{"zoom": -8}, {"zoom": NAN}, {"zoom_k": 10**12}, {"zoom": "0"}]),
])
@pytest.mark.slow
def test_crafted_values_written_by_clicks_leave_a_clean_page_and_later_reruns_fine(tmp_path, params, crafted) -> None:
    """Each value is written into the session as the layer switch's, a click's or a box's callback would (before
    the run, past the widgets' own checks): the page is drawn without an error, and so is the next rerun."""
    from tests.app.test_app import APP

    script = tmp_path / "crafted_page.py"
    script.write_text(INJECT.format(page=str(APP)))
    at = AppTest.from_file(str(script), default_timeout=180)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception
    for values in crafted:
        at.session_state["_crafted"] = values
        at.run()
        assert not at.exception, values
        assert paints_heads(at), values
        at.run()  # the next rerun too
        assert not at.exception and paints_heads(at), values
        for key in values:
            assert clean(key, at.session_state[key]), (key, at.session_state[key])


def clean(key: str, value: object) -> bool:
    """A session value the views can use: whole numbers from 0, a tuple of them, or a token pick like q3."""
    if key == "compare":
        return isinstance(value, (tuple, list)) and all(clean("head", h) for h in value)
    if key == "pick":
        return value == "" or (isinstance(value, str) and value[0] in "qk" and value[1:].isdigit())
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
