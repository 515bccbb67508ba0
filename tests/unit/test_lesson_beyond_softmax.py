"""Lesson 8 (beyond softmax) on the bundled hybrid: each measure against a direct computation through the library or
the model, and against the answer the lesson calls right."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from mha_viz.analysis import mixer_stats
from mha_viz.lessons import LESSON_FILES, Step, lesson
from mha_viz.lessons.measures import MEASURES, RECALL_LENGTH, RECALL_NEEDLES, RECALL_SEQUENCES
from mha_viz.params import ViewState, parse_query
from mha_viz.training.recall import recall_accuracy
from mha_viz.ui.pretrained import HYBRID_EXAMPLE
from mha_viz.variants_cost import PRESETS, kv_cache_bytes
from tests.unit.test_hybrid_model import bundled_hybrid

pytestmark = pytest.mark.usefixtures("one_thread")
NUMBER = LESSON_FILES.index("beyond_softmax.toml") + 1


def step(n: int) -> Step:
    return lesson(NUMBER).steps[n - 1]


def state_of(s: Step) -> ViewState:
    state, notices = parse_query(s.state)
    assert not notices
    return state


def right(s: Step) -> str:
    return s.question.choices[s.question.answer]


def test_it_is_lesson_8_on_the_hybrid_opened_on_its_own_example() -> None:
    assert NUMBER == 8 and lesson(NUMBER).title == "Beyond softmax"
    for s in lesson(NUMBER).steps[:3]:
        assert state_of(s).model == "mha-viz/hybrid-2l" and state_of(s).text == HYBRID_EXAMPLE


@pytest.mark.parametrize("n", [1, 2])
def test_the_linear_layers_rows_and_signs_are_the_traces(n: int) -> None:
    s = step(n)
    state = state_of(s)
    values = MEASURES[s.question.measure](state)
    M = bundled_hybrid().trace(state.text, state.layer).weights.astype(np.float64)  # (H, T, T)
    assert values["row_min"] == pytest.approx(M.sum(-1).min()) and values["row_max"] == pytest.approx(M.sum(-1).max())
    negative = np.where(M < 0, -M, 0).sum((1, 2)) / np.abs(M).sum((1, 2))
    assert values["negative_min"] == pytest.approx(negative.min()) and values["most_negative"] == pytest.approx(M.min())
    if n == 1:  # "nothing normalises M": no row sums to 1, not even nearly
        assert right(s).startswith("Whatever") and np.abs(M.sum(-1) - 1).min() > 0.5
    else:  # "an entry can subtract"
        assert right(s).startswith("Yes") and M.min() < 0 and negative.min() > 0


def test_the_layer_forgets_at_once_and_its_convolution_carries_the_word_before() -> None:
    s = step(3)
    state = state_of(s)
    values = MEASURES[s.question.measure](state)
    model = bundled_hybrid()
    stats = mixer_stats(model.trace(state.text, state.layer))
    assert values["half_life_max"] == pytest.approx(stats.half_life.max()) and values["decay_max"] < 0.05
    assert right(s).startswith("Less than one token") and values["half_life_max"] < 1
    cut = copy.deepcopy(model.model)
    with torch.no_grad():  # the convolution reduced to its last tap (the token itself), as the measure does
        cut.model.layers[0].linear_attn.conv1d.weight[..., :-1] = 0
    runs = dict(sequences=RECALL_SEQUENCES, needles=RECALL_NEEDLES)
    assert values["recall"] == recall_accuracy(model, RECALL_LENGTH, **runs) >= 0.9
    assert values["recall_cut"] == recall_accuracy(cut, RECALL_LENGTH, **runs) <= 0.25
    assert model.model.model.layers[0].linear_attn.conv1d.weight[..., :-1].abs().sum() > 0  # the shared model kept


def test_a_linear_layers_state_does_not_grow_with_the_context() -> None:
    s = step(4)
    state = state_of(s)
    values = MEASURES[s.question.measure](state)
    qwen = PRESETS["Qwen3-Next-80B-A3B"]
    at = {n: qwen.model_kv_cache_bytes(n) - 12 * kv_cache_bytes(qwen.shape, n) for n in (8192, state.cost_context)}
    assert at[8192] == at[131072] == qwen.state_bytes() == 36 * qwen.linear.bytes()  # the same at both lengths
    assert right(s).startswith("The same")
    assert values["saving"] == pytest.approx(48 * kv_cache_bytes(qwen.shape, 131072) / qwen.model_kv_cache_bytes(131072))
    assert values["state_tokens"] == pytest.approx(qwen.linear.bytes() / kv_cache_bytes(qwen.shape, 1))
