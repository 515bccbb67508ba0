"""The HTML report in a real browser (Debian's headless Chromium via Playwright), with the network cut off."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.browser import CHROMIUM
from tests.unit.test_export import XSS, configurable
from tests.unit.test_export import weights_only as weights_only_of

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)


def open_offline(browser, path: Path):
    """The report opened from disk in a context that refuses every network request; records what happened."""
    context = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})
    page = context.new_page()
    seen = {"requests": [], "dialogs": [], "errors": [], "console": []}
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("console", lambda m: seen["console"].append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    return context, page, seen


@pytest.mark.parametrize("weights_only", [False, True], ids=["full", "weights-only"])
def test_report_renders_offline_with_tokens_as_text(browser, tmp_path: Path, weights_only: bool) -> None:
    from mha_viz.report import html_report

    trace = weights_only_of(configurable(h=4)) if weights_only else configurable(h=4)
    path = tmp_path / "report.html"
    path.write_text(html_report(trace, title="Report " + XSS[0], notes={"token": XSS[1]}), encoding="utf-8")
    context, page, seen = open_offline(browser, path)
    try:
        n_figures = 1 if weights_only else 3
        page.wait_for_function("n => document.querySelectorAll('.plotly-graph-div .main-svg').length >= n",
                               arg=n_figures, timeout=60_000)
        heatmaps = page.evaluate(
            "() => [...document.querySelectorAll('#figure-0 .heatmaplayer image')].map(e => e.getAttribute('href'))"
        )
        assert len(heatmaps) == 4 and all(h.startswith("data:image/png") for h in heatmaps)  # one painted per head
        text = page.inner_text("body")
        assert XSS[0] in text and XSS[1] in text  # shown as text ...
        assert page.evaluate("() => document.querySelectorAll('body img, body iframe, body object').length") == 0
        assert page.evaluate("() => document.querySelectorAll('script[src], link').length") == 0
        assert seen["dialogs"] == []  # ... never run
        assert seen["errors"] == []
        assert [r for r in seen["requests"] if not r.startswith(("file:", "data:", "blob:"))] == []
        assert seen["console"] == []  # e.g. no "violates the Content Security Policy": it blocked nothing needed
        assert page.title() == "Report " + XSS[0]
    finally:
        context.close()
