"""Every step of lessons 1, 2 and 4 opened as a share link: the page runs without an error, the element the step points
at is on it, and the answer the lesson calls right is true of what the page shows (a task: doing it reaches it)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.lessons import LESSON_FILES, Step, lesson
from mha_viz.lessons.measures import MEASURES
from mha_viz.params import EXAMPLES, parse_query
from mha_viz.text import tokenize
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import drawn_heads

APP = str(Path(__file__).resolve().parents[2] / "page.py")
FILES = ("one_head.toml", "specialise.toml", "concat.toml")
STEPS = [(file, n) for file in FILES for n in range(1, len(lesson(LESSON_FILES.index(file) + 1).steps) + 1)]


def step_of(file: str, n: int) -> Step:
    return lesson(LESSON_FILES.index(file) + 1).steps[n - 1]


def open_step(step: Step) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in step.state.items():
        at.query_params[key] = value
    return at.run()


def keys(node) -> set[str]:
    """Every widget, container and chart key on the page."""
    found = {node.key} if getattr(node, "key", None) else set()
    for child in (getattr(node, "children", None) or {}).values():
        found |= keys(child)
    return found


def spec(at: AppTest, key: str) -> dict:
    charts = [c for c in at.get("plotly_chart") if c.key == key]
    assert charts, f"no chart {key}"
    return json.loads(charts[0].proto.spec)


def values(raw) -> np.ndarray:
    """A Plotly data array: plain list or typed-array encoding."""
    if isinstance(raw, dict):
        return np.frombuffer(base64.b64decode(raw["bdata"]), dtype=np.dtype(raw["dtype"])).astype(float)
    return np.array(raw, dtype=float)


def accuracy_bars(at: AppTest) -> dict[int, float]:
    bar = spec(at, "accuracy_by_heads")["data"][0]
    return dict(zip(map(int, bar["x"]), values(bar["y"])))


def texts(at: AppTest) -> str:
    kinds = ("caption", "error", "warning", "info", "success", "markdown")
    return " ".join(e.value for kind in kinds for e in getattr(at, kind)).replace("\\", "")


def assert_ok(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def url_state(at: AppTest):
    params = {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    return parse_query(params, ignore=frozenset({"lesson", "step"}))[0]


@pytest.mark.parametrize("file, n", STEPS)
def test_a_steps_state_opens_without_error_and_shows_its_target(file: str, n: int) -> None:
    step = step_of(file, n)
    at = open_step(step)
    assert_ok(at)
    kind, name = step.target_kind, step.target_name
    if kind == "view":
        assert at.button_group(key="view").value == name
    else:  # a widget key (control) or a chart key (chart): both are element keys on the page
        assert name in keys(at._tree), f"{step.target} not on the page of {file} step {n}"
    wanted, shown = parse_query(step.state)[0], url_state(at)
    for key in step.state:  # the app kept the step's state: nothing fell back to a default
        assert getattr(shown, key) == getattr(wanted, key), key


def measured(file: str, n: int) -> dict:
    step = step_of(file, n)
    return MEASURES[step.question.measure](parse_query(step.state)[0])


def test_one_head_step_1_the_row_of_it_sums_to_one_and_is_the_measured_row() -> None:
    at = open_step(step_of("one_head.toml", 1))
    _, (z,) = drawn_heads(at)  # the one head, within 2e-5 a cell of the trace (a row of T: T * 2e-5 < 1e-3)
    m = measured("one_head.toml", 1)
    row = z[tokenize(EXAMPLES["Ambiguous 'it'"]).index("it")]  # rows: query positions
    assert row.sum() == pytest.approx(1.0, abs=1e-3) == m["row_sum"]
    assert row.max() == pytest.approx(m["w_top"], abs=1e-3) and row[-1] == pytest.approx(m["w_last"], abs=1e-3)


def test_one_head_steps_2_and_3_the_page_says_the_head_splits_and_the_accuracy_falls_short() -> None:
    at = open_step(step_of("one_head.toml", 2))
    m = measured("one_head.toml", 2)
    assert f"Attention mass of the one head: previous {m['mass_previous']:.2f}, first {m['mass_first']:.2f}" in texts(at)
    assert 0.3 < m["mass_previous"] < 0.7 and 0.3 < m["mass_first"] < 0.7  # split between both (answer 2)
    bars = accuracy_bars(open_step(step_of("one_head.toml", 3)))
    assert bars[1] == pytest.approx(measured("one_head.toml", 3)["accuracy"], abs=1e-6) and bars[1] < 0.95  # answer 1


def test_one_head_step_4_dragging_h_to_2_reaches_the_task_and_the_heads_split_the_relations() -> None:
    step = step_of("one_head.toml", 4)
    at = open_step(step)
    assert not step.question.reached(url_state(at))
    at.select_slider(key="h").set_value(2).run()
    assert_ok(at)
    assert step.question.reached(url_state(at))
    assert "previous: head 0 (1.00); first: head 1 (1.00)" in texts(at)
    bars = accuracy_bars(at)
    assert bars[2] == pytest.approx(measured("one_head.toml", 4)["accuracy_h2"], abs=1e-6) == 1.0


def test_specialise_steps_1_and_2_two_heads_per_relation_and_accuracy_jumps_then_stays() -> None:
    at = open_step(step_of("specialise.toml", 1))
    assert len(drawn_heads(at)[1]) == 4
    assert "previous: head 0 (1.00); first: head 1 (1.00)" in texts(at)
    m = measured("specialise.toml", 1)
    assert m["heads_on_previous"] == m["heads_on_first"] == 2
    bars = accuracy_bars(open_step(step_of("specialise.toml", 2)))
    acc = measured("specialise.toml", 2)
    assert [bars[h] for h in (1, 2, 4)] == pytest.approx([acc[f"accuracy_h{h}"] for h in (1, 2, 4)], abs=1e-6)
    assert bars[1] < bars[2] == bars[4] == pytest.approx(1.0)  # answer 1: jumps, then stays at the top


def detector_grid(at: AppTest) -> np.ndarray:
    return z_matrix(heatmaps(spec(at, "analysis_detectors"))[0])


def test_specialise_steps_3_and_4_minilms_previous_and_duplicate_heads_on_the_detector_chart() -> None:
    step = step_of("specialise.toml", 4)
    at = open_step(step)
    m = measured("specialise.toml", 3)
    z = detector_grid(at)
    assert z.shape == (6, 12) and np.unravel_index(z.argmax(), z.shape) == (m["previous_layer"], m["previous_head"])
    assert z.max() == pytest.approx(m["previous_score"], abs=1e-3) and z.max() > 0.9  # answer 2: almost all
    at.radio(key="detector").set_value("duplicate").run()
    assert_ok(at)
    assert step.question.reached(url_state(at))
    z = detector_grid(at)
    assert np.unravel_index(z.argmax(), z.shape) == (m["duplicate_layer"], m["duplicate_head"])
    assert z.max() == pytest.approx(m["duplicate_score"], abs=1e-3)


def test_specialise_step_5_the_statistics_table_has_a_head_on_cls() -> None:
    at = open_step(step_of("specialise.toml", 5))
    table = pd.DataFrame(at.dataframe(key="analysis_stats").value)
    m = measured("specialise.toml", 5)
    assert int(table["first"].idxmax()) == m["head"] == 5
    assert table["first"].max() == pytest.approx(m["first_share"], abs=1e-3) and table["first"].max() > 0.8  # answer 2


def test_specialise_step_6_the_causal_models_previous_token_head_is_in_layer_0() -> None:
    at = open_step(step_of("specialise.toml", 6))
    z = detector_grid(at)
    assert z.shape == (2, 4) and np.unravel_index(z.argmax(), z.shape)[0] == 0 and z.max() > 0.9  # answer 0


def test_concat_steps_1_2_and_4_widths_the_per_head_split_and_what_summing_loses() -> None:
    at = open_step(step_of("concat.toml", 1))
    assert "d_k = d_v = 16" in texts(at)  # 4 heads × 16 = 64 numbers per token (answer 1)
    at = open_step(step_of("concat.toml", 2))
    assert texts(at).count("equal ✓") == 2  # answer 1: concat · W_Oᵀ = sum of the heads' contributions
    at = open_step(step_of("concat.toml", 4))
    m = measured("concat.toml", 4)
    shown = texts(at)
    assert f"{m['fitted_error']:.1%}" in shown and f"{m['mean_error']:.1%}" in shown and "Summing loses" in shown
    assert m["fitted_error"] > 0.1  # answer 2: tens of percent


def test_concat_step_3_each_heads_block_of_w_o_writes_its_own_relations_answer() -> None:
    """The chart the step points at (W_O at work's direct contributions) holds the measured numbers, and the answer
    the lesson calls right is what it shows: head 0 raises 'previous' and not 'first', head 1 the reverse."""
    step = step_of("concat.toml", 3)
    at = open_step(step)
    z = z_matrix(heatmaps(spec(at, "analysis_wo_contributions"))[0])  # (heads, answers)
    m = measured("concat.toml", 3)
    assert z.shape == (2, 2)
    assert z.ravel() == pytest.approx([m["head0_previous"], m["head0_first"], m["head1_previous"], m["head1_first"]],
                              abs=0.06)  # the measure rounds to 0.1
    assert m["head0_attends"] == "previous" and m["head1_attends"] == "first"  # what the step's text says
    assert z[0, 0] > 10 and z[1, 1] > 10 and abs(z[0, 1]) < 1 and abs(z[1, 0]) < 1  # answer 1
    assert m["head0_copies"] == m["head1_copies"] == m["vocab"]  # each token map sends every letter to itself
    assert step.question.choices[step.question.answer].startswith("Head 0 raises the 'previous' answer")


def test_concat_steps_5_and_6_every_head_contributes_and_the_norm_toggle_reaches_the_task() -> None:
    step = step_of("concat.toml", 6)
    at = open_step(step)
    z = z_matrix(heatmaps(spec(at, "analysis_contributions"))[0])
    m = measured("concat.toml", 5)
    means = np.nanmean(z, axis=1) if z.shape[0] == 4 else np.nanmean(z, axis=0)
    assert means == pytest.approx([m[f"contribution{h}"] for h in range(4)], rel=1e-3)
    assert means.max() / means.min() < 2  # answer 1: comparable amounts, none silent
    at.toggle(key="norm").set_value(True).run()
    assert_ok(at)
    assert step.question.reached(url_state(at)) and "analysis_norm_heads" in keys(at._tree)
