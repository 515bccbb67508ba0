"""The Patching section and knockout's ablation choice, driven with AppTest on the bundled causal model (offline)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.analysis import PAIRS, activation_patching
from mha_viz.params import CAUSAL_EXAMPLE, SECTIONS
from mha_viz.pretrained import INDUCTION_MODEL
from tests.app.test_app import new_app, z_matrix
from tests.app.test_generate_app import values

pytestmark = pytest.mark.usefixtures("one_thread")
CAUSAL = {"mode": "Pretrained", "model": INDUCTION_MODEL, "text": CAUSAL_EXAMPLE}
PAIR = "induction: first follower changes"


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


def query(at: AppTest, key: str) -> str:
    value = at.query_params[key]
    return value[0] if isinstance(value, list) else value


def test_patching_is_offered_for_causal_models_only() -> None:
    assert SECTIONS.part("Patching").needs == ("causal_lm",)
    at = new_app(mode="Pretrained", view="Analysis").run()  # the bundled MiniLM: an encoder
    assert not at.exception and "Patching" not in at.segmented_control(key="section").options
    at = new_app(**CAUSAL, view="Analysis").run()
    assert "Patching" in at.segmented_control(key="section").options


def test_the_induction_pair_draws_and_the_layer_one_heads_restore_the_answer() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Patching").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="patch_pair").value == PAIR  # the model's first ready-made pair, filled in
    assert at.text_input(key="patch_corrupted").value == PAIRS[PAIR].corrupted
    fig = chart(at, "analysis_patching")
    scores = z_matrix(fig["data"][0])
    assert scores.shape == (2, 4) and (scores[1] > 0.1).all()  # every induction head carries part of it
    assert fig["data"][0]["zmin"] == -1 and fig["data"][0]["zmax"] == 1
    at.radio(key="patch_site").set_value("residual").run()
    resid = z_matrix(chart(at, "analysis_patching")["data"][0])
    assert resid.shape == (2, 8) and resid[0, 2] == pytest.approx(1.0, abs=1e-4)  # the changed word, at layer 0
    at.radio(key="patch_direction").set_value("noise").run()
    assert z_matrix(chart(at, "analysis_patching")["data"][0])[0, 2] == pytest.approx(0.0, abs=1e-4)
    for key, value in (("patch_site", "residual"), ("patch_direction", "noise"), ("patch_pair", PAIR),
                       ("patch_answer", "fox"), ("patch_wrong", "cat")):
        assert query(at, key) == value
    assert at.get("download_button")  # the scores as CSV


def test_a_shared_link_opens_the_same_patching_question() -> None:
    pair = "induction: longer repeat"
    at = new_app(**CAUSAL, view="Analysis", section="Patching", patch_pair="", patch_clean=PAIRS[pair].clean,
                 patch_corrupted=PAIRS[pair].corrupted, patch_answer="fish", patch_wrong="owl", patch_site="head_position",
                 patch_direction="denoise").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="patch_pair").value == ""  # a typed pair
    z = z_matrix(chart(at, "analysis_patching")["data"][0])
    assert z.shape == (8, 12)  # (layer, head) rows x positions
    np.testing.assert_allclose(z[:, :4], 0.0, atol=1e-4)  # before the changed word nothing differs


def test_bad_input_gets_a_message_not_an_exception() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Patching", patch_pair="", patch_clean="red fox blue",
                 patch_corrupted="red cat", patch_answer="fox", patch_wrong="cat").run()
    assert not at.exception
    assert any("same number of tokens" in w.value for w in at.warning)
    at.text_input(key="patch_corrupted").set_value("red cat blue").run()
    at.text_input(key="patch_answer").set_value("zebra").run()
    assert not at.exception and any("not a token" in w.value for w in at.warning)
    at.text_input(key="patch_wrong").set_value("").run()
    assert not at.exception and any("wrong token" in i.value for i in at.info)
    at = new_app(**CAUSAL, view="Analysis", section="Patching", patch_site="mlp").run()  # a bad URL value
    assert not at.exception and at.radio(key="patch_site").value == "head"


def test_knockout_says_which_ablation_it_used() -> None:
    at = new_app(**CAUSAL, view="Analysis", section="Knockout", layer="0", off="2").run()
    assert not at.exception and not at.error
    assert any("zero ablation" in c.value for c in at.caption)
    zero = values(chart(at, "analysis_knockout")["data"][1]["y"])
    at.radio(key="ablation").set_value("resample").run()
    assert any("Resample ablation takes" in i.value for i in at.info)
    at.text_input(key="ablation_text").set_value("red cat blue sky green tree").run()
    assert any("same token length" in w.value for w in at.warning)
    at.text_input(key="ablation_text").set_value(CAUSAL_EXAMPLE.replace("fox", "cat")).run()
    assert not at.exception and any("resample ablation" in c.value for c in at.caption)
    assert query(at, "ablation") == "resample" and query(at, "ablation_text") == CAUSAL_EXAMPLE.replace("fox", "cat")
    resampled = values(chart(at, "analysis_knockout")["data"][1]["y"])
    assert not np.allclose(zero, resampled)
    at.radio(key="ablation").set_value("mean").run()
    assert not at.exception and any("mean ablation" in c.value for c in at.caption)


def test_a_question_asked_again_is_not_computed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import mha_viz.ui.patching as ui

    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["direction"])
        return activation_patching(*args, **kwargs)

    monkeypatch.setattr(ui, "activation_patching", counted)
    at = new_app(**CAUSAL, view="Analysis", section="Patching", patch_pair="induction: repeated word changes").run()
    assert not at.exception and at.text_input(key="patch_wrong").value == "sky"
    at.radio(key="patch_direction").set_value("noise").run()
    at.radio(key="patch_direction").set_value("denoise").run()
    at.text_input(key="patch_answer").set_value("fox").run()  # unchanged: a rerun
    assert not at.exception and calls == ["denoise", "noise"]
