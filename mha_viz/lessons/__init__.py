"""Lessons: short walks through the seeds' ideas on the app's own live views, one TOML file each.

A lesson file (mha_viz/lessons/*.toml) is data a teacher can write:

    title = "One head, one compromise"
    summary = "One sentence on what the student will see."

    [[steps]]
    title = "Two relations at once"
    text = "Markdown: what to look at. Say whether an example is illustrative or measured."
    state = { weights = "trained", task = "prev-first", h = "1", view = "Heads" }   # URL parameters, as a share link
    target = "control:h"          # what the step points at: control:<widget key>, chart:<chart key> or view:<view>
    minilm_only = false           # true: the question is about the bundled MiniLM, not asked when it is not installed
    [steps.question]              # asked before the answer is shown: either choices ...
    prompt = "Where will the one head look?"
    choices = ["At the previous token", "At the first token", "Split between both"]
    answer = 2                    # index into choices, from 0
    explain = "Markdown: why, with the numbers on screen: {accuracy_h1:.0%} ..."
    measure = "trained_accuracy"  # optional: a function of mha_viz.lessons.measures whose numbers explain uses
    # ... or a task the student does in the app, checked from the app state:
    # [steps.question]
    # prompt = "Drag h until each head has 16 dimensions."
    # expect = { h = "4" }        # URL parameters the state must reach
    # explain = "..."

Lessons are numbered from 1 in the order of LESSON_FILES (a lesson is one file plus its name there), then of the files
register_lesson(path) added from elsewhere (a course's own folder; unregister_lesson takes one back); the URL holds
`lesson=N&step=M` (steps from 1). Loading checks every step: its state parses as URL parameters without a notice, its
target names a known kind, its answer is a valid choice, its measure exists; a mistake is a LessonError saying where.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..params import ViewState, parse_query

FOLDER = Path(__file__).resolve().parent
LESSON_FILES: tuple[str, ...] = (  # the lessons in order (numbered from 1): add a lesson's file here
    "one_head.toml",
    "specialise.toml",
    "shapes.toml",
    "concat.toml",
    "heads_matter.toml",
    "induction.toml",
    "long_contexts.toml",
    "beyond_softmax.toml",
)
TARGET_KINDS = ("control", "chart", "view")


class LessonError(ValueError):
    """A lesson file that cannot be used, and where it goes wrong."""


@dataclass(frozen=True)
class Question:
    """Asked before the answer is revealed: choices with one answer, or an app state to reach (expect)."""

    prompt: str
    explain: str
    choices: tuple[str, ...] = ()
    answer: int | None = None
    expect: dict[str, str] = field(default_factory=dict)
    measure: str | None = None

    @property
    def is_task(self) -> bool:
        """True for a task checked from the app state (expect), False for a choice."""
        return bool(self.expect)

    def reached(self, state: ViewState) -> bool:
        """Whether the app state has every value the task expects."""
        wanted, _ = parse_query(self.expect)
        return all(getattr(state, name) == getattr(wanted, name) for name in self.expect)


@dataclass(frozen=True)
class Step:
    title: str
    text: str
    state: dict[str, str]
    target: str | None = None
    question: Question | None = None
    minilm_only: bool = False  # its question is about the bundled MiniLM: without that package it is not asked

    @property
    def target_kind(self) -> str | None:
        return None if self.target is None else self.target.partition(":")[0]

    @property
    def target_name(self) -> str | None:
        return None if self.target is None else self.target.partition(":")[2]


@dataclass(frozen=True)
class Lesson:
    number: int  # from 1
    title: str
    summary: str
    steps: tuple[Step, ...]
    source: str  # the file it was read from


def _text(where: str, value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LessonError(f"{where}: {name} must be non-empty text")
    return value.strip()


def _params(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise LessonError(f"{where}: must be a table of URL parameters")
    params = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    _, notices = parse_query(params)
    if notices:
        raise LessonError(f"{where}: {' '.join(notices)}")
    return params


def _question(where: str, raw: Any) -> Question:
    if not isinstance(raw, dict):
        raise LessonError(f"{where}: question must be a table")
    prompt, explain = _text(where, raw.get("prompt"), "prompt"), _text(where, raw.get("explain"), "explain")
    measure = raw.get("measure")
    if measure is not None:
        from .measures import MEASURES

        if measure not in MEASURES:
            raise LessonError(f"{where}: unknown measure {measure!r}; known: {', '.join(sorted(MEASURES))}")
    if "expect" in raw:
        if "choices" in raw:
            raise LessonError(f"{where}: a question has choices or expect, not both")
        return Question(prompt, explain, expect=_params(f"{where} expect", raw["expect"]), measure=measure)
    choices = raw.get("choices")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise LessonError(f"{where}: choices must be two or more texts")
    answer = raw.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise LessonError(f"{where}: answer must be the index of a choice, 0 to {len(choices) - 1}")
    return Question(prompt, explain, tuple(choices), answer, measure=measure)


def parse_lesson(text: str, number: int, source: str = "<text>") -> Lesson:
    """A lesson from the text of its TOML file; LessonError saying what is wrong and where."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise LessonError(f"{source}: not valid TOML: {err}") from None
    steps = raw.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= 8:
        raise LessonError(f"{source}: a lesson has 1 to 8 [[steps]]")
    parsed = []
    for i, s in enumerate(steps, start=1):
        where = f"{source} step {i}"
        target = s.get("target")
        if target is not None and (not isinstance(target, str) or target.partition(":")[0] not in TARGET_KINDS
                                   or not target.partition(":")[2]):
            raise LessonError(f"{where}: target must be control:<key>, chart:<key> or view:<name>, got {target!r}")
        question = None if "question" not in s else _question(where, s["question"])
        minilm_only = s.get("minilm_only", False)
        if not isinstance(minilm_only, bool):
            raise LessonError(f"{where}: minilm_only must be true or false")
        parsed.append(Step(_text(where, s.get("title"), "title"), _text(where, s.get("text"), "text"),
                           _params(f"{where} state", s.get("state", {})), target, question, minilm_only))
    return Lesson(number, _text(source, raw.get("title"), "title"), _text(source, raw.get("summary"), "summary"),
                  tuple(parsed), source)


REGISTERED: list[Path] = []  # lesson files from outside the package (register_lesson), numbered after LESSON_FILES


def lesson_paths() -> list[Path]:
    """Every lesson's file in the order of its number: LESSON_FILES, then the registered ones."""
    return [FOLDER / name for name in LESSON_FILES] + REGISTERED


def register_lesson(path: Path) -> int:
    """Add the lesson file at path (a course's own folder, a test's) after every other; its number. The file is
    loaded at once, so a broken one is refused (LessonError) before it is listed; ValueError if it already is."""
    path = Path(path).resolve()
    if path in lesson_paths():
        raise ValueError(f"{path} is already a lesson")
    number = len(lesson_paths()) + 1
    parse_lesson(path.read_text(encoding="utf-8"), number, path.name)
    REGISTERED.append(path)
    lessons.cache_clear()
    return number


def unregister_lesson(path: Path) -> None:
    """Remove a lesson register_lesson added (the lessons after it move up one number)."""
    REGISTERED.remove(Path(path).resolve())
    lessons.cache_clear()


@cache
def lessons() -> tuple[Lesson, ...]:
    """Every lesson of lesson_paths(), numbered from 1."""
    return tuple(parse_lesson(path.read_text(encoding="utf-8"), n, path.name)
                 for n, path in enumerate(lesson_paths(), start=1))


def lesson(number: int) -> Lesson:
    """Lesson `number` (from 1); IndexError saying which exist."""
    all_ = lessons()
    if not 1 <= number <= len(all_):
        raise IndexError(f"there is no lesson {number}: lessons are 1 to {len(all_)}")
    return all_[number - 1]
