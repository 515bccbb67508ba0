"""The bundled long-context model mha-viz/recall-16k in Chromium: its sidebar button opens Heads on a 2,048-token
haystack whose long view paints and fits at 390, 1024, 1400 and 2560 px, with no serious or critical axe violation;
Generate writes after the whole haystack, its step's row over 2,048 keys painted and fitting at the same widths.
With --update-assets, the README's picture (assets/recall-16k.png): the model at 16,384 tokens, layer 1's retrieval
heads, the zoom on the queries at the end and the keys around one needle."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from harness.browser import CHROMIUM, wait_for_query
from mha_viz.training.recall import example_text, sample
from tests.browser.test_long_model_browser import assert_fits_and_axe_clean, open_long, painted

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

BUTTON = "recall-16k (causal, 16k positions)"


def open_by_button(browser, server: str, label: str, name: str, width: int, height: int = 1400):
    """The Pretrained page after the keyboard (as a click would) pressed a bundled model's sidebar button (label) and
    the URL names the model (name after "mha-viz/"); on a phone the sidebar is opened for it and closed again."""
    page = browser.new_page(viewport={"width": width, "height": height}, is_mobile=width == 390)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(f"{server}/?mode=Pretrained")
    if width < 600:  # the sidebar starts closed on a phone
        page.locator('[data-testid="stExpandSidebarButton"]').click()
    page.get_by_role("button", name=label).focus()
    page.keyboard.press("Enter")
    wait_for_query(page, rf"model=mha-viz(/|%2F){name}")
    if width < 600:
        page.locator('[data-testid="stSidebarCollapseButton"] button').click()
    return page


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_its_button_opens_a_long_haystack_in_heads(server: str, browser, width: int) -> None:
    page = open_by_button(browser, server, BUTTON, "recall-16k", width)  # in Heads, the default view
    try:
        deadline = time.monotonic() + 240
        while not all(painted(page)):
            assert time.monotonic() < deadline, f"the long view did not paint: {painted(page)}"
            time.sleep(0.2)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=240_000)
        assert page.get_by_text("A long text: 2048 tokens").count() == 1
        assert painted(page)[0] == 4  # the layer's four heads
        assert_fits_and_axe_clean(page, width)
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_generate_writes_after_the_whole_haystack(server: str, browser, width: int) -> None:
    """Generate on the 2,048-token haystack: the step's row over every key paints and fits, axe is clean."""
    page = open_by_button(browser, server, BUTTON, "recall-16k", width)
    try:
        wait_for_query(page, r"text=")  # the haystack is in the URL: the link opens Generate on it
        url = page.url
        page.goto(re.sub(r"view=[^&]*", "view=Generate", url) if "view=" in url else f"{url}&view=Generate")
        row = page.locator(".st-key-gen_attention .heatmaplayer image")
        row.wait_for(timeout=240_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=240_000)
        assert page.get_by_text("Generate writes after all of them").count() == 1
        assert page.get_by_text("earlier tokens of the prompt").count() == 1
        box = page.locator(".st-key-gen_attention").bounding_box()
        assert box is not None and box["width"] > min(width, 1400) / 2 - 40  # the main area's width, not a sliver
        assert_fits_and_axe_clean(page, width)
    finally:
        assert page.errors == []
        page.close()


def test_the_readme_picture_at_16k_tokens(server: str, browser, request: pytest.FixtureRequest, assets: Path) -> None:
    if not request.config.getoption("--update-assets"):
        pytest.skip("draws 16,384 tokens: only with --update-assets, which writes assets/recall-16k.png")
    import torch

    text = example_text(16384, 4, seed=3)  # "goat" written at 4,695 and asked for at 16,376 (the model card's input)
    tokens, _ = sample(16384, 4, torch.Generator().manual_seed(3))
    needle = int(np.nonzero(tokens[1:-8].numpy() == int(tokens[-8]))[0][0]) + 1
    page = open_long(browser, server, "mha-viz/recall-16k", 1400, text=text,
                     query=f"&layer=1&zoom={16384 - 128}&zoom_k={needle - 64}", timeout=600, height=2350)
    try:
        assert page.get_by_text("A long text: 16384 tokens").count() == 1
        page.screenshot(path=str(assets / "recall-16k.png"))
    finally:
        assert page.errors == []
        page.close()
