"""Page-wide style: phones get a compact layout; formulas scroll; the copy-link button is always visible; a chart's
toolbar shows when the keyboard is on it."""

from __future__ import annotations

import streamlit as st

CSS = """
<style>
/* Formulas wider than the screen scroll sideways instead of running off the edge. */
.stMarkdown .katex-display, [data-testid="stMarkdownContainer"] .katex-display { overflow-x: auto; overflow-y: hidden;
  padding-bottom: 4px; }
/* The copy button of a code block (the share link) shows without hovering: phones cannot hover. */
[data-testid="stCode"] [data-testid="stElementToolbarButton"], [data-testid="stCode"] div:has(> div > [data-testid="stElementToolbarButton"]) {
  opacity: 1 !important; visibility: visible !important; }
/* A chart's toolbar shows while one of its buttons has the keyboard's focus, not only under the mouse. */
.js-plotly-plot .modebar-group:focus-within { opacity: 1 !important; transition: none !important; }
</style>
"""


def page_style() -> None:
    """Add the page-wide CSS (a style-only st.html takes no room on the page)."""
    st.html(CSS)


def is_phone() -> bool:
    """True when the browser says it is a phone (a "Mobi" user agent): figures then use a compact layout."""
    try:
        agent = st.context.headers.get("User-Agent", "") or ""
    except (AttributeError, RuntimeError):
        return False
    return "Mobi" in agent
