"""The one renderer of heads (mha_viz/renderer.js): one module, the notebook widget's and the app's, which writes
token labels as text only."""

from __future__ import annotations

import re

from mha_viz.renderer import NOTEBOOK_ESM, RENDERER, STREAMLIT_ADAPTER, module


def test_the_widget_and_the_app_run_the_same_module() -> None:
    """Both hosts are renderer.js plus a few lines of their own; neither decodes or paints anything itself."""
    assert NOTEBOOK_ESM.startswith(RENDERER) and module(STREAMLIT_ADAPTER).startswith(RENDERER)
    for adapter in (NOTEBOOK_ESM[len(RENDERER):], STREAMLIT_ADAPTER):
        assert "getContext" not in adapter and "Uint16Array" not in adapter and "createElement" not in adapter
    assert RENDERER.count("export function decode") == 1
    assert module(STREAMLIT_ADAPTER).count("export default") == 1 and NOTEBOOK_ESM.count("export default") == 1


def test_labels_and_values_are_written_as_text_never_as_markup() -> None:
    """Token labels come from user text (markup, scripts): the renderer sets textContent, never HTML."""
    for source in (RENDERER, STREAMLIT_ADAPTER):
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", source)
    assert "textContent" in RENDERER


def test_no_framework_dom_is_read() -> None:
    """The renderer owns what it draws: no Plotly or Streamlit class names."""
    assert not re.search(r"js-plotly-plot|heatmaplayer|main-svg|stApp|st-key-|data-testid", RENDERER + STREAMLIT_ADAPTER)
