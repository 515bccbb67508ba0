"""Lesson 8 (beyond softmax): every step's state opened as a share link draws its page without an error, with the
chart the step points at, and what is on screen agrees with the answer the lesson calls right."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.lessons import LESSON_FILES, Step, lesson
from tests.app.test_gqa_app import new_app
from tests.app.test_lesson_states_b import _cache_rows
from tests.renderer_json import drawn_charts, shown_layer

NUMBER = LESSON_FILES.index("beyond_softmax.toml") + 1
STEPS = list(range(1, len(lesson(NUMBER).steps) + 1))


def step(n: int) -> Step:
    return lesson(NUMBER).steps[n - 1]


def right(n: int) -> str:
    q = step(n).question
    return q.choices[q.answer]


def _drawn_matrices(at: AppTest) -> np.ndarray:
    meta, drawn = shown_layer(at)  # [H, t, s] as the renderer paints them
    assert meta["layer_marks"] == ["lin", "attn"] and meta["active"] == 0
    return drawn


def _rows_not_normalised(at: AppTest) -> None:
    rows = np.nansum(_drawn_matrices(at), -1)
    assert np.abs(rows - 1).min() > 0.5 and right(1).startswith("Whatever")


def _negative_entries(at: AppTest) -> None:
    assert np.nanmin(_drawn_matrices(at)) < 0 and right(2).startswith("Yes")


def _half_lives(at: AppTest) -> None:
    (table,) = at.dataframe
    assert (table.value["half_life"] < 1).all() and right(3).startswith("Less than one token")


def _fixed_state(at: AppTest) -> None:
    long = _cache_rows(at)["Qwen3-Next-80B-A3B"]
    at.select_slider(key="cost_context").set_value(8192).run()
    short = _cache_rows(at)["Qwen3-Next-80B-A3B"]
    assert long["linear layers' state"] == short["linear layers' state"] == "36 × 1.05 MiB"
    assert long["KV cache (context)"] != short["KV cache (context)"] and right(4).startswith("The same")


ON_SCREEN: dict[int, Callable[[AppTest], None]] = {1: _rows_not_normalised, 2: _negative_entries, 3: _half_lives,
                                                   4: _fixed_state}


@pytest.mark.parametrize("n", STEPS)
def test_each_step_opens_its_state_with_its_target_on_screen_and_its_answer_true(n: int) -> None:
    s = step(n)
    at = new_app(**s.state).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert not [w.value for w in at.warning if "URL parameter" in w.value]
    assert s.target_kind == "chart" and s.target_name in drawn_charts(at)
    ON_SCREEN[n](at)


def test_every_step_has_an_on_screen_check() -> None:
    assert set(ON_SCREEN) == set(STEPS)
