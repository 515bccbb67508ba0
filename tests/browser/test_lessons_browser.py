"""A lesson walked end to end with the keyboard only (Tab, Enter, Space, arrow keys) in Debian's headless Chromium,
at a phone's and a laptop's width: every step's "Show me" moves the focus into its outlined target (while a question
is open: the cover that stands for the page), which is on screen; each question is answered and its explanation
shown. The laptop's first step, answered, is the README's
screenshot (assets/lesson-step.png with --update-assets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mha_viz.lessons import LESSON_FILES, lessons
from mha_viz.ui.lessons import explanation, target_key
from tests.axe import ALL, axe_path, axe_violations, summary
from tests.browser.test_lesson_walk_browser import open_lesson

LESSON = LESSON_FILES.index("shapes.toml") + 1
MAX_TABS = 400

# The focused element: its accessible name / text, and whether it is inside a keyed element.
ACTIVE_JS = """() => { const e = document.activeElement; return e ? (e.getAttribute('aria-label') || e.textContent
    || e.value || '').trim() : ''; }"""
FOCUS_IN_JS = "(key) => !!(document.activeElement && document.activeElement.closest('.st-key-' + CSS.escape(key)))"
# The outlined target: drawn (outline on, a size), and inside the viewport.
ON_SCREEN_JS = """(key) => { const e = document.querySelector('.st-key-' + CSS.escape(key)); if (!e) return 'missing';
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    if (s.outlineStyle !== 'solid' || parseFloat(s.outlineWidth) < 2) return 'no outline: ' + s.outlineStyle;
    if (r.width < 2 || r.height < 2) return 'no size';
    const inside = r.left >= -1 && r.right <= innerWidth + 1 && r.top < innerHeight && r.bottom > 0;
    return inside ? 'ok' : `outside the viewport: ${Math.round(r.left)},${Math.round(r.top)} ${Math.round(r.right)},${Math.round(r.bottom)}`; }"""


def tab_to(page, matches: str, *args: object) -> None:
    """Press Tab until the focused element satisfies the JS predicate `matches`."""
    for _ in range(MAX_TABS):
        if page.evaluate(matches, *args):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {matches} {args}; last focus: {page.evaluate(ACTIVE_JS)!r}")


def wait_idle(page) -> None:
    page.wait_for_timeout(300)  # the rerun a key started, then its end
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)


def focused_text(page, text: str) -> str:
    return f"() => document.activeElement && document.activeElement.textContent.trim().endsWith({text!r})"


@pytest.mark.parametrize("width", [390, 1400])
def test_a_lesson_walked_with_the_keyboard_shows_every_target(server: str, browser, assets: Path, width: int) -> None:
    lesson = lessons()[LESSON - 1]
    page = open_lesson(browser, server, LESSON, width)
    try:
        for number, step in enumerate(lesson.steps, start=1):
            page.get_by_text(f"Lesson {LESSON} · step {number} of {len(lesson.steps)}").wait_for(timeout=120_000)
            wait_idle(page)
            key = target_key(step, covered=not step.question.is_task)
            page.keyboard.press("Escape")
            page.evaluate("() => document.activeElement && document.activeElement.blur()")
            tab_to(page, "() => document.activeElement && document.activeElement.id === 'lesson-show-me'")
            page.keyboard.press("Enter")
            page.wait_for_function(FOCUS_IN_JS, arg=key, timeout=10_000)
            page.wait_for_timeout(500)  # smooth scrolling, the sidebar sliding in
            assert page.evaluate(ON_SCREEN_JS, key) == "ok", (width, number, key)
            question = step.question
            if question.is_task:  # the focus is on the target control: arrow keys until the state is reached
                for _ in range(12):
                    if page.get_by_text("Done:").count():
                        break
                    page.keyboard.press("ArrowRight")
                    wait_idle(page)
                page.get_by_text("Done:").wait_for(timeout=60_000)
            else:
                group = f"lesson_choice_{LESSON}_{number}"
                tab_to(page, FOCUS_IN_JS, group)
                page.keyboard.press("Space")  # the first choice
                for _ in range(question.answer):
                    page.keyboard.press("ArrowDown")
                wait_idle(page)
                tab_to(page, focused_text(page, "Check"))
                page.keyboard.press("Enter")
                page.get_by_text("Right:").wait_for(timeout=60_000)
            first_line = explanation(step).splitlines()[0][:40]
            page.get_by_text(first_line).first.wait_for(timeout=60_000)
            if width == 1400 and number == 1:
                page.get_by_text(first_line).first.scroll_into_view_if_needed()
                page.screenshot(path=str(assets / "lesson-step.png"))
            last = number == len(lesson.steps)
            tab_to(page, focused_text(page, "Finish" if last else "Next"))
            page.keyboard.press("Enter")
            wait_idle(page)
        page.wait_for_function("() => !new URL(location.href).searchParams.has('lesson')", timeout=60_000)
    finally:
        assert page.errors == []
        page.close()


def test_a_lesson_step_has_no_accessibility_violation(server: str, browser) -> None:
    """axe on a step with its question open (the cover, the focused question) and with its answer revealed: the
    panel, its Show me button, the outlined control."""
    if axe_path() is None:
        pytest.skip("axe-core not installed (scripts/install.sh --dev)")
    lesson = lessons()[LESSON - 1]
    page = open_lesson(browser, server, LESSON, 1400)
    try:
        page.get_by_text(f"Lesson {LESSON} · step 1 of {len(lesson.steps)}").wait_for(timeout=120_000)
        wait_idle(page)
        violations = axe_violations(page, ALL)
        assert violations == [], summary(violations)
        page.get_by_role("button", name="Reveal the answer").click()
        page.get_by_text("The answer:").wait_for(timeout=60_000)
        violations = axe_violations(page, ALL)
        assert violations == [], summary(violations)
    finally:
        assert page.errors == []
        page.close()
