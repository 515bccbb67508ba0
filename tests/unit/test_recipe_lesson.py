"""CONTRIBUTING.md's "Write a lesson", tried: a toy lesson written as one TOML file (here in a temporary folder, as a
course keeps its own), registered with register_lesson, runs through every test of tests/unit/test_lessons.py that
walks the registry (lessons()), then is unregistered."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mha_viz.lessons import LessonError, lesson, lessons, register_lesson, unregister_lesson
from tests.unit import test_lessons

TOY = '''
title = "Toy: heads share d_model"
summary = "A lesson written by a contributor in one file, outside the package."

[[steps]]
title = "Widths"
text = "Each head reads d_model / h dimensions."
state = { mode = "Configurable", weights = "random", d_model = "32", h = "2", view = "Heads" }
target = "chart:heads"
[steps.question]
prompt = "With d_model = 32 and h = 2, how wide is each head?"
choices = ["8", "16", "32"]
answer = 1
explain = "d_k = {d_model} / {h} = {d_k}."
measure = "layer_shapes"

[[steps]]
title = "More heads"
text = "Drag the head-count slider."
state = { mode = "Configurable", weights = "random", d_model = "32", h = "2", view = "Heads" }
target = "control:h"
[steps.question]
prompt = "Drag h until each head has 8 dimensions."
expect = { h = "4" }
explain = "32 / 4 = 8."

[[steps]]
title = "The cost"
text = "Shapes & cost counts the weights."
state = { mode = "Configurable", weights = "random", d_model = "32", h = "4", view = "Shapes & cost" }
target = "view:Shapes & cost"
[steps.question]
prompt = "Do more heads add parameters?"
choices = ["Yes", "No"]
answer = 1
explain = "W_Q, W_K, W_V and W_O stay d_model x d_model whatever h is."
'''

# the tests of test_lessons.py that read every lesson from the registry, whatever it holds when they run
REGISTRY_TESTS: list[Callable[[], None]] = [
    test_lessons.test_every_lesson_file_loads_numbered_from_one_with_three_to_six_steps,
    test_lessons.test_every_explanation_fills_its_placeholders_from_its_measure,
    test_lessons.test_every_target_is_named_by_its_label_on_screen_and_where_it_is,
    test_lessons.test_a_task_says_when_it_is_done_in_words,
]


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "toy.toml"
    path.write_text(TOY, encoding="utf-8")
    number = register_lesson(path)
    try:
        yield number
    finally:
        unregister_lesson(path)


def test_a_registered_lesson_file_is_the_last_lesson_until_unregistered(tmp_path: Path) -> None:
    shipped = len(lessons())
    path = tmp_path / "toy.toml"
    path.write_text(TOY, encoding="utf-8")
    assert register_lesson(path) == shipped + 1
    assert lesson(shipped + 1).title == "Toy: heads share d_model" and lesson(shipped + 1).source == "toy.toml"
    with pytest.raises(ValueError, match="already a lesson"):
        register_lesson(path)
    unregister_lesson(path)
    assert len(lessons()) == shipped


def test_a_broken_lesson_file_is_refused_before_it_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(TOY.replace("answer = 1\nexplain = \"d_k", "answer = 5\nexplain = \"d_k"), encoding="utf-8")
    shipped = len(lessons())
    with pytest.raises(LessonError, match="broken.toml step 1: answer must be the index of a choice"):
        register_lesson(path)
    assert len(lessons()) == shipped


@pytest.mark.parametrize("check", REGISTRY_TESTS, ids=lambda check: check.__name__)
def test_the_toy_lesson_passes_the_lesson_tests(toy: int, check: Callable[[], None]) -> None:
    assert lessons()[-1].number == toy and lessons()[-1].source == "toy.toml"  # the check reads the toy too
    check()


def test_a_toy_lesson_that_breaks_a_rule_fails_the_lesson_tests(tmp_path: Path) -> None:
    """The checks above can fail on the toy: one step too few for the lesson tests' three to six."""
    path = tmp_path / "short.toml"
    path.write_text(TOY[: TOY.index('[[steps]]\ntitle = "The cost"')], encoding="utf-8")
    register_lesson(path)
    try:
        with pytest.raises(AssertionError, match="Toy: heads share d_model"):
            test_lessons.test_every_lesson_file_loads_numbered_from_one_with_three_to_six_steps()
    finally:
        unregister_lesson(path)
