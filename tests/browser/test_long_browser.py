"""The app's Heads view of a 4096-token text in Chromium: a click on the overview moves the zoom there."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, wait_for_heatmaps, wait_for_query
from tests.unit.test_long import LONG_TEXT


@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason=f"{CHROMIUM} not installed")
def test_a_click_on_the_overview_moves_the_zoom_there(server: str, browser, assets: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 2600})  # the overview and the zoom in one screenshot
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(f"{server}/?h=12&d_model=768&text={urllib.parse.quote(LONG_TEXT)}")
        wait_for_heatmaps(page, 12, timeout=180)  # the overview: the renderer's 12 heads
        page.wait_for_selector('.st-key-heads_zoom [data-testid="stPlotlyChart"]')
        head = page.locator(".st-key-figure_heads_long canvas.mv-heatmap").nth(1)  # head 1
        box = head.bounding_box()
        assert abs(box["width"] - box["height"]) < 2  # square heatmaps
        zoom = page.locator('.st-key-heads_zoom [data-testid="stPlotlyChart"] .heatmaplayer image')
        old = [image.get_attribute("href") for image in zoom.all()]
        head.click(position={"x": 0.20 * box["width"], "y": 0.55 * box["height"]})
        # the click is in block (70, 25) of 32 x 32 positions, centred at query 2256, key 816: the 128-wide zoom
        # starts 64 before
        wait_for_query(page, r"zoom=2192&zoom_k=752")
        page.wait_for_function(
            """(old) => { const c = document.querySelector('.st-key-heads_zoom [data-testid="stPlotlyChart"]');
                const imgs = c ? [...c.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href')) : [];
                return imgs.length === 4 && imgs.every(h => !old.includes(h)); }""",
            arg=old, polling="raf", timeout=60_000)
        page.screenshot(path=str(assets / "long-4096.png"))
        assert page.get_by_text("is not valid here").count() == 0  # the fragment's rerun keeps every field as it was
        assert errors == []
    finally:
        page.close()
