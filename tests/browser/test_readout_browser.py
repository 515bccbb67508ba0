"""The "W_O at work" section in Debian's headless Chromium at a phone's and a laptop's width: both charts drawn, no
chart text overlapping or cut, nothing wider than the page. The laptop's screenshot is the README's
(assets/wo-at-work.png with --update-assets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.test_layout_browser import check, open_page

QUERY = "mode=Train&view=Analysis&section=W_O+at+work&h=2"


@pytest.mark.parametrize("width", [390, 1400])
def test_wo_at_work_fits_its_width(server: str, browser, assets: Path, width: int) -> None:
    page = open_page(browser, server, QUERY, width, height=1100 if width == 390 else 1500, is_mobile=width == 390)
    try:
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2", timeout=120_000)
        check(page, f"wo-at-work-{width}")
        words = page.get_by_text("writes the previous token's identity")
        assert words.count() == 1
        if width == 1400:
            page.screenshot(path=str(assets / "wo-at-work.png"))
    finally:
        assert page.errors == []
        page.close()
