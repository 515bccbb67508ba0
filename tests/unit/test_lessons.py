"""Lessons as data: every shipped lesson file loads, its states are valid share links, and a broken file is refused
with the place of the mistake."""

from __future__ import annotations

import pytest

from mha_viz.lessons import LESSON_FILES, LessonError, lesson, lesson_paths, lessons, parse_lesson
from mha_viz.lessons.measures import MEASURES
from mha_viz.params import ViewState, parse_query


def test_every_lesson_file_loads_numbered_from_one_with_three_to_six_steps() -> None:
    loaded = lessons()
    assert [lesson.number for lesson in loaded] == list(range(1, len(lesson_paths()) + 1))
    for les in loaded:
        assert 3 <= len(les.steps) <= 6, les.title
        assert all(step.question is not None for step in les.steps), les.title  # predict, then see


def test_every_explanation_fills_its_placeholders_from_its_measure() -> None:
    for les in lessons():
        for step in les.steps:
            q = step.question
            state, _ = parse_query(step.state)
            values = MEASURES[q.measure](state) if q.measure else {}
            q.explain.format(**values)  # raises KeyError on a placeholder the measure does not give


def test_a_task_is_reached_only_by_the_state_it_expects() -> None:
    step = lesson(LESSON_FILES.index("shapes.toml") + 1).steps[1]
    assert step.question.is_task
    assert step.question.reached(ViewState(h=8)) and not step.question.reached(ViewState(h=4))


GOOD = """title = "t"\nsummary = "s"\n[[steps]]\ntitle = "a"\ntext = "b"\nstate = { h = "2" }\n"""


@pytest.mark.parametrize("text, message", [
    ("title = ", "not valid TOML"),
    ('title = "t"\nsummary = "s"\n', "1 to 8 \\[\\[steps\\]\\]"),
    (GOOD.replace('h = "2"', 'h = "x"'), "step 1 state: URL parameter h='x' is not valid"),
    (GOOD.replace('h = "2"', 'nonsense = "1"'), "unknown URL parameter"),
    (GOOD + 'target = "button:go"\n', "target must be"),
    (GOOD + 'minilm_only = "yes"\n', "minilm_only must be true or false"),
    (GOOD + '[steps.question]\nprompt = "p"\nexplain = "e"\nchoices = ["a", "b"]\nanswer = 2\n', "index of a choice"),
    (GOOD + '[steps.question]\nprompt = "p"\nexplain = "e"\nchoices = ["a"]\nanswer = 0\n', "two or more"),
    (GOOD + '[steps.question]\nprompt = "p"\nexplain = "e"\nexpect = { h = "2" }\nchoices = ["a", "b"]\n', "not both"),
    (GOOD + '[steps.question]\nprompt = "p"\nexplain = "e"\nexpect = { h = "2" }\nmeasure = "nope"\n', "unknown measure"),
])
def test_a_broken_lesson_is_refused_saying_where(text: str, message: str) -> None:
    with pytest.raises(LessonError, match=message):
        parse_lesson(text, 1, "mine.toml")


def test_a_lesson_that_does_not_exist_says_which_do() -> None:
    with pytest.raises(IndexError, match=f"lessons are 1 to {len(LESSON_FILES)}"):
        lesson(len(LESSON_FILES) + 1)


def test_every_target_is_named_by_its_label_on_screen_and_where_it_is() -> None:
    """Show me names a step's target as the student reads it, never by its internal key, and says sidebar or main
    area as the control really is (SIDEBAR_CONTROLS / MAIN_CONTROLS: checked in the browser by
    tests/browser/test_lessons_browser.py)."""
    from mha_viz.ui.lessons import CHART_NAMES, MAIN_CONTROLS, SIDEBAR_CONTROLS, target_label

    for les in lessons():
        for step in les.steps:
            if step.target is None:
                continue
            label = target_label(step)
            name = step.target_name
            known = {"chart": CHART_NAMES, "control": {**SIDEBAR_CONTROLS, **MAIN_CONTROLS}, "view": {name: name}}
            assert name in known[step.target_kind], (les.source, step.title, step.target)
            if "_" in name:
                assert name not in label, label  # "analysis_dla" is not a name a student reads
            where = "(in the sidebar)" if step.target_kind == "control" and name in SIDEBAR_CONTROLS else "main area)"
            assert label.endswith(where), label


def test_a_task_says_when_it_is_done_in_words() -> None:
    """Not "Done when norm = true": each control by its label, a switch as on or off."""
    from mha_viz.ui.lessons import done_when

    tasks = [step.question for les in lessons() for step in les.steps if step.question.is_task]
    assert tasks
    for q in tasks:
        words = done_when(q)
        assert " = " not in words and "true" not in words and "false" not in words, words
        assert not [name for name in q.expect if name not in ("h", "variant") and name in words], words  # no keys
    norm = next(q for q in tasks if "norm" in q.expect)
    assert done_when(norm) == "the switch Norm-based attention is on"
