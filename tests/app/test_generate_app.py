"""Watch a model write, driven with AppTest: the Generate view, logit attribution and head detectors in the app,
on the bundled causal model, offline."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.params import CAUSAL_EXAMPLE, DETECTORS
from mha_viz.pretrained import INDUCTION_MODEL
from tests.app.test_app import new_app, z_matrix

pytestmark = pytest.mark.usefixtures("one_thread")
CAUSAL = {"mode": "Pretrained", "model": INDUCTION_MODEL, "text": CAUSAL_EXAMPLE}


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


def values(data) -> np.ndarray:
    """A 1-D Plotly array, sent as a list or as typed-array bdata."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"]))
    return np.asarray(data)


def test_the_detector_kinds_are_the_librarys() -> None:
    from mha_viz.analysis import KINDS

    assert DETECTORS == KINDS


def test_generate_writes_step_by_step_and_the_induction_heads_carry_the_logit() -> None:
    at = new_app(**CAUSAL, view="Generate").run()
    assert not at.exception and not at.error and not at.warning
    assert at.button_group(key="view").options[0] == "Generate"  # a causal model opens on what it does best
    assert at.slider(key="gen_step").max == 8 and at.slider(key="gen_step").value == 1
    text = " ".join(m.value for m in at.markdown)
    assert "red-background[**big**]" in text  # "... the red fox saw a" -> "big", as in the prompt's first half
    probs = chart(at, "gen_probs")["data"][0]
    assert probs["y"][0].startswith("big") and probs["marker"]["color"][0] == "#d62728"  # the chosen token, in red
    dla = chart(at, "gen_dla")
    heads = z_matrix(dla["data"][0])  # (layers, heads)
    assert heads.shape == (2, 4) and heads[1].min() > heads[0].max()  # layer 1, the induction heads, wrote it
    assert any("✓ equal" in c.value for c in at.caption)  # the terms add up to the model's own logit
    attention = z_matrix(chart(at, "gen_attention")["data"][0])  # (layers*heads, keys)
    keys = chart(at, "gen_attention")["layout"]["xaxis"]["ticktext"]
    assert len(keys) == 17 and keys[6] == "big"  # <bos> + the prompt's 16 words
    assert (attention[4:].argmax(1) == 6).all()  # every layer-1 head looks at "big", the token after the earlier "a"
    at.button(key="step_next").click().run()
    assert at.slider(key="gen_step").value == 2 and at.query_params["gen_step"] in (["2"], "2")
    assert len(chart(at, "gen_attention")["layout"]["xaxis"]["ticktext"]) == 18  # the KV cache grew by one


def test_a_link_reproduces_a_sampled_generation_at_a_step() -> None:
    at = new_app(**CAUSAL, view="Generate", temperature="1.5", top_k="5", gen_seed="3", gen_step="4").run()
    assert not at.exception
    probs = values(chart(at, "gen_probs")["data"][0]["x"])
    assert np.count_nonzero(probs) <= 5  # top-k 5: only five tokens can be drawn
    copy = new_app(**CAUSAL, view="Generate", temperature="1.5", top_k="5", gen_seed="3", gen_step="4").run()
    assert chart(copy, "gen_probs") == chart(at, "gen_probs")  # sampling is reproducible from the seed
    assert " ".join(m.value for m in copy.markdown) == " ".join(m.value for m in at.markdown)


def test_a_prompt_too_long_for_the_model_is_explained() -> None:
    at = new_app(mode="Pretrained", model=INDUCTION_MODEL, view="Generate", new_tokens="64",
                 text=" ".join(["red fox"] * 40)).run()
    assert not at.exception and any("Cannot generate" in w.value for w in at.warning)


def test_an_encoder_has_no_generate_view_and_says_why_it_has_no_logit_attribution() -> None:
    at = new_app(mode="Pretrained", view="Generate").run()
    assert "Generate" not in at.button_group(key="view").options and at.button_group(key="view").value == "Heads"
    at = new_app(mode="Pretrained", view="Analysis", section="Logit attribution").run()
    assert not at.exception and "needs a causal language model" in at.info[0].value


def test_logit_attribution_in_analysis_adds_up_and_follows_the_token() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Logit attribution").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="dla_position").value == 16  # the last position
    assert "'big'" in chart(at, "analysis_dla")["layout"]["title"]["text"]
    assert any("≤ 1e-3 ✓" in c.value for c in at.caption)
    at.text_input(key="dla_token").set_value("owl").run()
    assert "'owl'" in chart(at, "analysis_dla")["layout"]["title"]["text"] and any("≤ 1e-3 ✓" in c.value for c in at.caption)
    at.text_input(key="dla_token").set_value("zebra").run()  # not in its vocabulary
    assert not at.exception and "Cannot split this logit" in at.warning[-1].value


def test_head_detectors_find_the_previous_token_and_induction_heads() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Head detectors").run()
    assert not at.exception and not at.error
    induction = z_matrix(chart(at, "analysis_detectors")["data"][0])
    assert induction.shape == (2, 4) and induction[1].max() >= 0.9 and induction[0].max() < 0.1
    table = at.dataframe[0].value
    assert list(table.columns) == ["layer", "head", *DETECTORS] and len(table) == 8
    at.radio(key="detector").set_value("previous").run()
    previous = z_matrix(chart(at, "analysis_detectors")["data"][0])
    assert previous[0].max() >= 0.9
    assert chart(at, "analysis_opened_head")["layout"]["title"]["text"] == "layer 0, head 0"


def test_the_bundled_causal_model_is_one_click_away() -> None:
    at = new_app(mode="Pretrained").run()
    at.button(key="pick_induction-2l").click().run()
    assert not at.exception
    assert at.text_input(key="model").value == INDUCTION_MODEL and at.text_area(key="text").value == CAUSAL_EXAMPLE
    assert at.button_group(key="view").value == "Generate" and at.get("plotly_chart")
    at.button(key="pick_all-MiniLM-L6-v2").click().run()
    assert at.text_input(key="model").value == "" and "Generate" not in at.button_group(key="view").options
