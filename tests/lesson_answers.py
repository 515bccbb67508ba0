"""What would give a lesson step's answer away, derived from the step's own data: the numbers and words its
explanation fills in from its measure (each formatted as the explanation formats it), the verdicts the panel prints,
and the explanation's first line. Values the student is given anyway (in the step's text, question, choices or
state) and single characters are left out: they are on the page whatever the answer. A task (do something on the
live page) has no prediction to protect: only its explanation waits until it is done. Used by the AppTest and the
Chromium walks of every step (tests/app/test_lessons_app.py, tests/browser/test_lessons_browser.py)."""

from __future__ import annotations

import re
from string import Formatter

from mha_viz.lessons import Step
from mha_viz.lessons.measures import MEASURES
from mha_viz.params import parse_query
from mha_viz.ui.lessons import explanation, step_state


def measured_values(step: Step) -> list[str]:
    """The explanation's placeholders as it prints them (its measure on the step's state)."""
    question = step.question
    if question is None or question.measure is None:
        return []
    values = MEASURES[question.measure](parse_query({**step_state(step), **question.expect})[0])
    return [format(values[field], spec) for _, field, spec, _ in Formatter().parse(question.explain) if field]


def given(step: Step) -> str:
    """What the student reads before answering: the step's text, question, choices and state values."""
    q = step.question
    return " ".join([step.title, step.text, q.prompt if q else "", *(q.choices if q else ()), *step_state(step).values(),
                     *(q.expect.values() if q else ())])


def answer_texts(step: Step) -> list[str]:
    """Every text that would give the step's answer away (empty for a step with no question)."""
    q = step.question
    if q is None:
        return []
    first_line = explanation(step).strip().splitlines()[0]
    if q.is_task:  # a task is done on the live page: only its explanation waits
        return [first_line]
    told = given(step)
    found = [v for v in measured_values(step) if len(v.strip()) > 1 and not appears(v, told)]
    right = q.choices[q.answer]
    return [*found, first_line, f"Right: {right}.", f"The answer: {right}.", "Not quite: the answer is"]


def appears(text: str, page: str) -> bool:
    """text in page as a whole number or word: "0.47" is not found in "10.475"."""
    return re.search(r"(?<![\w.])" + re.escape(text.strip()) + r"(?![\w]|\.\d)", page) is not None


def leaked(step: Step, page: str) -> list[str]:
    """The answer texts of the step found in the page's text."""
    return [t for t in answer_texts(step) if appears(t, page)]
