"""The notebook widget in Chromium says which layer's self-check failed: its static HTML copy (what an exported
notebook shows, the same script as in JupyterLab) of a tiny GPT-2 whose adapter reads layer 1's scale wrong shows an
alert with the difference and the tolerance on layer 1, none on layer 0, and every failure in the overview."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.browser import CHROMIUM
from mha_viz.checks import failure_message
from mha_viz.widget import show
from tests.unit.test_checks import quiet_traces, wrong_model

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason=f"{CHROMIUM} not installed")
WIDGET = ".mha-viz-widget"


@needs_chromium
def test_the_widget_shows_the_failed_layer(browser, tmp_path: Path) -> None:
    traces = quiet_traces(wrong_model())
    widget = show(list(traces), layer=1)
    page_file = tmp_path / "widget.html"
    page_file.write_text(f"<!DOCTYPE html><html lang='en'><body>{widget.static_html()}</body></html>", encoding="utf-8")
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(page_file.as_uri())
    page.wait_for_selector(f"{WIDGET} .mv-grid[data-layer='1'] canvas.mv-heatmap", timeout=60_000)
    alert = page.locator(f"{WIDGET} .mv-alert[role='alert']")
    assert alert.is_visible() and alert.inner_text() == failure_message(traces[1])
    assert "tolerance" in alert.inner_text() and "decoder layer 1" in alert.inner_text()
    page.locator(f"{WIDGET} .mv-layers button[data-index='0']").click()
    page.wait_for_selector(f"{WIDGET} .mv-grid[data-layer='0']")
    assert not alert.is_visible()  # layer 0 passes its check
    page.locator(f"{WIDGET} .mv-views button[data-view='overview']").click()
    assert alert.is_visible() and "decoder layer 1" in alert.inner_text()  # the overview shows every layer
    page.close()
    assert errors == []
