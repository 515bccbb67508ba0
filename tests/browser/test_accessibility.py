"""Accessibility in Debian's headless Chromium: axe-core (WCAG 2.2 A/AA and best practice) finds no violation of any
impact on any view (the issue asks for no serious or critical one); every chart is a named figure with a text
alternative; the keyboard alone reaches the controls, opens a head from the detector and logit-attribution heatmaps,
replays training, and passes a chart in 2 tab stops.

axe-core comes from npm (scripts/install.sh --dev); tests/axe.py says where it is looked for.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

import mha_viz.params  # noqa: F401 - registers the app's views and sections, which PAGES lists
from harness.browser import CHROMIUM, wait_for_query
from mha_viz.config import MHAConfig
from mha_viz.parts import SECTIONS, VIEWS
from mha_viz.sources import ConfigurableSource
from mha_viz.variants import VARIANTS, LayerVariant
from tests.axe import ALL, AXE_VERSION, axe_path, axe_violations, summary
from tests.browser.test_browser_views import new_page, settle

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

CAUSAL = "mode=Pretrained&model=mha-viz/induction-2l&"
TRAIN = "mode=Train&h=2&d_model=32&steps=40&"
WIDTHS = (390, 1024, 1400)  # a phone, a small laptop, a desktop: the widths the app is laid out for (README)
# A link to each attention variant (mha_viz.variants): a variant's own views are offered only when it is set. Each at
# its spec's example (away from its defaults), from the registry: a variant added in one file is checked too.
VARIANT_LINKS = {kind: urllib.parse.urlencode({"variant": kind, **spec.example})
                 for kind, spec in VARIANTS.items() if kind != "mha"}


def variant_views(kind: str) -> tuple[str, ...]:
    """Heads and the views the configurable menu offers only for this variant."""
    def menu(variant: LayerVariant | None) -> tuple[str, ...]:
        return VIEWS.menu("Configurable", ConfigurableSource("a b", MHAConfig(64, 8), variant=variant))

    return ("Heads", *(v for v in menu(LayerVariant(kind=kind)) if v not in menu(None)))


def menu_links(prefix: str, mode: str, source: object) -> list[str]:
    """A link to every view, and every Analysis section, the menus of this mode offer for this source."""
    views = VIEWS.menu(mode, source)
    links = [f"{prefix}view={urllib.parse.quote(v)}" for v in views]
    if "Analysis" in views:  # the view opens on the first section
        links += [f"{prefix}view=Analysis&section={urllib.parse.quote(s)}" for s in SECTIONS.menu(mode, source)[1:]]
    return links


def all_pages() -> list[str]:
    """Every page of every mode, from the registry and the sources each link opens (the bundled models, the shipped
    trained layer of the default settings, the configurable layer and its variants): a new view or section is in."""
    from mha_viz.params import CAUSAL_EXAMPLE, DEFAULT_TEXT, DEFAULTS
    from mha_viz.pretrained import INDUCTION_MODEL, bundled_model_installed, load_model
    from mha_viz.sources import ModelSource, TrainedSource
    from mha_viz.training.precomputed import precomputed_layer

    d = DEFAULTS
    trained = TrainedSource(precomputed_layer(d.task, d.h, d.d_model, d.seed, d.steps), "")
    pages = (menu_links("", "Configurable", ConfigurableSource("a b", MHAConfig(d.d_model, d.h)))
             + menu_links("weights=trained&", "Configurable", trained)
             + menu_links(TRAIN, "Train", trained)
             + menu_links(CAUSAL, "Pretrained", ModelSource(load_model(INDUCTION_MODEL), CAUSAL_EXAMPLE, "decoder"))
             + [f"{link}&view={urllib.parse.quote(v)}" for kind, link in VARIANT_LINKS.items()
                for v in variant_views(kind)])
    if bundled_model_installed():
        pages += menu_links("mode=Pretrained&", "Pretrained", ModelSource(load_model(), DEFAULT_TEXT, "encoder"))
    return pages


PAGES = all_pages()
# Streamlit draws some elements once their code has loaded, after the run: wait for those on the page.
DRAWN = """() => !document.querySelector('[data-testid="stSkeleton"]')
    && [...document.querySelectorAll('[data-testid="stTable"]')].every(t => t.querySelector('th'))
    && [...document.querySelectorAll('[data-testid="stDataFrame"]')].every(t => t.querySelector('canvas, table'))"""
CHARTS_LABELLED = """() => {
    const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
    return charts.every(c => c.querySelector('.main-svg')) && charts.every(c => {
        const figure = c.closest('[role="figure"]');  // in a closed expander the text is there but not rendered
        const text = figure && (c.closest('details:not([open])') ? figure.textContent : figure.innerText);
        return figure && figure.getAttribute('aria-label') && text.includes('Chart (')  // named, with its text
            && [...c.querySelectorAll('svg text')].every(t => t.closest('[aria-hidden="true"]'))  // no tick label read
            && [...c.querySelectorAll('button')].every(b => !b.closest('[aria-hidden="true"]'));  // the toolbar is
    });
}"""


@pytest.fixture(scope="module")
def axe() -> Path:
    path = axe_path()
    if path is None:
        pytest.skip(f"axe-core not installed: scripts/install.sh --dev installs it with npm (npm install --prefix "
                    f"<venv>/node axe-core@{AXE_VERSION}), or set MHA_VIZ_AXE to an axe.min.js")
    return path


@pytest.fixture(scope="module")
def tab(browser):
    """width -> one tab of that width, reused from page to page (a link opens each): one server, one browser."""
    opened: dict[int, object] = {}

    def get(width: int):
        if width not in opened:
            opened[width] = new_page(browser, viewport={"width": width, "height": 1000})
        return opened[width]

    yield get
    for page in opened.values():
        page.close()


@pytest.mark.parametrize("query", PAGES)
@pytest.mark.parametrize("width", WIDTHS)
def test_no_accessibility_violation_and_every_chart_is_a_named_figure(server: str, tab, axe: Path, width: int,
                                                                      query: str) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = tab(width)
    errors = len(page.errors)
    page.goto(f"{server}/?{query}")
    settle(page)
    page.wait_for_function(DRAWN, timeout=30_000)
    try:
        page.wait_for_function(CHARTS_LABELLED, timeout=30_000)
        labelled = True
    except PlaywrightTimeout:
        labelled = False
    violations = axe_violations(page, ALL)  # once the charts are labelled: their roles are checked too
    assert violations == [], summary(violations)
    assert labelled, "a chart is not a figure named for screen readers, with its text alternative"
    assert page.errors[errors:] == []


def tab_until(page, predicate: str, limit: int = 400) -> int:
    """Press Tab from the top of the page until the focused element satisfies the JS predicate (element => bool);
    returns the number of presses. Fails if it is never reached."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for presses in range(1, limit + 1):
        page.keyboard.press("Tab")
        if page.evaluate(f"() => {{ const e = document.activeElement; return !!e && ({predicate})(e); }}"):
            return presses
    raise AssertionError(f"{limit} presses of Tab never reached {predicate}")


def test_a_chart_takes_at_most_two_visible_tab_stops_one_of_them_the_png_download(server: str, browser) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1500})
    try:
        page.goto(f"{server}/?{CAUSAL}view=Generate")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000)
        page.mouse.move(0, 0)  # hover no chart
        tab_until(page, "e => !!e.closest('[data-testid=\"stMain\"]')")  # into the main area
        stops: dict[int, list[str]] = {}
        first = page.evaluate("() => { window.firstStop = document.activeElement; return true; }")
        for _ in range(300):
            chart, name, shown = page.evaluate("""() => {
                const e = document.activeElement, c = e.closest('[data-testid="stPlotlyChart"]');
                let shown = true;  // the focused button is not in a transparent (hover-only) toolbar
                for (let p = e; p; p = p.parentElement) shown = shown && parseFloat(getComputedStyle(p).opacity) > 0.5;
                return [c ? [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].indexOf(c) : -1,
                        e.getAttribute('aria-label') || e.getAttribute('data-title') || e.textContent.trim(), shown];
            }""")
            if chart >= 0:
                stops.setdefault(chart, []).append(name)
                assert shown, f"chart {chart}: {name} has the focus but is invisible"
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement === window.firstStop"):
                break
        assert first and sorted(stops) == [0, 1, 2, 3], stops  # every chart's toolbar is reachable ...
        assert all(len(names) <= 2 and "Download plot as a PNG" in names for names in stops.values()), stops  # ... briefly
    finally:
        assert page.errors == []
        page.close()


def pick_with_keyboard(page, label: str, option: str) -> None:
    """Tab to the select box with this label, type the option and press Enter, as a keyboard user would."""
    tab_until(page, f"e => e.getAttribute('role') === 'combobox' && "
                    f"!!e.closest('[data-testid=\"stSelectbox\"]')?.innerText.startsWith({label!r})")
    page.keyboard.type(option)
    page.keyboard.press("Enter")


def test_the_keyboard_opens_a_head_from_the_detector_heatmap(server: str, browser) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1500})
    try:
        page.goto(f"{server}/?{CAUSAL}view=Analysis&section=Head+detectors")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 2", timeout=60_000)
        pick_with_keyboard(page, "Open head", "layer 1, head 3")
        wait_for_query(page, r"layer=1.*head=3|head=3.*layer=1")
        page.locator(".gtitle").filter(has_text="layer 1, head 3").wait_for(timeout=60_000)
    finally:
        assert page.errors == []
        page.close()


def test_the_keyboard_opens_a_head_from_the_logit_attribution_while_generating(server: str, browser) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1500})
    try:
        page.goto(f"{server}/?{CAUSAL}view=Generate")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000)
        pick_with_keyboard(page, "Open head", "layer 1, head 2")
        wait_for_query(page, r"layer=1.*head=2|head=2.*layer=1")
        page.wait_for_function("() => document.body.innerText.includes('Layer 1, head 2 (click a head')",
                               timeout=60_000)
    finally:
        assert page.errors == []
        page.close()


def test_the_keyboard_moves_the_train_replay_slider_and_the_heads_follow(server: str, browser) -> None:
    page = new_page(browser)
    try:
        page.goto(f"{server}/?mode=Train&h=2&d_model=32&steps=40")
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 5", timeout=60_000)
        tab_until(page, "e => e.matches('input[type=range]') && !!e.closest('.st-key-train_step')")  # role slider
        painted = ("() => [...document.querySelectorAll('.st-key-figure_train_heads .heatmaplayer image')]"
                   ".map(e => e.getAttribute('href')).join()")
        before = page.evaluate(painted)
        assert before and page.evaluate("() => document.activeElement.getAttribute('aria-valuetext')") == "step 40"
        page.keyboard.press("Home")  # the first snapshot: the heads before training
        page.wait_for_function("() => document.querySelector('.st-key-train_step input[type=range]')"
                               ".getAttribute('aria-valuetext') === 'step 0'")
        page.wait_for_function(f"(old) => {{ const now = ({painted})(); return now && now !== old; }}", arg=before,
                               timeout=60_000)
    finally:
        assert page.errors == []
        page.close()
