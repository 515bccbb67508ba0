"""The width a first page is laid out for: the viewport width the index page sends (a cookie) gives the main column's
width, so that the width probe finds it right and does not rerun (interrupt) the first page."""

from __future__ import annotations

import pytest
import streamlit as st

from mha_viz.ui import style


class Context:
    def __init__(self, cookies: dict[str, str]) -> None:
        self.cookies = cookies
        self.headers: dict[str, str] = {}


# viewport -> main column, measured in Chromium with Streamlit 1.67 (layout="wide", the sidebar as it opens)
MEASURED = {1920: 1460, 1600: 1140, 1400: 940, 1280: 820, 1024: 564, 870: 410, 861: 529, 850: 518, 800: 468,
            769: 437, 768: 736, 700: 668, 390: 358}


@pytest.mark.parametrize(("viewport", "column"), MEASURED.items())
def test_a_first_page_is_laid_out_for_the_column_its_viewport_gives(monkeypatch, viewport: int, column: int) -> None:
    monkeypatch.setattr(st, "context", Context({style.VIEWPORT_COOKIE: str(viewport)}))
    assert abs(style.page_width() - column) < style.RESIZE_STEP_PX  # the probe then has nothing to report


@pytest.mark.parametrize("cookie", ["", "wide", "-5", "1e9", "12345678", "100"])
def test_a_viewport_cookie_that_is_not_a_width_is_not_believed(monkeypatch, cookie: str) -> None:
    monkeypatch.setattr(st, "context", Context({style.VIEWPORT_COOKIE: cookie}))
    assert style.page_width() == style.WIDE_PX


def test_the_index_page_sends_the_viewport_width_in_that_cookie() -> None:
    import app

    assert f'"{style.VIEWPORT_COOKIE}=" + document.documentElement.clientWidth'.encode() in app.VIEWPORT_JS


def test_the_viewport_is_read_after_the_pages_viewport_meta() -> None:
    """Before <meta name="viewport"> a phone's layout viewport is 980 px wide, not its screen's width."""
    import asyncio
    from pathlib import Path

    import app

    index = (Path(st.__file__).parent / "static" / "index.html").read_bytes()
    sent: list[dict] = []

    async def streamlit_index(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": index})

    async def record(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b""}
    asyncio.run(app.IndexPage(streamlit_index)(scope, None, record))
    page = b"".join(m.get("body", b"") for m in sent[1:])
    assert b'name="viewport"' in page and app.VIEWPORT_JS in page
    assert page.index(b'name="viewport"') < page.index(app.VIEWPORT_JS) < page.index(b"</head>")


def test_the_page_css_has_no_angle_bracket_inside_its_style_element() -> None:
    """The browser's HTML sanitiser drops a whole <style> whose text holds a '<' (as a tag would start): every rule of
    the page's CSS went with it when a comment said st-key-<key>."""
    inner = style.CSS.strip().removeprefix("<style>").removesuffix("</style>")
    assert "<" not in inner
