"""The Patching section in Debian's headless Chromium, on the bundled induction model: the ready-made pair paints
its heatmap with the induction heads restoring the answer; the README's screenshot (assets/patching.png, written
only with --update-assets)."""

from __future__ import annotations

import math
import os
import urllib.parse
from pathlib import Path

import pytest

from harness.browser import CHROMIUM
from mha_viz.params import CAUSAL_EXAMPLE
from tests.browser.test_browser_views import VALUES, new_page, settle

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

# The patching heatmap's z as Plotly holds it in the page (public state: gd.data), or null before it paints.
Z_JS = """() => {
    """ + VALUES + """
    const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g.data && g.data[0].type === 'heatmap'
        && String(g.layout.title && g.layout.title.text).startsWith('Patching'));
    return gd ? values(gd.data[0].z) : null;
}"""


def test_patching_the_induction_pair_paints_and_the_layer_one_heads_restore_the_answer(server: str, browser,
                                                                                       assets: Path) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1300})
    try:
        page.goto(server + "/?mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Patching&text="
                  + urllib.parse.quote(CAUSAL_EXAMPLE))
        settle(page)
        page.wait_for_function(Z_JS, timeout=60_000)
        page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stRadioOption\"]').length >= 9",
                               timeout=60_000)  # metric, site and direction choices painted
        z = page.evaluate(Z_JS)
        assert len(z) == 2 and len(z[0]) == 4 and min(z[1]) > 0.1  # layer 1: every induction head restores part
        page.get_by_text("Patching each head's output").first.scroll_into_view_if_needed()
        page.screenshot(path=str(assets / "patching.png"), full_page=True)
    finally:
        assert page.errors == []
        page.close()


# The path patching heatmap's z (null where no path), once painted.
PATH_Z_JS = Z_JS.replace("startsWith('Patching')", "startsWith('Patching each sender head')")


def test_path_patching_paints_the_previous_token_head_as_the_key_sender(server: str, browser, tmp_path: Path) -> None:
    page = new_page(browser, viewport={"width": 1400, "height": 1300})
    try:
        page.goto(server + "/?mode=Pretrained&model=mha-viz/induction-2l&view=Analysis&section=Patching"
                  "&patch_pair=" + urllib.parse.quote("induction: longer repeat") + "&patch_site=path&text="
                  + urllib.parse.quote(CAUSAL_EXAMPLE))
        settle(page)
        page.wait_for_function(PATH_Z_JS, timeout=60_000)
        z = page.evaluate(PATH_Z_JS)
        assert len(z) == 2 and all(v is None or math.isnan(v) for v in z[1])  # layer 1 sends nothing to layer 1
        assert max(z[0]) == z[0][2] > 0.9  # 0.2, the previous-token head, through the keys
        page.get_by_text("Top sender: head 0.2").first.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "patching-path.png"), full_page=True)
    finally:
        assert page.errors == []
        page.close()
