"""How the app behaves over time, in Debian's headless Chromium: Play keeps playing, a layer button moves every
layer control at once, training shows nothing of another page."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from mha_viz.params import CAUSAL_EXAMPLE
from mha_viz.pretrained import INDUCTION_MODEL
from tests.browser import CHROMIUM, wait_for_query

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
        wait_for_query(page, r"step=2\b", timeout=30)
        wait_for_query(page, r"step=3\b", timeout=30)  # a second token without another click
        wait_for_query(page, r"step=8\b", timeout=60)  # ... and so on to the last one (8 new tokens)
        page.wait_for_function("() => !document.querySelector('.st-key-gen_play input').checked", timeout=30_000)
        assert page.locator(".st-key-gen_attention .gtitle").first.text_content().startswith("Where the query")
    finally:
        errors = page.errors
        page.close()
    assert errors == []
