"""How the app behaves over time, in Debian's headless Chromium: Play keeps playing, a layer button moves every
layer control at once, training shows nothing of another page."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, wait_for_heads, wait_for_query
from mha_viz.params import CAUSAL_EXAMPLE
from mha_viz.pretrained import INDUCTION_MODEL

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def new_page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    return page


def test_play_writes_token_after_token_to_the_end(server: str, browser) -> None:
    """The issue's case: Play moved one token and stopped (the toggle only reran its fragment)."""
    page = new_page(browser)
    query = urllib.parse.urlencode({"mode": "Pretrained", "model": INDUCTION_MODEL, "text": CAUSAL_EXAMPLE,
                                    "view": "Generate"})
    try:
        page.goto(f"{server}/?{query}")
        page.wait_for_selector(".st-key-gen_attention .js-plotly-plot", timeout=120_000)
        page.wait_for_function(IDLE_JS, timeout=60_000)
        page.locator(".st-key-gen_play label").click()
        wait_for_query(page, r"gen_step=2\b", timeout=30)
        wait_for_query(page, r"gen_step=3\b", timeout=30)  # a second token without another click
        wait_for_query(page, r"gen_step=8\b", timeout=60)  # ... and so on to the last one (8 new tokens)
        page.wait_for_function("() => !document.querySelector('.st-key-gen_play input').checked", timeout=30_000)
        assert page.locator(".st-key-gen_attention .gtitle").first.text_content().startswith("Where the query")
    finally:
        errors = page.errors
        page.close()
    assert errors == []


SHADOW = "[...document.querySelector('.st-key-layer_switch').querySelectorAll('*')].find(e => e.shadowRoot).shadowRoot"
CLICK_JS = f"""(layer) => {{
    const root = {SHADOW};
    root.querySelectorAll('button').forEach(b => b.dataset.drawn = 'before');  // a rerun draws new buttons
    root.querySelectorAll('button')[layer].click();
    return root.querySelector('.mv-title').textContent;  // synchronous: what the page says right after the click
}}"""
REDRAWN_JS = f"() => !{SHADOW}.querySelector('button[data-drawn]')"


def test_a_layer_click_moves_the_one_layer_control_and_its_subtitle_at_once(server: str, browser) -> None:
    """The issue's case: after a layer button, the sidebar's slider and the subtitle said the old layer until the
    server's rerun. Now the buttons are the only layer control, and they rewrite the subtitle themselves."""
    page = new_page(browser)
    sent: list[int] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda _: sent.append(1)))
    try:
        page.goto(f"{server}/?mode=Pretrained")
        page.locator('.st-key-layer_switch [data-mha-viz="renderer"] canvas').nth(11).wait_for(timeout=180_000)
        page.get_by_role("button", name="3", exact=True).wait_for()
        page.wait_for_function(IDLE_JS, timeout=60_000)
        page.wait_for_timeout(500)
        assert page.get_by_role("slider", name="Layer").count() == 0  # one control, not a slider beside it
        assert page.get_by_text("encoder layer 0 of 6").count() == 1
        before = len(sent)
        subtitle = page.evaluate(CLICK_JS, 3)
        assert "encoder layer 3 of 6 · 12 heads" in subtitle and len(sent) == before  # before the server heard
        assert page.get_by_text("encoder layer 0 of 6").count() == 0  # nothing on the page names the old layer
        wait_for_query(page, r"layer=3")  # the server heard once the clicks paused, and reran at layer 3 ...
        page.wait_for_function(IDLE_JS, timeout=60_000)
        assert len(sent) > before
        assert page.get_by_text("encoder layer 3 of 6").count() == 1  # ... which the control still says, once
        assert page.locator('.st-key-layer_switch button[aria-pressed="true"]').inner_text() == "3"
        page.goto(f"{server}/?mode=Pretrained&view=Lines&layer=3")  # another view: the same control
        page.wait_for_selector(".st-key-lines .js-plotly-plot", timeout=60_000)
        page.wait_for_function(IDLE_JS, timeout=60_000)
        assert page.evaluate(CLICK_JS, 5).count("layer 5 of 6") == 1
        wait_for_query(page, r"layer=5")
        page.wait_for_function(REDRAWN_JS, timeout=60_000)
        assert page.get_by_text("encoder layer 5 of 6").count() == 1
    finally:
        errors = page.errors
        page.close()
    assert errors == []


def test_while_a_model_trains_nothing_of_the_previous_page_is_shown(server: str, browser) -> None:
    """The issue's case: switching to Train left the configurable page's heatmaps (of another sentence) under the
    progress bar for as long as the training ran, as if the training were on that sentence."""
    page = new_page(browser)
    try:
        page.goto(f"{server}/?text=a+sentence+that+is+not+the+task&steps=3000&seed=7")  # a training of seconds
        wait_for_heads(page, 4)
        page.wait_for_function(IDLE_JS, timeout=60_000)
        page.get_by_role("radio", name="Train", exact=True).click()
        page.get_by_text("Training h = ").first.wait_for(timeout=60_000)  # the progress bar: training runs
        shown = page.evaluate("""() => ({
            training: document.body.innerText.includes('Training h = '),
            heads: document.querySelectorAll('.st-key-figure_heads').length,
            charts: document.querySelectorAll('.js-plotly-plot').length})""")
        shown["painted"] = page.locator('[data-mha-viz="renderer"] canvas').count()
        assert shown == {"training": True, "heads": 0, "charts": 0, "painted": 0}, shown  # no heatmap from before
        page.get_by_text("Stop training").click()  # no need to wait for it
        page.get_by_text("Training stopped").first.wait_for(timeout=60_000)
    finally:
        errors = page.errors
        page.close()
    assert errors == []


def test_the_layer_control_is_one_tab_stop_and_the_arrow_keys_step_it(server: str, browser) -> None:
    """One tab stop (the current layer's button); the arrow keys step the layer, and the focus stays on the control
    when the server's rerun draws it again, so that a keyboard user can go on stepping."""
    page = new_page(browser)
    try:
        page.goto(f"{server}/?mode=Pretrained&view=Lines&layer=2")
        page.wait_for_selector(".st-key-lines .js-plotly-plot", timeout=180_000)
        page.wait_for_function(IDLE_JS, timeout=60_000)
        tab_stops = page.evaluate(f"() => [...{SHADOW}.querySelectorAll('button')].map(b => b.tabIndex)")
        assert tab_stops == [-1, -1, 0, -1, -1, -1]  # only the current layer's button takes Tab
        page.evaluate(f"() => {SHADOW}.querySelectorAll('button').forEach(b => b.dataset.drawn = 'before')")
        page.locator('.st-key-layer_switch button[aria-pressed="true"]').press("ArrowRight")
        wait_for_query(page, r"layer=3")
        assert "layer 3 of 6" in page.evaluate(f"() => {SHADOW}.querySelector('.mv-title').textContent")
        page.wait_for_function(REDRAWN_JS, timeout=60_000)  # the server's rerun drew the buttons again ...
        assert page.evaluate(f"() => {SHADOW}.activeElement && {SHADOW}.activeElement.textContent") == "3"
        page.keyboard.press("ArrowRight")  # ... and the keyboard goes on from there
        wait_for_query(page, r"layer=4")
    finally:
        errors = page.errors
        page.close()
    assert errors == []
