"""Every step of every lesson walked in Debian's headless Chromium at a phone's and a laptop's width, as a student
moves through it with Next: when a step opens, nothing on the page gives its answer away (tests/lesson_answers.py:
the page's text, chart text included), the keyboard focus is on the step's question (one Tab reaches its first
answer control), and the step's target is on screen (its bounding box inside the viewport) without Show me, a sidebar
control a task moves by its copy under the task (the sidebar is closed on a phone); after
Check the answer and the page it was hiding are there. On a phone, a sidebar that Show me opened closes when the step
changes."""

from __future__ import annotations

import pytest

from mha_viz.lessons import Lesson, Step, lessons
from mha_viz.ui.lessons import SIDEBAR_CONTROLS, on_screen_key, question_key, target_key
from tests.lesson_answers import answer_texts, appears

WIDTHS = (390, 1400)
HEIGHT = 900
# Everything the page says in words: its rendered text and the text drawn inside charts (SVG).
PAGE_TEXT_JS = """() => document.body.innerText + '\\n' +
    [...document.querySelectorAll('svg text')].map(t => t.textContent).join('\\n')"""
FOCUS_JS = """(anchor) => { const e = document.activeElement; return !!e && (e.id === anchor); }"""
ACTIVE_JS = """() => { const e = document.activeElement; if (!e) return '';
    return [e.tagName, e.id, e.getAttribute('type') || '', e.getAttribute('aria-label') || '',
            (e.textContent || '').trim().slice(0, 60)].join(' | '); }"""
# Whether the focused element is inside the element with this key (a radio of the question, a control).
FOCUS_IN_JS = "(key) => !!(document.activeElement && document.activeElement.closest('.st-key-' + CSS.escape(key)))"


def open_lesson(browser, server: str, number: int, width: int):
    page = browser.new_page(viewport={"width": width, "height": HEIGHT}, is_mobile=width < 640)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(f"{server}/?lesson={number}")
    return page


def wait_idle(page) -> None:
    """The rerun a click started, then its end: no running indicator, and one lesson panel (a run that loads a model
    draws the new panel before the old one, faded, is taken away at its end; on a phone the indicator is hidden)."""
    page.wait_for_timeout(400)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    page.wait_for_function("() => document.querySelectorAll('.st-key-lesson_panel, .st-key-lesson_next').length <= 2",
                           timeout=180_000)
    page.wait_for_timeout(300)


def in_viewport(page, selector: str) -> str:
    """'ok' when the first element matching selector is drawn and its box is inside the viewport, else why not."""
    box = page.locator(selector).first.bounding_box()
    if box is None:
        return "not drawn"
    if box["width"] < 2 or box["height"] < 2:
        return "no size"
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    inside = box["x"] >= -1 and box["x"] + box["width"] <= width + 1 and box["y"] < height and box["y"] + box["height"] > 0
    return "ok" if inside else f"outside the viewport: {box}"


def sidebar_control(step: Step) -> bool:
    return step.target_kind == "control" and step.target_name in SIDEBAR_CONTROLS


def check_opened_step(page, lesson: Lesson, number: int, step: Step, width: int) -> None:
    """The step as it opens: focus on its question, its target on screen, its answer nowhere on the page."""
    where = f"lesson {lesson.number} step {number} at {width} px"
    anchor = question_key((lesson.number, number))
    page.wait_for_function(FOCUS_JS, arg=anchor, timeout=20_000)
    text = page.evaluate(PAGE_TEXT_JS)
    assert [t for t in answer_texts(step) if appears(t, text)] == [], f"{where}: the answer is on the page"
    covered = step.question is not None and not step.question.is_task
    key = on_screen_key(step, covered)  # a sidebar control a task moves: its copy under the task (closed on a phone)
    if key is not None:
        assert in_viewport(page, f".st-key-{key}") == "ok", f"{where}: the target {key} is not on screen"
    if width >= 640 and step.target_kind == "control":  # Show me says sidebar or main area, as the control is
        target, panel = page.locator(f".st-key-{step.target_name}").first.bounding_box(), \
            page.locator(".st-key-lesson_panel").bounding_box()
        in_sidebar = target["x"] + target["width"] <= panel["x"]  # the main area starts where the panel does
        assert in_sidebar == sidebar_control(step), f"{where}: {step.target} is not where Show me says"
    page.keyboard.press("Tab")  # one Tab from the question reaches its first answer control
    first = f"lesson_choice_{lesson.number}_{number}" if covered else None
    if first is not None:
        assert page.evaluate(FOCUS_IN_JS, first), f"{where}: Tab reached {page.evaluate(ACTIVE_JS)}"
    else:
        assert page.evaluate(FOCUS_IN_JS, "lesson_question") or page.evaluate(FOCUS_IN_JS, "lesson_panel"), where
    page.keyboard.press("Shift+Tab")


def answer(page, lesson: Lesson, number: int, step: Step) -> None:
    """Pick the right choice, Check, and see the answer and the page it hid."""
    q = step.question
    group = page.locator(f".st-key-lesson_choice_{lesson.number}_{number}")
    group.get_by_text(q.choices[q.answer], exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Check", exact=True).click()
    page.get_by_text("Right:").first.wait_for(timeout=180_000)
    wait_idle(page)
    if step.target_kind == "chart":  # the page it hid is drawn
        page.locator(f".st-key-figure_{step.target_name}").wait_for(timeout=180_000)
    text = " ".join(page.evaluate(PAGE_TEXT_JS).split())
    expected = [rendered(t) for t in answer_texts(step) if not t.startswith(("The answer:", "Not quite"))]
    missing = [t for t in expected if not appears(t, text)]
    assert missing == [], f"lesson {lesson.number} step {number}: not on the page after Check"


def rendered(markdown: str) -> str:
    """A line of Markdown as the page shows it: no emphasis marks."""
    return markdown.replace("**", "").replace("*", "").replace("\\", "")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lesson", lessons(), ids=lambda lesson: lesson.source)
def test_every_step_hides_its_answer_focuses_its_question_and_shows_its_target(server: str, browser, lesson: Lesson,
                                                                               width: int) -> None:
    page = open_lesson(browser, server, lesson.number, width)
    try:
        for number, step in enumerate(lesson.steps, start=1):
            page.get_by_text(f"Lesson {lesson.number} · step {number} of {len(lesson.steps)}").wait_for(
                timeout=180_000)
            wait_idle(page)
            check_opened_step(page, lesson, number, step, width)
            if step.question is not None and not step.question.is_task:
                answer(page, lesson, number, step)
            if number < len(lesson.steps):
                wait_idle(page)
                page.locator(".st-key-lesson_next button").click()
    finally:
        errors = page.errors
        page.close()
    assert errors == []


def test_on_a_phone_a_sidebar_show_me_opened_closes_when_the_step_changes(server: str, browser) -> None:
    lesson, number, step = next((les, n, s) for les in lessons() for n, s in enumerate(les.steps, start=1)
                                if sidebar_control(s) and n < len(les.steps))
    page = open_lesson(browser, server, lesson.number, 390)
    page.goto(page.url + f"&step={number}")
    try:
        page.get_by_text(f"Lesson {lesson.number} · step {number} of").wait_for(timeout=180_000)
        wait_idle(page)
        key = target_key(step)
        page.get_by_role("button", name="Show me").click()
        page.wait_for_function(FOCUS_IN_JS, arg=key, timeout=10_000)
        page.wait_for_timeout(600)
        assert in_viewport(page, f".st-key-{key}") == "ok"  # Show me opened the sidebar on the control
        page.get_by_role("button", name="Collapse sidebar").wait_for(timeout=5_000)
        page.locator(".st-key-lesson_next button").evaluate("b => b.click()")  # under the sidebar on a phone
        page.get_by_text(f"Lesson {lesson.number} · step {number + 1} of").wait_for(timeout=180_000)
        page.wait_for_function(FOCUS_JS, arg=question_key((lesson.number, number + 1)), timeout=20_000)
        page.wait_for_timeout(600)
        assert in_viewport(page, f".st-key-{key}") != "ok"  # the sidebar slid away
        assert in_viewport(page, 'button[aria-label="Expand sidebar"]') == "ok"
    finally:
        errors = page.errors
        page.close()
    assert errors == []
