"""A real server loads both bundled models once, at start, and the pages it serves use them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, streamlit_server, wait_for_heads

LOADING_LINE = "Loading weights:   0%"  # transformers' progress bar: one per model load


@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason=f"{CHROMIUM} not installed")
def test_the_server_loads_both_bundled_models_at_start_and_pages_use_them(tmp_path, browser) -> None:
    log = tmp_path / "server.log"
    with streamlit_server(log=log) as (url, _):
        deadline = time.monotonic() + 180
        while log.read_text(errors="replace").count(LOADING_LINE) < 2:  # no page has been opened yet
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        page = browser.new_page()
        try:
            for query in ("mode=Pretrained", "mode=Pretrained&model=mha-viz/induction-2l&view=Heads"):
                page.goto(f"{url}/?{query}")
                wait_for_heads(page, 12 if "induction" not in query else 4, timeout=120)
        finally:
            page.close()
        assert log.read_text(errors="replace").count(LOADING_LINE) == 2  # the pages loaded nothing again
