"""The Patching section and knockout's ablation choice, driven with AppTest on the bundled causal model (offline)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.analysis import PAIRS, activation_patching, path_patching_scan
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


def test_prompts_longer_than_the_model_reads_are_cut_with_a_notice() -> None:
    """induction-2l has 128 positions: prompts of 141 tokens are patched on their first 128, and the page says so."""
    clean = " ".join(["red fox blue sky green tree red"] * 20)  # <bos> + 140 words
    at = new_app(**CAUSAL, view="Analysis", section="Patching", patch_pair="", patch_clean=clean,
                 patch_corrupted=clean.replace("fox", "cat"), patch_answer="fox", patch_wrong="cat").run()
    assert not at.exception and not at.error
    notices = [w.value for w in at.warning if "longer than the model reads" in w.value]
    assert len(notices) == 1 and "only their first 128 of 141 tokens were patched" in notices[0]
    assert z_matrix(chart(at, "analysis_patching")["data"][0]).shape == (2, 4)
    from mha_viz.pretrained import load_model
    from mha_viz.ui.patching import _csv

    result = activation_patching(load_model(INDUCTION_MODEL), clean, clean.replace("fox", "cat"), answer="fox",
                                 wrong="cat")
    assert f"# {result.notice}" in _csv(result).splitlines()[:4]  # the CSV download says it too


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


# ---- path patching --------------------------------------------------------------------------------------------
LONGER = "induction: longer repeat"
PATH = {**CAUSAL, "view": "Analysis", "section": "Patching", "patch_pair": LONGER, "patch_site": "path"}


def test_path_patching_names_the_previous_token_head_as_the_induction_heads_key_sender(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import mha_viz.ui.patching as ui

    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["through"])
        return path_patching_scan(*args, **kwargs)

    monkeypatch.setattr(ui, "path_patching_scan", counted)
    at = new_app(**PATH).run()
    assert not at.exception and not at.error
    assert at.multiselect(key="patch_receivers").value == ["1.0", "1.1", "1.2", "1.3"]  # the detected induction heads
    assert at.radio(key="patch_through").value == "k"
    fig = chart(at, "analysis_patching")
    z = z_matrix(fig["data"][0])
    assert z.shape == (2, 4) and np.isnan(z[1]).all()  # no path from layer 1 into layer 1
    assert np.nanargmax(z) == 2 and z[0, 2] == pytest.approx(0.916, abs=0.01)  # 0.2, the previous-token head
    assert "keys (1.0, 1.1, 1.2, 1.3)" in fig["layout"]["title"]["text"]
    assert [(a["y"], a["text"]) for a in fig["layout"]["annotations"]] == [(1, "no path to the receivers")]
    words = [m.value for m in at.markdown if "Top sender" in m.value]
    assert len(words) == 1 and "head 0.2" in words[0] and "restores 0.92" in words[0]
    at.radio(key="patch_through").set_value("q").run()  # through the queries 0.2 carries nothing
    q = z_matrix(chart(at, "analysis_patching")["data"][0])
    assert abs(q[0, 2]) < 0.1 and not any("head 0.2**" in m.value for m in at.markdown)
    at.radio(key="patch_through").set_value("k").run()  # asked before: from the cache
    assert not at.exception and calls == ["k", "q"]
    assert query(at, "patch_receivers") == "1.0,1.1,1.2,1.3" and query(at, "patch_site") == "path"
    assert query(at, "patch_pair") == LONGER


def test_a_shared_link_opens_the_same_receivers_and_input() -> None:
    at = new_app(**PATH, patch_receivers="1.3,1.1", patch_through="v", patch_direction="noise").run()
    assert not at.exception and not at.error
    assert at.multiselect(key="patch_receivers").value == ["1.3", "1.1"] and at.radio(key="patch_through").value == "v"
    fig = chart(at, "analysis_patching")
    assert "values (1.1, 1.3)" in fig["layout"]["title"]["text"] and "corrupted activation" in fig["layout"]["title"]["text"]
    at.multiselect(key="patch_receivers").unselect("1.3").run()
    assert not at.exception and "values (1.1)" in chart(at, "analysis_patching")["layout"]["title"]["text"]
    assert query(at, "patch_receivers") == "1.1" and query(at, "patch_through") == "v"
    assert query(at, "patch_direction") == "noise"


def test_bad_receivers_from_a_link_get_a_notice_not_an_exception() -> None:
    at = new_app(**PATH, patch_receivers="1.9,1.2").run()  # 1.9: the model has 4 heads a layer
    assert not at.exception
    assert any("1.9 are not heads" in w.value for w in at.warning)
    assert at.multiselect(key="patch_receivers").value == ["1.2"]
    assert "keys (1.2)" in chart(at, "analysis_patching")["layout"]["title"]["text"]
    at = new_app(**PATH, patch_receivers="one.two", patch_through="w").run()  # not heads at all: the URL's notice
    assert not at.exception
    assert any("receivers='one.two' is not valid" in w.value for w in at.warning)
    assert any("through='w' is not valid" in w.value for w in at.warning)
    assert at.multiselect(key="patch_receivers").value == ["1.0", "1.1", "1.2", "1.3"]  # the defaults
    at = new_app(**PATH, patch_receivers="0.1").run()  # layer 0 has no earlier heads
    assert not at.exception and any("no earlier heads" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if c.key == "analysis_patching"]


def test_a_path_scan_over_the_pass_limit_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import mha_viz.ui.patching as ui

    monkeypatch.setattr(ui, "MAX_PATCH_PASSES", 6)  # 4 senders x 2 passes
    at = new_app(**PATH).run()
    assert not at.exception
    assert any("needs 8 patched passes" in w.value and "earlier layer" in w.value for w in at.warning)


def test_the_path_scan_exports_with_its_receivers() -> None:
    from mha_viz.pretrained import load_model
    from mha_viz.ui.patching import _csv

    p = PAIRS[LONGER]
    result = path_patching_scan(load_model(INDUCTION_MODEL), p.clean, p.corrupted, receivers=[(1, 0), (1, 2)], through="k",
                                answer=p.answer, wrong=p.wrong, direction="denoise")
    text = _csv(result)
    assert "receivers: 1.0 1.2; through: k" in text
    rows = np.loadtxt(io.StringIO(text), delimiter=",")
    np.testing.assert_allclose(rows, result.scores, atol=1e-5, equal_nan=True)
