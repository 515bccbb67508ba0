"""The app's Heads view of a 4096-token text in Chromium: a box drawn on the overview moves the zoom there."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, wait_for_heatmaps, wait_for_query
from tests.unit.test_long import LONG_TEXT


@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason=f"{CHROMIUM} not installed")
def test_a_box_drawn_on_the_overview_moves_the_zoom_there(server: str, browser, assets: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1900})  # the overview and the zoom in one screenshot
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(f"{server}/?h=12&d_model=768&text={urllib.parse.quote(LONG_TEXT)}")
        wait_for_heatmaps(page, 12, timeout=180)
        page.wait_for_selector('[data-testid="stPlotlyChart"] >> nth=1')
        image = page.locator('[data-testid="stPlotlyChart"]').first.locator(".heatmaplayer image").nth(1)  # head 1
        box = image.bounding_box()
        assert abs(box["width"] - box["height"]) < 2  # square heatmaps
        old = page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')[1]"
                            ".querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href'))")
        page.mouse.move(box["x"] + 0.10 * box["width"], box["y"] + 0.50 * box["height"])
        page.mouse.down()
        page.mouse.move(box["x"] + 0.30 * box["width"], box["y"] + 0.60 * box["height"], steps=5)
        page.mouse.up()
        # the box's centre is at key 0.2 * 4096 = 819, query 0.55 * 4096 = 2253: the 128-wide zoom starts 64 before
        wait_for_query(page, r"zoom=2[01]\d\d&zoom_k=[67]\d\d")
        page.wait_for_function(
            """(old) => { const c = document.querySelectorAll('[data-testid="stPlotlyChart"]')[1];
                const imgs = c ? [...c.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href')) : [];
                return imgs.length === 4 && imgs.every(h => !old.includes(h)); }""",
            arg=old, polling="raf", timeout=60_000)
        page.screenshot(path=str(assets / "long-4096.png"))
        search = urllib.parse.parse_qs(page.evaluate("location.search")[1:])
        assert abs(int(search["zoom"][0]) + 64 - 2253) < 40 and abs(int(search["zoom_k"][0]) + 64 - 819) < 40
        assert errors == []
    finally:
        page.close()
