"""Page-wide style, and the width the page's figures are laid out for; formulas scroll, and a formula or table that
scrolls is a tab stop; the copy-link button is always visible; a chart's toolbar shows when the keyboard is on it;
a disabled widget's label stays readable."""

from __future__ import annotations

import math

import streamlit as st

from ..figures.common import COMPACT_PX, NARROW_PX, WIDE_PX
from .state import widget

CSS = """
<style>
/* Formulas wider than the screen scroll sideways instead of running off the edge. */
.katex-display { overflow-x: auto; overflow-y: hidden; padding-bottom: 4px; }
/* The copy button of the share link's code block shows without hovering: phones cannot hover. */
.st-key-share_link div:has(button), .st-key-share_link button { opacity: 1 !important; visibility: visible !important; }
/* A chart's toolbar shows at once while one of its buttons has the keyboard's focus, not only under the mouse: what
   holds the focus in a chart's keyed container (views.chart) is opaque, without fading in. */
[class*="st-key-figure_"] :focus-within { opacity: 1 !important; transition: none !important; }
/* A disabled widget's label stays readable (4.5:1 or more on white): it still says what the control sets. The
   widget is the innermost keyed element (class st-key- and its key) holding a disabled control. */
[class*="st-key-"]:not(:has([class*="st-key-"])):has([aria-disabled="true"], input:disabled) label,
[class*="st-key-"]:not(:has([class*="st-key-"])):has([aria-disabled="true"], input:disabled) label * {
  color: #5c5d66 !important; opacity: 1 !important; }
/* A region that scrolls sideways takes the keyboard's focus (scrollable_regions marks it): show where it is. */
[data-mha-scrolls]:focus-visible { outline: 2px solid #1c83e1; outline-offset: 2px; }
/* The width probe takes no room: cancel the gap the page puts after it. */
.st-key-page_width_probe { margin-bottom: -1rem; }
</style>
"""
WIDTH_KEY = "page_width"
MIN_WIDTH, MAX_WIDTH = 240, 8000  # a measured width outside these is not believed
RESIZE_STEP_PX = 24  # the browser reports a new width only when it moved by this much (each report is a rerun)
VIEWPORT_COOKIE = "mha_viz_viewport"  # the browser's viewport width, set by the index page before it connects (app.py)
# Streamlit 1.67's wide layout (measured in Chromium): up to 768 px the sidebar starts collapsed and the main column
# has 1 rem of padding a side; wider, the sidebar takes 300 px, and from about 864 px the padding is 5 rem a side.
COLLAPSED_BELOW_PX, SIDEBAR_PX, WIDE_PADDING_FROM_PX = 769, 300, 864

# The probe measures the main column (its own width: it stretches across it) and reports it as state "width" when
# it differs by RESIZE_STEP_PX from the width the page was laid out for (known; always, when that is not known), after
# the resizing pauses. Each report reruns the page: on a first page, a report interrupts the first run.
_probe = st.components.v2.component(
    "mha_viz.page_width",
    html="<span></span>",
    js="""
export default function ({ parentElement, setStateValue, data }) {
  const host = parentElement.host || parentElement;
  let known = data && data.known;
  let timer = null;
  if (known) host.setAttribute("data-page-width", String(known));  // the server lays the page out for this width
  const report = () => {
    const width = Math.round(host.getBoundingClientRect().width);
    if (!width || (known && Math.abs(width - known) < data.step)) return;
    clearTimeout(timer);
    timer = setTimeout(() => { known = width; setStateValue("width", width); }, 200);
  };
  const observer = new ResizeObserver(report);
  observer.observe(host);
  report();
  return () => { observer.disconnect(); clearTimeout(timer); };
}
""",
)


# A formula or a table wider than the page scrolls sideways (CSS above; Streamlit's tables do): the keyboard must be
# able to scroll it too (WCAG 2.1.1, axe-core's scrollable-region-focusable). This makes each one that scrolls now a
# named tab stop, and takes that back when the page is wide enough for it, whenever the page changes or resizes.
_scrollable_regions = st.components.v2.component(
    "mha_viz.scrollable_regions",
    html="<span></span>",
    js="""
export default function () {
  const LABELS = { formula: "Formula (scrolls sideways)", table: "Table (scrolls sideways)" };
  const scroller = (table) => {  // the nearest ancestor that scrolls it sideways
    for (let e = table.parentElement, i = 0; e && i < 4; e = e.parentElement, i++) {
      if (/(auto|scroll)/.test(getComputedStyle(e).overflowX)) return e;
    }
    return null;
  };
  const mark = () => {
    const boxes = [...document.querySelectorAll(".katex-display")].map(e => [e, "formula"])
      .concat([...document.querySelectorAll("table")].map(t => [scroller(t), "table"]).filter(([e]) => e));
    for (const [box, kind] of boxes) {
      const scrolls = box.scrollWidth > box.clientWidth + 1;
      if (scrolls && !box.hasAttribute("tabindex")) {
        box.tabIndex = 0;
        box.setAttribute("role", "group");
        box.setAttribute("aria-label", LABELS[kind]);
        box.setAttribute("data-mha-scrolls", kind);
      } else if (!scrolls && box.hasAttribute("data-mha-scrolls")) {
        for (const name of ["tabindex", "role", "aria-label", "data-mha-scrolls"]) box.removeAttribute(name);
      }
    }
  };
  let frame = 0;
  const soon = () => { if (!frame) frame = requestAnimationFrame(() => { frame = 0; mark(); }); };
  const observer = new MutationObserver(soon);
  observer.observe(document.body, { childList: true, subtree: true });
  window.addEventListener("resize", soon);
  soon();
  return () => { observer.disconnect(); window.removeEventListener("resize", soon); cancelAnimationFrame(frame); };
}
""",
)


def page_style() -> None:
    """Add the page-wide CSS (a style-only st.html takes no room on the page), the width probe and the keyboard
    access of regions that scroll sideways."""
    st.html(CSS)
    with st.container(key="page_width_probe"):
        _probe(key=WIDTH_KEY, data={"known": _measured() or _estimated(), "step": RESIZE_STEP_PX}, height=0,
               on_width_change=lambda: None)
        _scrollable_regions(key="scrollable_regions", height=0)


def _measured() -> int | None:
    """The main column's width in px as the browser last reported it, or None (not yet, or not a believable one:
    it comes from the client)."""
    state = widget(WIDTH_KEY)
    value = state.get("width") if hasattr(state, "get") else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if MIN_WIDTH <= value <= MAX_WIDTH else None


def _estimated() -> int | None:
    """The main column's width in px as Streamlit's wide layout makes it of the viewport width the index page sent
    (a cookie: app.py), or None without one. A first page laid out for it needs no second run when the probe finds
    it right within RESIZE_STEP_PX (a resized or closed sidebar: the probe's report corrects it)."""
    try:
        value = st.context.cookies.get(VIEWPORT_COOKIE)
    except (AttributeError, RuntimeError):
        return None
    viewport = int(value) if isinstance(value, str) and value.isdigit() and len(value) < 6 else 0
    if not MIN_WIDTH <= viewport <= MAX_WIDTH:
        return None
    if viewport < COLLAPSED_BELOW_PX:
        return viewport - 32
    return viewport - SIDEBAR_PX - (160 if viewport >= WIDE_PADDING_FROM_PX else 32)


def page_width() -> int:
    """The px the page's figures are drawn across: the main column's measured width; before the browser has said,
    the width its viewport gives (_estimated), else a phone's for a phone's user agent, else a desktop page's."""
    return _measured() or _estimated() or (COMPACT_PX if _phone_agent() else WIDE_PX)


def is_narrow() -> bool:
    """True when the page is too narrow for side-by-side columns and wide figure layouts (a phone, a tablet held
    upright, a narrow window): views then stack what they would put side by side."""
    return page_width() < NARROW_PX


def column_width(share: float) -> int:
    """The px across a column taking this share of the page (Streamlit's gap between columns is 1 rem)."""
    return int(page_width() * share - 16)


def _phone_agent() -> bool:
    """True when the browser says it is a phone (a "Mobi" user agent): the first guess until it reports its width."""
    try:
        agent = st.context.headers.get("User-Agent", "") or ""
    except (AttributeError, RuntimeError):
        return False
    return "Mobi" in agent
