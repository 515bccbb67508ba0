"""Layouts at the widths people use, in Debian's headless Chromium: a phone (390 px), a projector (1024 x 768),
a laptop (1400 px) and a large screen (2560 px). In every chart no title, axis title, tick label, legend entry or
value label overlaps another or the chart's toolbar, and none runs past the chart's edge (read from the rendered
SVG's geometry); the page chooses its layout from its width, not from the browser's name.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, renderers, wait_for_view

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

SHOTS = Path(os.environ.get("MHA_VIZ_SHOTS", "/tmp/mha-viz-layout"))  # screenshots to look at; never the repo
CONCAT = "view=" + urllib.parse.quote("Concat → W_O")
GENERATE = "mode=Pretrained&model=mha-viz/induction-2l&view=Generate&text=a+b+c+d+e+a+b+c+d"
STATS = "view=Analysis&section=Head+statistics"
IPAD_UA = ("Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 "
           "Safari/604.1")

# Every text of every chart: [chart, text, rect, rotated] -> the pairs that overlap, the texts outside their chart,
# the texts under the toolbar. Rotated tick labels are checked against the others by their box, not each other
# (the boxes of neighbouring slanted labels overlap while the letters do not).
PROBLEMS_JS = """() => {
    const hit = (a, b) => a.left + 1 < b.right && b.left + 1 < a.right && a.top + 3 < b.bottom && b.top + 3 < a.bottom;
    const problems = [];
    [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].forEach((chart, n) => {
        const plot = chart.querySelector('.js-plotly-plot');
        if (!plot) return;
        const box = plot.getBoundingClientRect();
        const bar = chart.querySelector('.modebar');
        const barBox = bar && bar.getBoundingClientRect();
        const texts = [...plot.querySelectorAll('svg text')]
            .filter(e => !e.closest('.hoverlayer') && e.textContent.trim())
            .map(e => ({text: e.textContent, r: e.getBoundingClientRect(),
                        rotated: /rotate\\(\\s*-?[1-9]/.test(e.getAttribute('transform') || '')}))
            .filter(t => t.r.width > 0 && t.r.height > 0);
        for (const t of texts) {
            const r = t.r;
            if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
                problems.push(`chart ${n}: "${t.text}" runs past the chart's edge`);
            if (barBox && barBox.width > 0 && hit(r, barBox)) problems.push(`chart ${n}: "${t.text}" under the toolbar`);
        }
        const frames = [...plot.querySelectorAll('.nsewdrag')].map(e => e.getBoundingClientRect());
        for (const fill of [...plot.querySelectorAll('.cbfill')].map(e => e.getBoundingClientRect())) {
            for (const t of texts) if (hit(t.r, fill)) problems.push(`chart ${n}: "${t.text}" on a colour bar`);
            if (frames.some(f => hit(f, fill))) problems.push(`chart ${n}: a colour bar covers the plot`);
        }
        for (let i = 0; i < texts.length; i++)
            for (let j = i + 1; j < texts.length; j++)
                if (!(texts[i].rotated && texts[j].rotated) && hit(texts[i].r, texts[j].r))
                    problems.push(`chart ${n}: "${texts[i].text}" overlaps "${texts[j].text}"`);
    });
    return problems;
}"""
# Elements of the page whose text is cut: wider content than box (a label shortened to "P." or a table that scrolls
# its last column out of sight).
CUT_JS = """(selector) => [...document.querySelectorAll(selector)].flatMap(root => [root, ...root.querySelectorAll('*')])
    .filter(e => e.getBoundingClientRect().width > 2)  // not the visually hidden inputs of screen readers
    .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')
    .map(e => (e.textContent || e.getAttribute('aria-label') || e.tagName).slice(0, 40))"""
SIGNATURE_JS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')].map(
    p => [Math.round(p.getBoundingClientRect().width), Math.round(p.getBoundingClientRect().height),
          p.querySelectorAll('svg text').length].join('x')).join(',')"""


def open_page(browser, server: str, query: str, width: int, height: int = 1200, **kwargs):
    page = browser.new_page(viewport={"width": width, "height": height}, **kwargs)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(f"{server}/?{query}")
    settle(page)
    return page


def settle(page, timeout: float = 120) -> None:
    """Wait until the page is drawn for its width: a chart (or the renderer's heads) is shown, no run is going, and
    the charts stay as they are for a second (the page reruns once the browser has told it its width)."""
    deadline = time.monotonic() + timeout
    before = None
    while True:
        wait_for_view(page, timeout)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                               timeout=timeout * 1000)
        now = (page.evaluate(SIGNATURE_JS), [(r["painted"], r["heads"], round(r["right"])) for r in renderers(page)])
        if now == before or time.monotonic() > deadline:
            return
        before = now
        page.wait_for_timeout(1000)


def check(page, name: str) -> None:
    """No overlapping or cut chart text; nothing wider than the page; a screenshot to look at."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    assert page.evaluate(PROBLEMS_JS) == [], name
    width = page.viewport_size["width"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width, name
    assert all(r["right"] <= width + 1 for r in renderers(page)), name  # the renderer's heads fit the page too


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_concat_to_w_o_fits_its_width(server: str, browser, width: int) -> None:
    page = open_page(browser, server, CONCAT, width, is_mobile=width == 390)
    try:
        check(page, f"concat-{width}")
        frames = page.evaluate("""() => [...document.querySelector('.js-plotly-plot').querySelectorAll('.nsewdrag')]
            .map(e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; })""")
        assert len(frames) == 3  # concat, W_O, output: none drawn over another
        for i, a in enumerate(frames):
            for b in frames[i + 1:]:
                assert a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2]
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize("width", [390, 1024, 1400])
def test_generate_fits_its_width(server: str, browser, width: int) -> None:
    page = open_page(browser, server, GENERATE, width, height=768 if width == 1024 else 1200, is_mobile=width == 390)
    try:
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000)
        settle(page)
        check(page, f"generate-{width}")
        labels = page.evaluate("() => [...document.querySelector('.js-plotly-plot').querySelectorAll('.bartext')]"
                               ".map(e => e.textContent)")
        assert labels and all(label.endswith("%") for label in labels)
        play = page.locator('[data-testid="stCheckbox"]').filter(has_text="Play")
        assert play.count() == 1 and page.evaluate(CUT_JS, '[data-testid="stCheckbox"]') == []  # "Play", not "P."
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize("width", [390, 1024, 1400])
def test_lines_with_eight_heads_keeps_its_legend(server: str, browser, width: int) -> None:
    page = open_page(browser, server, "h=8&d_model=64&view=Lines", width, is_mobile=width == 390)
    try:
        check(page, f"lines-h8-{width}")
        legend = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot .legendtext')].map(e => e.textContent)")
        assert legend == [f"head {h}" for h in range(8)]
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize("width", [390, 1024, 1400])
def test_head_statistics_fit_their_width(server: str, browser, width: int) -> None:
    page = open_page(browser, server, STATS, width, is_mobile=width == 390)
    try:
        check(page, f"head-stats-{width}")
        if width >= 1024:  # the table shows every column (a phone scrolls it sideways)
            assert page.evaluate(CUT_JS, '[data-testid="stDataFrame"]') == []
        titles = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')][0].querySelectorAll("
                               "'.gtitle, .annotation-text').length")
        assert titles == 1  # the opened head says "head 0" once
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize(("width", "agent"), [
    (640, None),  # a narrow desktop window
    (820, IPAD_UA),  # an iPad held upright: no "Mobi" in its user agent
    (1024, None),
    (1400, None),
])
def test_heads_per_row_follow_the_width_not_the_user_agent(server: str, browser, width: int, agent: str | None) -> None:
    page = open_page(browser, server, "h=4", width, **({"user_agent": agent} if agent else {}))
    try:
        check(page, f"heads-{width}")
        sizes = page.locator('[data-mha-viz="renderer"] canvas.mv-heatmap').evaluate_all(
            "cs => cs.map(c => Math.round(c.getBoundingClientRect().width))")
        assert len(sizes) == 4 and min(sizes) >= 110  # no strips squeezed four to a narrow row
        (grid,) = renderers(page)
        assert grid["right"] <= grid["left"] + grid["width"] + 1  # every head inside the renderer's box
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize("width", [390, 1024])
@pytest.mark.parametrize("query", [
    "view=One+head",
    "view=Analysis&section=Redundancy",
    "mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Logit+attribution",
    "mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Head+detectors",
    "weights=trained&h=4",
])
def test_other_views_fit_their_width(server: str, browser, query: str, width: int) -> None:
    page = open_page(browser, server, query, width, is_mobile=width == 390)
    try:
        check(page, f"{query.split('=')[-1]}-{width}")
    finally:
        assert page.errors == []
        page.close()


IND = "mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section="


@pytest.mark.parametrize(("query", "widths"), [
    (IND + "Circuits", (390, 1024, 1400, 2560)),
    (IND + "Composition", (390, 1024, 1400, 2560)),
    (IND + "Patching", (390, 2560)),  # 1400 and the README's shot: test_patching_browser
    (IND + "W_O+at+work", (1024, 2560)),  # 390 and 1400: test_readout_browser
    ("mode=Pretrained&view=Analysis&section=Circuits", (390, 1400)),  # a large vocabulary: sampled top-k rows
    ("mode=Pretrained&view=Analysis&section=Composition", (390, 1400)),  # 6 x 12 heads
    ("mode=Train&h=2&view=Analysis&section=Circuits", (390,)),  # a 26-token table
    ("view=Shapes+%26+cost&cost_variant=mla", (390, 1024, 1400, 2560)),  # the variants' costs, the presets' table
])
def test_new_analysis_sections_fit_every_width(server: str, browser, query: str, widths: tuple[int, ...]) -> None:
    for width in widths:
        page = open_page(browser, server, query, width, is_mobile=width == 390)
        try:
            assert page.locator('[data-testid="stException"]').count() == 0
            check(page, f"{query.split('=')[-1]}-{'minilm-' if 'model=' not in query else ''}{width}")
        finally:
            assert page.errors == []
            page.close()
