"""The app in a real browser: a Streamlit server driven by Playwright in Debian's headless Chromium.

Screenshots of each scenario are saved into assets/ (the README shows them) with --update-assets,
else into a temporary folder.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import (
    CHROMIUM,
    painted_heatmaps,
    slider,
    slider_value,
    wait_for_heads,
    wait_for_heatmaps,
    wait_for_query,
)

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    yield page
    assert page.errors == []
    page.close()


def test_default_page_paints_one_heatmap_per_head(server: str, page, assets: Path) -> None:
    page.goto(server)
    wait_for_heatmaps(page, 4)
    assert len(painted_heatmaps(page)) == 4
    page.screenshot(path=str(assets / "heads.png"))


def press_until_heads(page, thumb, key: str, h: int) -> None:
    """Press key on the head slider; wait for h heatmaps and for h in the URL."""
    thumb.press(key)
    wait_for_heatmaps(page, h)
    wait_for_query(page, rf"[?&]h={h}(&|$)")


def test_keyboard_moves_the_head_slider_and_the_heads_follow(server: str, page) -> None:
    page.goto(f"{server}/?d_model=48")  # 48 = 3 * 16: h = 3, 4, 6 divide it, h = 5 does not
    wait_for_heatmaps(page, 4)
    thumb = slider(page, "Number of heads")
    thumb.focus()
    # One key press at a time, each followed by its own repaint: a key pressed while a rerun
    # redraws the slider may be overridden by the server's value.
    press_until_heads(page, thumb, "ArrowLeft", 3)  # 4 -> 3
    thumb.press("ArrowRight")  # 3 -> 4
    wait_for_heatmaps(page, 4)
    press_until_heads(page, thumb, "ArrowRight", 6)  # 4 -> 6: the slider skips 5, which does not divide 48
    assert page.get_by_text("does not divide").count() == 0


def test_a_copied_url_reproduces_the_view(server: str, browser, page) -> None:
    page.goto(f"{server}/?d_model=48&causal=true&text=the+cat+saw+the+dog")
    wait_for_heatmaps(page, 4)
    thumb = slider(page, "Number of heads")
    thumb.focus()
    press_until_heads(page, thumb, "ArrowLeft", 3)  # 4 -> 3
    copied = page.evaluate("location.href")
    assert urllib.parse.parse_qs(urllib.parse.urlparse(copied).query)["h"] == ["3"]
    other = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        other.goto(copied)
        wait_for_heatmaps(other, 3)
        assert painted_heatmaps(other) == painted_heatmaps(page)  # the same pixels, not just the same count
        assert slider_value(other, "Number of heads") == "3"
        assert other.get_by_text("causal", exact=False).count() >= 1
    finally:
        other.close()


def test_pretrained_mode_paints_the_bundled_models_twelve_heads(server: str, page, assets: Path) -> None:
    page.goto(f"{server}/?mode=Pretrained")
    wait_for_heads(page, 12, timeout=120)  # painted by the renderer, with the layer buttons above them
    page.wait_for_timeout(500)
    page.screenshot(path=str(assets / "pretrained.png"))


def test_a_512_token_input_paints(server: str, page, assets: Path) -> None:
    text = " ".join(f"w{i % 97}" for i in range(512))
    page.goto(f"{server}/?h=12&d_model=768&text={urllib.parse.quote(text)}")
    wait_for_heatmaps(page, 12, timeout=120)
    assert page.get_by_text("512 query tokens").count() == 1
    page.screenshot(path=str(assets / "long-input.png"))
