"""The measures of lessons 1, 2 and 4 give the numbers they claim, checked against the library computed directly, and
those numbers make the answer each lesson calls right true."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz.analysis import detect_heads
from mha_viz.analysis.concat_sum import concat_vs_sum
from mha_viz.analysis.contribution import contribution_norms
from mha_viz.analysis.head_stats import trace_head_stats
from mha_viz.analysis.readout import trained_readout
from mha_viz.config import MHAConfig
from mha_viz.lessons import LESSON_FILES, lesson
from mha_viz.lessons.measures import MEASURES
from mha_viz.params import EXAMPLES, ViewState, parse_query
from mha_viz.pretrained import load_model
from mha_viz.sources import configurable_trace
from mha_viz.training import trained_layer


def step_state(file: str, step: int) -> tuple[ViewState, dict]:
    """The app state of a lesson's step (from 1) and what its measure gives there."""
    s = lesson(LESSON_FILES.index(file) + 1).steps[step - 1]
    state, notices = parse_query(s.state)
    assert not notices
    return state, MEASURES[s.question.measure](state)


def test_it_row_is_the_row_of_it_in_the_random_one_head_layer() -> None:
    state, m = step_state("one_head.toml", 1)
    assert state.text == EXAMPLES["Ambiguous 'it'"] and state.h == 1 and state.weights == "random"
    trace = configurable_trace(state.text, MHAConfig(64, 1), seed=0)
    row = trace.weights[0, trace.query_tokens.index("it")]
    assert m["row_sum"] == pytest.approx(1.0, abs=1e-5) and m["n_keys"] == len(row) == 13
    assert m["w_animal"] == pytest.approx(row[trace.key_tokens.index("animal")])
    assert m["last_word"] == "tired" and m["w_last"] == pytest.approx(row[-1])
    assert m["top_key"] == trace.key_tokens[int(row.argmax())] and m["w_top"] == pytest.approx(row.max())
    assert m["w_animal"] < 0.5 and m["w_last"] < 0.5  # chance: neither relation gets the row


def test_it_row_refuses_a_sentence_without_it() -> None:
    with pytest.raises(ValueError, match="'it'"):
        MEASURES["it_row"](ViewState(text="the cat sat on the mat", h=1))


def test_the_one_trained_head_splits_between_the_relations_and_loses_accuracy() -> None:
    _, m = step_state("one_head.toml", 2)
    layer = trained_layer("prev-first", 1, 64)
    assert layer.relations == ("previous", "first")
    assert m["mass_previous"] == pytest.approx(layer.scores[0, 0]) and m["mass_first"] == pytest.approx(layer.scores[0, 1])
    assert 0.3 < m["mass_previous"] < 0.7 and 0.3 < m["mass_first"] < 0.7  # the answer: split between both
    assert m["accuracy"] == pytest.approx(layer.mean_accuracy) and m["accuracy"] < 0.95  # well below 100%
    assert m["accuracy_previous"] == pytest.approx(layer.accuracy[0])


def test_trained_accuracy_is_each_shipped_layers_mean_accuracy() -> None:
    _, m = step_state("specialise.toml", 2)
    for h in (1, 2, 4):
        assert m[f"accuracy_h{h}"] == pytest.approx(trained_layer("prev-first", h, 64).mean_accuracy)
    assert m["accuracy_h1"] < m["accuracy_h2"] == m["accuracy_h4"] == pytest.approx(1.0)  # jumps, then stays


def test_four_trained_heads_take_one_relation_each_two_per_relation() -> None:
    _, m = step_state("specialise.toml", 1)
    scores = trained_layer("prev-first", 4, 64).scores  # (H, R)
    assert m["heads_on_previous"] == int((scores.argmax(1) == 0).sum()) == 2
    assert m["heads_on_first"] == 2
    for head, relation in ((0, "previous"), (1, "first"), (2, "previous"), (3, "first")):  # as the explanation names them
        assert m[f"head{head}_{relation}"] == pytest.approx(scores[head, ("previous", "first").index(relation)])
        assert m[f"head{head}_{relation}"] > 0.95


@pytest.fixture(scope="module")
def minilm_scores() -> dict[str, np.ndarray]:
    return detect_heads(load_model(), seed=0)


def test_minilm_has_a_strong_previous_token_head_and_a_weaker_same_token_head(minilm_scores) -> None:
    _, m = step_state("specialise.toml", 3)
    prev, dup = minilm_scores["previous"], minilm_scores["duplicate"]
    assert (m["previous_layer"], m["previous_head"]) == np.unravel_index(prev.argmax(), prev.shape)
    assert m["previous_score"] == pytest.approx(prev.max()) and m["previous_score"] > 0.9  # almost all of its weight
    assert (m["duplicate_layer"], m["duplicate_head"]) == np.unravel_index(dup.argmax(), dup.shape)
    assert m["duplicate_score"] == pytest.approx(dup.max()) and 0.3 < m["duplicate_score"] < 0.7  # "about half"
    assert m["duplicate_layer"] != m["previous_layer"]  # "in another layer"
    assert step_state("specialise.toml", 4)[1] == m  # the same-token step quotes the same probe


def test_minilm_layer_4_has_a_head_on_the_first_token() -> None:
    state, m = step_state("specialise.toml", 5)
    model = load_model()
    trace = model.trace(state.text, 4)
    first = trace_head_stats(trace, model.tokenizer.all_special_tokens).first
    assert trace.key_tokens[0] == m["first_token"] == "[CLS]"
    assert m["head"] == int(first.argmax()) == state.head  # the step opens that head
    assert m["first_share"] == pytest.approx(first.max()) and m["first_share"] > 0.8  # "about 0.9"
    assert m["uniform"] == pytest.approx(1 / len(trace.key_tokens)) and m["uniform"] < 0.1
    assert m["median_share"] == pytest.approx(np.median(first))


def test_the_causal_model_has_its_previous_token_head_in_layer_0_and_induction_heads_in_layer_1() -> None:
    state, m = step_state("specialise.toml", 6)
    scores = detect_heads(load_model(state.model), seed=0)
    prev, ind = scores["previous"], scores["induction"]
    assert m["previous_layer"] == 0 and m["previous_score"] == pytest.approx(prev.max()) and m["previous_score"] > 0.9
    assert m["previous_next"] == pytest.approx(np.sort(prev.ravel())[-2]) and m["previous_next"] < 0.2
    assert m["induction_layer"] == 1 and m["induction_layer_min"] == pytest.approx(ind[1].min())
    assert m["induction_layer_min"] > 0.9


def test_concat_widths_wo_path_concat_sum_and_contributions_match_the_trained_layer() -> None:
    trace = trained_layer("prev-first", 4, 64).trace(None)
    _, widths = step_state("concat.toml", 1)
    assert widths == {"h": 4, "d_v": 16, "width": 64, "d_model": 64} == {
        "h": trace.num_heads, "d_v": trace.d_v, "width": trace.concat.shape[-1], "d_model": trace.output.shape[-1]}
    _, path = step_state("concat.toml", 2)
    errors = trace.check_wo_path()
    assert (path["concat_error"], path["sum_error"]) == tuple(errors.values())
    assert path["max_error"] <= path["tolerance"] == trace.rounding_tolerance()  # "yes: it splits per head"
    _, cs = step_state("concat.toml", 4)
    r = concat_vs_sum(trace)
    assert (cs["fitted_error"], cs["mean_error"], cs["concat_error"]) == (r.fitted_error, r.mean_error, r.concat_error)
    assert not cs["fits_any"] and cs["fitted_error"] > 0.1 and cs["concat_error"] < 1e-5  # tens of percent lost
    _, c = step_state("concat.toml", 5)
    norms = contribution_norms(trace).mean(-1)
    assert [c[f"contribution{h}"] for h in range(4)] == pytest.approx(norms)
    assert c["top_head"] == int(norms.argmax()) and c["ratio"] == pytest.approx(norms.max() / norms.min())
    assert c["ratio"] < 2  # "all four heads add comparable amounts"
    assert step_state("concat.toml", 6)[1] == c


def test_wo_readout_is_trained_readout_of_the_two_head_layer() -> None:
    """Lesson 4's W_O step: each head's block writes its own relation's answer, numbers from trained_readout."""
    layer = trained_layer("prev-first", 2, 64)
    r = trained_readout(layer)
    _, m = step_state("concat.toml", 3)
    for head in range(2):
        for a, answer in enumerate(r.answers):
            assert m[f"head{head}_{answer}"] == pytest.approx(r.contributions[head, a], abs=0.05)
    assert m["head0_previous"] > 10 and abs(m["head0_first"]) < 0.5  # "+15.4 to previous, about 0 to first"
    assert m["head1_first"] > 10 and abs(m["head1_previous"]) < 0.5  # "head 1 the reverse"
    assert (m["head0_attends"], m["head1_attends"]) == ("previous", "first")
    assert m["head0_copies"] == m["head1_copies"] == m["vocab"] == len(r.vocab)  # every letter to itself


def test_measures_of_random_weights_follow_the_seed() -> None:
    a = MEASURES["concat_sum"](ViewState(h=4, seed=0))
    b = MEASURES["concat_sum"](ViewState(h=4, seed=1))
    direct = concat_vs_sum(configurable_trace(ViewState().text, MHAConfig(64, 4), seed=1))
    assert b["fitted_error"] == direct.fitted_error != a["fitted_error"]
