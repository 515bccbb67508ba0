"""The Composition section in Chromium on the bundled induction model: it fits a phone and a desktop page with no
horizontal overflow, and its K-composition heatmap is the README's screenshot (assets/composition-k.png)."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM
from mha_viz.params import CAUSAL_EXAMPLE

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

URL = ("/?mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Composition&composition=k&text="
       + urllib.parse.quote(CAUSAL_EXAMPLE))
WIDTH_JS = """() => {
    const chart = document.querySelector('.st-key-figure_analysis_composition .js-plotly-plot');
    return [document.documentElement.scrollWidth, chart ? chart.getBoundingClientRect().right : -1];
}"""


@pytest.mark.parametrize("width", [390, 1400])
def test_composition_fits_the_page_and_says_what_induction_is(server: str, browser, assets: Path, width: int) -> None:
    page = browser.new_page(viewport={"width": width, "height": 1500})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(server + URL)
        page.wait_for_selector('[data-page-width]', state="attached", timeout=120_000)
        page.locator(".st-key-figure_analysis_composition .heatmaplayer").wait_for(timeout=120_000)
        page.get_by_text("mechanism of induction").wait_for(timeout=120_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
        page_width, chart_right = page.evaluate(WIDTH_JS)
        assert page_width <= width and 0 < chart_right <= width  # nothing runs off the edge
        if width == 1400:
            page.locator(".st-key-figure_analysis_composition").scroll_into_view_if_needed()
            page.screenshot(path=str(assets / "composition-k.png"), full_page=True)
    finally:
        assert errors == []
        page.close()
