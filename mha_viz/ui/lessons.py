"""Lessons in the app: the sidebar's list of lessons, and the panel at the top of the main area that walks one.

The URL holds `lesson=N&step=M` (core fields of the state). Entering a step (a link, Start, Previous, Next) sets the
app's state to the step's state ONCE, as opening a share link with those parameters would; the student then moves
the controls freely. The panel asks the step's question (choices, or a task checked from the live state), reveals the
answer with its explanation (numbers from the step's measure, mha_viz.lessons.measures), and points at the step's
target: an outline drawn by CSS on the target's key class (`st-key-<key>`, Streamlit's documented class for a keyed
element) and a "Show me" button that scrolls to it and moves the keyboard focus there.
"""

from __future__ import annotations

import html
import json

import streamlit as st

from ..lessons import Lesson, Step, lessons
from ..lessons.measures import MEASURES, use_models
from ..params import DEFAULTS, ViewState, parse_query
from ..parts import all_fields
from .cache import cached
from .controls import ADVANCED_FIELDS, ADVANCED_OPEN
from .loaders import bundled_model
from .state import current

ENTERED = "_lesson_entered"  # session: the (lesson, step) whose state was applied last
REVEALED = "_lesson_revealed"  # session: the (lesson, step) whose answer is shown
NOTICES = "_lesson_notices"  # session: what was wrong with the lesson or step a link asked for
LESSON_FIELDS = ("lesson", "step")  # the URL fields of the lesson itself, which a step's state never sets
# What the student reads for a target (its widget's label; the one place that names targets for people).
CONTROL_NAMES = {"h": "Number of heads h", "d_model": "d_model", "variant": "the attention variant", "mode": "Model",
                 "weights": "the weights", "task": "the task", "text": "the sentence", "view": "the view menu",
                 "kv_heads": "the key/value heads", "layer": "the layer", "head": "the head"}


def _lesson(number: int) -> Lesson | None:
    all_ = lessons()
    return all_[number - 1] if 1 <= number <= len(all_) else None


def step_params(step: Step) -> ViewState:
    """The whole app state of a step: its parameters, the defaults elsewhere (as a share link holds)."""
    return parse_query(step.state)[0]


def apply(step: Step) -> None:
    """Set every widget key to the step's state (the defaults where the step names nothing), as seed_from_url does."""
    wanted = step_params(step)
    for name in all_fields():
        if name not in LESSON_FIELDS:
            st.session_state[name] = getattr(wanted, name)
    st.session_state[ADVANCED_OPEN] = any(getattr(wanted, f) != getattr(DEFAULTS, f) for f in ADVANCED_FIELDS)


def enter() -> list[str]:
    """Before the sidebar is drawn: check the lesson and step the state names, apply a newly entered step's state;
    return the notices (a lesson or step that does not exist)."""
    number, at = int(st.session_state.get("lesson", 0) or 0), int(st.session_state.get("step", 1) or 1)
    if number == 0:
        st.session_state.pop(ENTERED, None)
        return st.session_state.get(NOTICES, [])
    found = _lesson(number)
    if found is None:
        st.session_state[NOTICES] = [(f"There is no lesson {number}: the lessons are 1 to {len(lessons())} "
                                     "(the Lessons list in the sidebar).")]
        st.session_state["lesson"], st.session_state["step"] = 0, 1
        return st.session_state[NOTICES]
    if at > len(found.steps):
        st.session_state[NOTICES] = [(f"Lesson {number} has {len(found.steps)} steps, not {at}; "
                                     f"showing its last step, {len(found.steps)}.")]
        st.session_state["step"] = at = len(found.steps)
    if st.session_state.get(ENTERED) != (number, at):
        apply(found.steps[at - 1])
        st.session_state[ENTERED] = (number, at)
        st.session_state.pop(REVEALED, None)
    return st.session_state.get(NOTICES, [])


def _go(number: int, at: int) -> None:
    """on_click: enter step `at` of lesson `number` (0: leave the lesson)."""
    st.session_state["lesson"], st.session_state["step"] = number, at
    st.session_state.pop(ENTERED, None)  # entering again (Start on the step shown) applies its state again
    st.session_state.pop(NOTICES, None)


def _reveal(key: tuple[int, int]) -> None:
    st.session_state[REVEALED] = key


def menu() -> None:
    """The sidebar's list of lessons, each with its summary and a Start button."""
    active = int(st.session_state.get("lesson", 0) or 0)
    with st.expander("Lessons: predict, then see", icon=":material/school:"):
        for lesson in lessons():
            st.markdown(f"**{lesson.number}. {html.escape(lesson.title)}**  \n{lesson.summary}")
            st.button(f"Start lesson {lesson.number}", key=f"lesson_start_{lesson.number}", on_click=_go,
                      args=(lesson.number, 1), type="primary" if lesson.number == active else "secondary")


def target_key(step: Step) -> str | None:
    """The key class (st-key-<key>) of the element a step points at: a widget, a chart's figure, the view menu."""
    if step.target is None:
        return None
    return {"control": step.target_name, "chart": f"figure_{step.target_name}", "view": "view"}[step.target_kind]


def target_label(step: Step) -> str:
    """The target as the student reads it."""
    kind, name = step.target_kind, step.target_name
    if kind == "control":
        return CONTROL_NAMES.get(name, name) + " (in the sidebar)"
    if kind == "view":
        return f"the {name} view (in the view menu)"
    return f"the chart {name}"


SHOW_ME_JS = """<button type="button" id="lesson-show-me" style="font:inherit;padding:0.3rem 0.8rem;
border-radius:0.5rem;border:1px solid #a62f3c;background:transparent;color:inherit;cursor:pointer">Show me:
{label}</button><script>(() => {{
    const button = document.getElementById('lesson-show-me');
    if (!button) return;
    const find = () => document.querySelector('.st-key-' + CSS.escape({key}));
    const focusIn = (box) => {{
        const option = {option};
        const usable = (selector) => [...box.querySelectorAll(selector)]
            .filter(e => e.getAttribute('tabindex') !== '-1' && !e.disabled && e.getBoundingClientRect().width > 0);
        const fields = usable('[role="slider"], [role="combobox"], input, select, textarea');  // the control itself
        const buttons = usable('button, [tabindex]');  // an option of the view menu, else the first button
        const target = (option && buttons.find(e => e.textContent.trim() === option)) || fields[0] || buttons[0];
        if (target) target.focus({{preventScroll: true}});
        else {{ box.setAttribute('tabindex', '-1'); box.focus({{preventScroll: true}}); }}
    }};
    const go = () => {{
        const box = find();
        if (!box) return;
        box.scrollIntoView({{block: 'center'}});
        focusIn(box);
    }};
    button.onclick = () => {{
        const box = find();
        if (!box) {{ button.textContent = 'Not on this page: open ' + {label_js}; return; }}
        const r = box.getBoundingClientRect();
        const expand = document.querySelector('button[aria-label="Expand sidebar"]');
        if ((r.width === 0 || r.right <= 0) && expand) {{ expand.click(); setTimeout(go, 400); }}
        else go();
    }};
}})();</script>"""
OUTLINE_CSS = "<style>.st-key-{key} {{outline: 3px solid #a62f3c; outline-offset: 4px; border-radius: 0.5rem}}</style>"


def highlight(step: Step) -> None:
    """The outline around the step's target and the Show me button (focus moves to the target)."""
    key = target_key(step)
    if key is None:
        return
    st.html(OUTLINE_CSS.format(key=key))
    label = target_label(step)
    option = step.target_name if step.target_kind == "view" else None
    st.html(SHOW_ME_JS.format(key=json.dumps(key), option=json.dumps(option), label=html.escape(label),
                              label_js=json.dumps(label)), unsafe_allow_javascript=True)


def explanation(step: Step) -> str:
    """The step's explanation, its placeholders filled by its measure on the step's state (a task's: once reached)."""
    question = step.question
    if question is None or question.measure is None:
        return "" if question is None else question.explain
    params = {**step.state, **question.expect}
    measured = parse_query(params)[0]
    use_models(bundled_model)  # the measures read the models every session shares, not copies of their own
    numbers = cached(("lesson measure", question.measure, tuple(sorted(params.items()))),
                     lambda: MEASURES[question.measure](measured), spinner="Measuring…")
    return question.explain.format(**numbers)


def _answer(step: Step, key: tuple[int, int], s: ViewState) -> None:
    question = step.question
    if question is None:
        return
    revealed = st.session_state.get(REVEALED) == key
    if question.is_task:
        wanted = ", ".join(f"{name} = {value}" for name, value in question.expect.items())
        st.markdown(f"**Task:** {question.prompt}")
        done = question.reached(s)
        if done:
            st.success(f"Done: {wanted}.", icon=":material/check:")
        else:
            st.caption(f"Done when {wanted}.")
            st.button("Reveal the answer", key=f"lesson_reveal_{key[0]}_{key[1]}", on_click=_reveal, args=(key,))
        if done or revealed:
            _explain(step)
        return
    choice = st.radio(question.prompt, question.choices, index=None, key=f"lesson_choice_{key[0]}_{key[1]}")
    st.button("Check" if choice is not None else "Reveal the answer", key=f"lesson_reveal_{key[0]}_{key[1]}",
              on_click=_reveal, args=(key,))
    if revealed:
        right = question.choices[question.answer]
        if choice == right:
            st.success(f"Right: {right}.", icon=":material/check:")
        else:
            st.info(f"The answer: {right}." if choice is None else f"Not quite: the answer is {right}.")
        _explain(step)


def _explain(step: Step) -> None:
    try:
        st.markdown(explanation(step))
    except (ValueError, KeyError, IndexError, RuntimeError) as err:  # a lesson file's measure that cannot run here
        st.warning(f"This step's numbers could not be measured: {err}")


def panel() -> None:
    """The lesson's step at the top of the main area (nothing when no lesson is open)."""
    number, at = int(st.session_state.get("lesson", 0) or 0), int(st.session_state.get("step", 1) or 1)
    lesson = _lesson(number)
    if lesson is None:
        return
    step = lesson.steps[at - 1]
    with st.container(border=True, key="lesson_panel"):
        st.caption(f"Lesson {number} · step {at} of {len(lesson.steps)} · {lesson.title}")
        st.markdown(f"### {step.title}")
        st.markdown(step.text)
        highlight(step)
        _answer(step, (number, at), current())
        nav = st.columns(4)
        nav[0].button("Previous", key="lesson_previous", on_click=_go, args=(number, at - 1), disabled=at <= 1,
                      icon=":material/arrow_back:", width="stretch")
        last = at >= len(lesson.steps)
        nav[1].button("Finish" if last else "Next", key="lesson_next", on_click=_go,
                      args=(0, 1) if last else (number, at + 1), type="primary", width="stretch",
                      icon=":material/check:" if last else ":material/arrow_forward:")
        nav[2].button("Reset step", key="lesson_reset", on_click=_go, args=(number, at), width="stretch",
                      icon=":material/restart_alt:", help="This step's settings again")
        nav[3].button("Leave", key="lesson_leave", on_click=_go, args=(0, 1), width="stretch",
                      icon=":material/close:", help="Close the lesson; the app keeps its state")
