"""mha_viz.training's Streamlit view (AppTest): trains one and h heads, follows the task, explains bad h."""

from __future__ import annotations

import json

import numpy as np
from streamlit.testing.v1 import AppTest

from mha_viz.trace import AttentionTrace
from tests.app.test_app import heatmaps, z_matrix


def training_app() -> None:
    import streamlit as st

    from mha_viz.ui.training import training_controls, training_page

    with st.sidebar:
        training_controls()
    s = st.session_state
    s["returned"] = training_page(s["h"], s["d_model"], s["steps"], s["seed"], s["task"])


def new_training_app(**state) -> AppTest:
    at = AppTest.from_function(training_app, default_timeout=120)
    for key, value in {"task": "", "h": 2, "d_model": 16, "steps": 30, "seed": 0, **state}.items():
        at.session_state[key] = value
    return at.run()


def chart(at: AppTest, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def test_view_trains_one_and_h_heads_and_returns_the_trained_trace() -> None:
    at = new_training_app()
    assert not at.exception and not at.error
    assert at.selectbox(key="task").value == "prev-first"
    charts = at.get("plotly_chart")
    assert len(charts) == 5  # h = 1: heads, scores; h = 2: heads, scores; curves
    single, heads = chart(at, 0), chart(at, 2)
    assert len(heatmaps(single)) == 1 and len(heatmaps(heads)) == 2
    assert "frames" not in heads and "sliders" not in heads["layout"]  # the page's step slider replays it
    assert at.select_slider(key="train_step").value == 30 and at.select_slider(key="train_step").options[0] == "step 0"
    trace = at.session_state["returned"]
    assert isinstance(trace, AttentionTrace) and trace.meta["step"] == 30
    for h, shown in enumerate(heatmaps(heads)):
        np.testing.assert_allclose(z_matrix(shown), trace.weights[h], atol=1e-6)
    assert z_matrix(chart(at, 1)["data"][0]).shape == (1, 2) and z_matrix(chart(at, 3)["data"][0]).shape == (2, 2)
    curves = chart(at, 4)
    assert {t["name"] for t in curves["data"] if t.get("showlegend", True)} == {"h = 1", "h = 2"}
    table = at.table[0].value
    assert list(table.columns) == ["measure", "h = 1", "h = 2"]


def test_the_step_slider_replays_training_and_the_report_keeps_every_step() -> None:
    """Train mode's replay: Streamlit's select slider (the keyboard moves it) picks the snapshot drawn; the report
    keeps Plotly's replay of every snapshot, whose frames are the steps the slider shows."""
    at = new_training_app()
    replay, filename = at.session_state["_figures_shown"]["train_heads"]
    frames = json.loads(replay.to_json())["frames"]
    assert filename == "train-h2-heads" and [f["name"] for f in frames] == [str(s) for s in range(31)]
    single = chart(at, 0)
    for step in (0, 12):
        at.select_slider(key="train_step").set_value(step).run()
        assert not at.exception and at.select_slider(key="train_step").value == step
        for h, shown in enumerate(heatmaps(chart(at, 2))):
            np.testing.assert_allclose(z_matrix(shown), z_matrix(frames[step]["data"][h]), atol=1e-6)
    assert not np.allclose(z_matrix(heatmaps(chart(at, 2))[0]), z_matrix(frames[-1]["data"][0]))
    assert chart(at, 0) == single  # the other run's replay stays where it was


def test_play_at_the_last_step_replays_from_the_first_and_stops_at_the_last() -> None:
    """Each run of the playing replay (a timer's, in the browser) shows the next snapshot; at the last it stops."""
    at = new_training_app()
    at.toggle(key="train_play").set_value(True).run()
    assert not at.exception and at.select_slider(key="train_step").value == 0 and at.toggle(key="train_play").value
    at.run()
    assert at.select_slider(key="train_step").value == 1
    at.select_slider(key="train_step").set_value(29).run()
    assert at.select_slider(key="train_step").value == 30
    at.run()
    assert at.select_slider(key="train_step").value == 30 and not at.toggle(key="train_play").value
    assert at.select_slider(key="train_step_single").value == 30 and not at.toggle(key="train_play_single").value


def test_view_follows_the_task_and_single_head_choice() -> None:
    at = new_training_app()
    at.selectbox(key="task").set_value("prev-match").run()
    assert not at.exception
    assert chart(at, 3)["layout"]["xaxis"]["ticktext"] == ["previous", "same letter"]
    at.select_slider(key="h").set_value(1).run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 3 and "h > 1" in at.info[0].value


def test_view_explains_a_head_count_that_does_not_divide_d_model() -> None:
    at = new_training_app(h=3)
    assert not at.exception
    assert "does not divide d_model = 16" in at.error[0].value
    assert not at.get("plotly_chart") and at.session_state["returned"] is None
