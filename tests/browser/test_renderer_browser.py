"""The one renderer (mha_viz/renderer.js) in the app, in Chromium: a layer button repaints every head before the
server hears of it, with the numbers the server computed (the bytes' decoding: tests/unit/test_layer_payload.py);
the hover shows the server's three decimals; the keyboard steps through layers; quick steps cost one rerun."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from harness.browser import CHROMIUM, wait_for_query
from mha_viz.figures.heads import layer_stack
from tests.unit.test_layer_payload import minilm_traces, to_fixed_3  # noqa: F401 - a fixture

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason=f"{CHROMIUM} not installed")
ROOT = '.st-key-layer_switch [data-mha-viz="renderer"]'  # Playwright's CSS sees into the component's shadow root
IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def open_heads(browser, server: str, sent: list[int] | None = None):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    if sent is not None:
        page.on("websocket", lambda ws: ws.on("framesent", lambda _: sent.append(1)))
    page.goto(f"{server}/?mode=Pretrained")
    page.locator(f"{ROOT} canvas").nth(11).wait_for(timeout=180_000)  # 12 heads painted
    page.wait_for_function(IDLE_JS, timeout=60_000)
    page.wait_for_timeout(500)
    return page


def painted(page) -> tuple[str, int]:
    root = page.locator(ROOT)
    return root.get_attribute("data-layer"), int(root.get_attribute("data-painted"))


@needs_chromium
def test_a_layer_button_repaints_before_the_server_hears_and_the_server_agrees(server: str, browser) -> None:
    sent: list[int] = []  # grows by one for every websocket message the page sends to the server
    page = open_heads(browser, server, sent)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        assert painted(page)[0] == "0" and page.locator(f"{ROOT} canvas").count() == 12
        before = len(sent)
        page.locator(f'{ROOT} .mv-layers button[data-index="3"]').click()
        assert painted(page)[0] == "3"  # repainted in the page
        assert len(sent) == before  # nothing went to the server yet (it hears once the clicks pause)
        wait_for_query(page, r"layer=3")  # then the server reran at layer 3 and wrote the URL
        page.wait_for_function(IDLE_JS, timeout=60_000)
        assert len(sent) > before
        assert page.get_by_text("encoder layer 3 of 6").count() == 1  # the subtitle, said once
        assert page.locator(f'{ROOT} .mv-layers button[aria-pressed="true"]').inner_text() == "3"
        # Three quick steps cost one rerun, at the last layer.
        before = len(sent)
        for layer in (4, 5, 4):
            page.locator(f'{ROOT} .mv-layers button[data-index="{layer}"]').click()
        assert painted(page)[0] == "4"
        wait_for_query(page, r"layer=4")
        page.wait_for_function(IDLE_JS, timeout=60_000)
        assert len(sent) - before <= 3  # one trigger (and its rerun's acknowledgements), not three
    finally:
        page.close()
    assert errors == []


@needs_chromium
def test_the_arrow_keys_step_through_layers_and_keep_the_focus(server: str, browser) -> None:
    page = open_heads(browser, server)
    try:
        page.locator(f'{ROOT} .mv-layers button[data-index="0"]').focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        assert painted(page)[0] == "2"
        assert page.evaluate("""() => {
            const host = [...document.querySelector('.st-key-layer_switch').querySelectorAll('*')].find(e => e.shadowRoot);
            return host.shadowRoot.activeElement.dataset.index; }""") == "2"
        wait_for_query(page, r"layer=2")
        page.locator(f"{ROOT} .mv-panel").nth(1).press("Enter")  # a head works from the keyboard too
        assert page.locator(f"{ROOT} .mv-panel").nth(1).get_attribute("aria-pressed") == "true"
    finally:
        page.close()


@needs_chromium
def test_hover_after_a_layer_click_shows_the_servers_three_decimals(server: str, browser, minilm_traces) -> None:  # noqa: F811
    """Every cell's hover value (toFixed(3)) is the server's, also on the cells whose nearest uint16 code would
    decode to other digits; each head's text alternative names its strongest weight."""
    stack = layer_stack(minilm_traces)[3]  # (H, t, s): layer 3, as the server computes it
    full = layer_stack(minilm_traces)
    lo, hi = min(float(np.nanmin(full)), 0.0), float(np.nanmax(full))  # as pack() finds them
    step = (hi - lo) / 65534
    nearest = (lo + np.rint((stack.astype(np.float64) - lo) / step) * step).astype(np.float32)  # (H, t, s)
    tricky = np.argwhere(to_fixed_3(nearest) != to_fixed_3(stack))  # the nearest code would show other digits
    assert len(tricky) > 3
    page = open_heads(browser, server)
    try:
        page.locator(f'{ROOT} .mv-layers button[data-index="3"]').click()
        for head, row, col in (tuple(int(i) for i in cell) for cell in tricky[:4]):
            canvas = page.locator(f'{ROOT} canvas[data-layer="3"][data-head="{head}"]')
            box = canvas.bounding_box()
            rows, cols = stack.shape[1:]
            page.mouse.move(box["x"] + (col + 0.5) * box["width"] / cols, box["y"] + (row + 0.5) * box["height"] / rows)
            tip = page.locator(f"{ROOT} .mv-tip").inner_text()
            assert f"weight {to_fixed_3(stack)[head, row, col]}" in tip, tip
        best = np.unravel_index(np.nanargmax(stack[0]), stack[0].shape)
        label = page.locator(f'{ROOT} canvas[data-layer="3"][data-head="0"]').get_attribute("aria-label")
        assert label.startswith("layer 3, head 0") and f"strongest weight {stack[0][best]:.3f}" in label
    finally:
        page.close()


@needs_chromium
@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_the_heads_fit_the_width_of_a_phone_a_laptop_a_desktop_and_a_projector(server: str, browser, width: int) -> None:
    """Every head, its labels and the layer buttons lie inside the page's width (they wrap, nothing scrolls sideways)."""
    page = browser.new_page(viewport={"width": width, "height": 1000})
    try:
        page.goto(f"{server}/?mode=Pretrained")
        page.locator(f"{ROOT} canvas").nth(11).wait_for(timeout=180_000)
        page.wait_for_function(IDLE_JS, timeout=60_000)
        right = page.locator(ROOT).evaluate("""(root) => Math.max(...[...root.querySelectorAll('canvas, button, .mv-panel')]
            .map(e => e.getBoundingClientRect().right))""")
        assert right <= width, (right, width)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    finally:
        page.close()


GRID = '.st-key-figure_heads [data-mha-viz="renderer"]'  # a configurable layer's Heads view


@needs_chromium
def test_a_configurable_layers_grid_hovers_the_libraries_weights_and_grows_on_a_projector(server: str, browser) -> None:
    """The default page's heads, painted by the renderer: each hover shows the library's own weight (toFixed(3)) of
    the same layer; one colour legend; a phone stacks the heads one a row, a projector puts all 4 in one row with
    larger cells."""
    from mha_viz.config import MHAConfig
    from mha_viz.sources import ConfigurableSource
    from mha_viz.text import DEFAULT_TEXT

    weights = ConfigurableSource(DEFAULT_TEXT, MHAConfig(64, 4)).trace(0).weights  # the page's defaults: seed 0
    tops = {}
    for width in (390, 2560):
        page = browser.new_page(viewport={"width": width, "height": 1000})
        try:
            page.goto(f"{server}/?h=4")
            page.locator(f"{GRID} canvas.mv-heatmap").nth(3).wait_for(timeout=180_000)
            page.wait_for_function(IDLE_JS, timeout=60_000)
            boxes = [page.locator(f'{GRID} canvas[data-head="{h}"]').bounding_box() for h in range(4)]
            tops[width] = ({round(b["y"]) for b in boxes}, min(b["width"] for b in boxes))
            legend = page.locator(f"{GRID} .mv-legend").get_attribute("aria-label")
            assert legend.startswith("colour scale from 0 to ") and f"{float(np.nanmax(weights)):.3f}" in legend
            if width == 2560:
                rows, cols = weights.shape[1:]
                for head, row, col in ((0, 2, 5), (1, 12, 0), (3, 7, 7)):
                    box = boxes[head]
                    page.mouse.move(box["x"] + (col + 0.5) * box["width"] / cols,
                                    box["y"] + (row + 0.5) * box["height"] / rows)
                    tip = page.locator(f"{GRID} .mv-tip").inner_text()
                    assert f"head {head}" in tip and f"weight {to_fixed_3(weights)[head, row, col]}" in tip, tip
        finally:
            page.close()
    assert len(tops[390][0]) == 4 and len(tops[2560][0]) == 1  # one a row on a phone; one row on a projector
    assert tops[2560][1] > tops[390][1]  # and larger there
