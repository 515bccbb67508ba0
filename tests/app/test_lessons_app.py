"""Lessons in the app, driven with AppTest: every step of every lesson is entered, sets its state, asks its question
with nothing on the page that gives the answer away (tests/lesson_answers.py), reveals its answer with the measured
numbers and the page it was hiding; Previous, Next, Leave; links to a step; links to no lesson."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.lessons import LESSON_FILES, Lesson, Step, lessons
from mha_viz.lessons.measures import MEASURES
from mha_viz.params import parse_query, to_query
from mha_viz.ui.lessons import COVER, copy_key, explanation, step_params
from tests.app.test_app import new_app
from tests.lesson_answers import answer_texts, appears, leaked
from tests.renderer_json import drawn_charts, renderer_data

pytestmark = pytest.mark.usefixtures("one_thread")
SHAPES = LESSON_FILES.index("shapes.toml") + 1
WIDGETS = ("select_slider", "slider", "selectbox", "segmented_control", "number_input", "text_input", "text_area",
           "toggle", "checkbox", "radio", "multiselect", "selectbox")


def url(at: AppTest) -> dict[str, str]:
    return {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}


def widget(at: AppTest, key: str):
    for kind in WIDGETS:
        found = [w for w in at.get(kind) if w.key == key]
        if found:
            return found[0]
    raise AssertionError(f"no widget with the key {key!r} on the page")


def button(at: AppTest, key: str):
    return next(b for b in at.button if b.key == key)


def texts(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


TEXT_KINDS = ("markdown", "caption", "success", "info", "warning", "error", "text", "code", "latex", "metric",
              "subheader", "header", "title")


def strings(node) -> list[str]:
    """Every text in a JSON tree (a chart's layout: titles, annotations, tick labels)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for v in node.values() for t in strings(v)]
    if isinstance(node, list):
        return [t for v in node for t in strings(v)]
    return []


RENDERER_WORDS = ("labels", "queries", "keys", "subtitle", "failed")  # the header fields the renderer shows as text


def page_text(at: AppTest) -> str:
    """Everything the page says in words: text elements, widget labels and values, charts' titles and labels."""
    said = [str(getattr(e, "value", "")) for kind in TEXT_KINDS for e in at.get(kind)]
    said += [str(getattr(w, "label", "")) + " " + str(getattr(w, "value", "")) for kind in WIDGETS for w in at.get(kind)]
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        said += strings(spec.get("layout", {})) + [t for d in spec.get("data", []) for t in strings(d.get("text", []))]
    for e in [e for e in at.get("bidi_component") if e.proto.bytes]:  # the renderer's words: titles, tokens, subtitle
        said += strings({k: v for k, v in renderer_data(at, e.key)[0].items() if k in RENDERER_WORDS})
    for frame in at.get("dataframe"):
        said.append(frame.value.to_string())
    return "\n".join(said)


def has_cover(at: AppTest) -> bool:
    return any(c.key == COVER for c in at.main.container)


def assert_no_error(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def assert_step_shown(at: AppTest, lesson: Lesson, number: int, step: Step) -> None:
    """The panel shows the step, the app's state is the step's (its URL is the step's share link), the question."""
    assert_no_error(at)
    caption = f"Lesson {lesson.number} · step {number} of {len(lesson.steps)}"
    assert any(c.value.startswith(caption) for c in at.caption), [c.value for c in at.caption]
    assert f"### {step.title}" in texts(at)
    shown = url(at)
    assert shown.pop("lesson") == str(lesson.number) and shown.pop("step", "1") == str(number)
    assert shown == to_query(step_params(step))  # the state a share link with the step's parameters holds
    assert_target_shown(at, step)
    question = step.question
    if question is not None and not question.is_task:
        radio = widget(at, f"lesson_choice_{lesson.number}_{number}")
        assert radio.label == question.prompt and list(radio.options) == list(question.choices)
        assert radio.value is None  # asked before the answer is shown
    elif question is not None:
        assert f"**Task:** {question.prompt}" in texts(at)


def assert_target_shown(at: AppTest, step: Step) -> None:
    """The element a step points at is on its page (a choice question still open: the cover stands for the page)."""
    if step.question is not None and not step.question.is_task and at.get("radio") and any(
            r.key.startswith("lesson_choice_") and r.value is None for r in at.radio) and has_cover(at):
        assert not drawn_charts(at), "a chart is drawn while the question is open"
        if step.target_kind == "control" and step.target_name in ("h", "kv_heads"):
            widget(at, step.target_name)
        return
    if step.target_kind == "control":  # what the step points at is on its page
        widget(at, step.target_name)
    elif step.target_kind == "chart":
        assert step.target_name in drawn_charts(at)
    elif step.target_kind == "view":
        assert widget(at, "view").value == step.target_name


def answer(at: AppTest, lesson: Lesson, number: int, step: Step) -> AppTest:
    """Answer rightly (the right choice and Check, or the expected controls set) and see the explanation."""
    question = step.question
    explain = explanation(step)
    assert explain not in texts(at)  # not before the answer
    assert leaked(step, page_text(at)) == [], "the answer is on the page before Check"
    assert has_cover(at) != question.is_task  # a choice: the page waits under a cover; a task: the live page
    if question.is_task:
        wanted, _ = parse_query(question.expect)
        for name in question.expect:
            widget(at, name).set_value(getattr(wanted, name))
        at.run()
        assert any(s.value.startswith("Done") for s in at.success), [s.value for s in at.success]
    else:
        widget(at, f"lesson_choice_{lesson.number}_{number}").set_value(question.choices[question.answer]).run()
        button(at, f"lesson_reveal_{lesson.number}_{number}").click().run()
        assert any(s.value.startswith("Right") for s in at.success)
    assert_no_error(at)
    assert explain in texts(at) and "{" not in explain
    assert not has_cover(at)
    assert_target_shown(at, step)  # the page it hid is drawn, the step's target on it
    shown = page_text(at)
    expected = [t for t in answer_texts(step) if not t.startswith(("The answer:", "Not quite"))]
    assert [t for t in expected if not appears(t, shown)] == [], "the answer is not on the page after Check"
    if question.measure is not None:  # the measured numbers are in the text, as the measure gives them
        measured = MEASURES[question.measure](parse_query({**step.state, **question.expect})[0])
        assert explain == question.explain.format(**measured) and ("{" not in question.explain or explain != question.explain)
    return at


@pytest.mark.slow
@pytest.mark.parametrize("lesson", lessons(), ids=lambda lesson: lesson.source)
def test_every_step_of_every_lesson_sets_its_state_asks_and_explains(lesson: Lesson) -> None:
    at = new_app(lesson=str(lesson.number)).run()
    for number, step in enumerate(lesson.steps, start=1):
        assert_step_shown(at, lesson, number, step)
        if step.question is not None:
            answer(at, lesson, number, step)
        if number < len(lesson.steps):
            button(at, "lesson_next").click().run()
    assert button(at, "lesson_next").label == "Finish"
    button(at, "lesson_next").click().run()
    assert_no_error(at) and "lesson" not in url(at)
    assert not any(c.value.startswith("Lesson ") for c in at.caption)


def test_a_link_to_a_middle_step_previous_next_and_leave() -> None:
    lesson = lessons()[SHAPES - 1]
    middle = len(lesson.steps) // 2 + 1
    at = new_app(lesson=str(SHAPES), step=str(middle), h="1", text="a b").run()  # the step's state wins
    assert_step_shown(at, lesson, middle, lesson.steps[middle - 1])
    button(at, "lesson_previous").click().run()
    assert_step_shown(at, lesson, middle - 1, lesson.steps[middle - 2])
    button(at, "lesson_next").click().run()
    assert_step_shown(at, lesson, middle, lesson.steps[middle - 1])
    state = url(at)
    button(at, "lesson_leave").click().run()
    assert_no_error(at)
    left = url(at)
    assert "lesson" not in left and "step" not in left
    state.pop("lesson"), state.pop("step", None)
    assert left == state  # leaving keeps the app as the step left it
    assert button(at, f"lesson_start_{SHAPES}").click().run()
    assert_step_shown(at, lesson, 1, lesson.steps[0])


def test_a_step_sets_its_state_once_then_the_student_moves_the_controls() -> None:
    lesson = lessons()[SHAPES - 1]
    number, step = next((n, s) for n, s in enumerate(lesson.steps, start=1) if "h" in s.state)
    at = new_app(lesson=str(SHAPES), step=str(number)).run()
    other = next(h for h in widget(at, "h").options if str(h) != step.state["h"])
    widget(at, "h").set_value(other).run()
    at.run()  # a later run does not apply the step again
    assert_no_error(at)
    assert url(at)["h"] == str(other) and url(at).get("step", "1") == str(number)
    button(at, "lesson_reset").click().run()
    assert url(at).get("h", "4") == step.state["h"]


COPIED_STEPS = [(lesson, n, s) for lesson in lessons() for n, s in enumerate(lesson.steps, start=1) if copy_key(s)]


@pytest.mark.parametrize(("lesson", "number", "step"), COPIED_STEPS,
                         ids=[f"{lesson.number}.{n}" for lesson, n, _ in COPIED_STEPS])
def test_a_task_on_a_sidebar_control_moves_it_from_a_copy_under_the_task(lesson: Lesson, number: int,
                                                                         step: Step) -> None:
    """The copy under the task (on screen on a phone, whose sidebar is closed) sets the same field as the sidebar's
    control: setting it to the task's goal completes the task, moves the sidebar's control and the URL; moving the
    sidebar's control moves the copy."""
    name, key = step.target_name, copy_key(step)
    at = new_app(lesson=str(lesson.number), step=str(number)).run()
    assert_no_error(at)
    start = widget(at, name).value
    assert widget(at, key).value == start and not step.question.reached(parse_query(url(at))[0])
    goal = getattr(parse_query(step.question.expect)[0], name)
    widget(at, key).set_value(goal).run()
    assert_no_error(at)
    assert widget(at, name).value == widget(at, key).value == goal == getattr(parse_query(url(at))[0], name)
    assert step.question.reached(parse_query(url(at))[0])
    assert any(s.value.startswith("Done") for s in at.success), [s.value for s in at.success]
    widget(at, name).set_value(start).run()  # the sidebar's control moves the copy
    assert_no_error(at)
    assert widget(at, key).value == start == getattr(parse_query(url(at))[0], name)
    assert not any(s.value.startswith("Done") for s in at.success)


@pytest.mark.parametrize(("params", "notice"), [
    ({"lesson": "99"}, "There is no lesson 99"),
    ({"lesson": "two"}, "URL parameter lesson='two' is not valid"),
    ({"lesson": "-1"}, "URL parameter lesson='-1' is not valid"),
    ({"lesson": str(SHAPES), "step": "0"}, "URL parameter step='0' is not valid"),
    ({"lesson": str(SHAPES), "step": "8"}, "steps, not 8; showing its last step"),
])
def test_a_link_to_no_lesson_or_no_step_says_so(params: dict[str, str], notice: str) -> None:
    if params.get("step") == "8" and len(lessons()[SHAPES - 1].steps) == 8:
        pytest.skip("the lesson has 8 steps")
    at = new_app(**params).run()
    assert not at.exception
    assert any(notice in w.value for w in at.warning), [w.value for w in at.warning]
