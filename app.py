"""mha-viz: multi-head attention made visible.  Run: streamlit run app.py

This file is the server: Streamlit's st.App around page.py, the script each session runs (the sidebar,
the caches, the dispatch to mha_viz/ui/pages.py). At start, before it answers, it imports pandas: Plotly reads
pandas from sys.modules without the import lock, so a figure built while another thread imports it would meet a
half-initialised module; imported once before any session runs, there is nothing to race (~0.3 s of CPU, before
the health check answers; bench/RESULTS.md, issue 32). Then:
- WarmUp: a thread imports the pages' modules (torch, plotly, every view), then, once a first page has been
  drawn (page.py's run has ended; AFTER_A_PAGE seconds more for its browser to paint it) or WAIT_FOR_A_PAGE
  seconds have passed, or at once when a browser asks for a pretrained page, loads both bundled models into the
  cache page.py loads them from (mha_viz.ui.loaders). A page opened meanwhile waits only for what it needs:
  Python's import locks hand it modules the thread is importing once they are complete, and load_model's lock
  lets one model load at a time.
- IndexPage: the index page sends the viewport's width (a cookie), so that a first page is laid out for its
  width in its first run, and a request for a pretrained page starts the model loads at once.
PlainDownloads: exports are sent as they are, not gzipped on every download by the server (CPU the other
sessions need).
Only the standard library, Streamlit, Starlette and pandas are imported here, so the server answers at once.
MHA_VIZ_TIMING=1 logs the warm-up's import and page.py's runs to stderr (bench/bench_speed.py reads them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import streamlit as st
from starlette.middleware import Middleware

Message = MutableMapping[str, Any]
WAIT_FOR_A_PAGE = 10.0  # seconds the model loads wait for a first page to be drawn (they would slow it)
AFTER_A_PAGE = 1.5  # seconds after a first page's run for its browser to paint it, before the model loads start
MODELS_WANTED = threading.Event()  # set when a browser asks for a pretrained page: the loads start at once
# The viewport's width, for the first run to lay the page out for (mha_viz/ui/style.py: VIEWPORT_COOKIE): without it,
# the width probe's report reruns a first page (interrupting its first run) whenever the guessed width was off.
VIEWPORT_JS = (b'<script>document.cookie = "mha_viz_viewport=" + document.documentElement.clientWidth'
               b' + "; path=/; SameSite=Lax";</script>')


class WarmUp(threading.Thread):
    """The pages' imports, then the bundled models, in the background."""

    def __init__(self) -> None:
        super().__init__(name="mha-viz warm-up", daemon=True)

    def run(self) -> None:
        try:
            start = time.perf_counter()
            import mha_viz.ui.pages  # noqa: F401 - torch, numpy, plotly and every view
            from mha_viz.ui.loaders import log_timing, warm_up

            log_timing(f"warm-up imported the pages in {time.perf_counter() - start:.3f} s")
            warm_up(wait=WAIT_FOR_A_PAGE, after=AFTER_A_PAGE, wanted=MODELS_WANTED)  # into page.py's model cache
        except Exception:  # the pages load what they need themselves; say why the warm-up did not
            logging.getLogger("mha_viz").exception("the warm-up at server start failed")


@asynccontextmanager
async def warm_start(_app: st.App) -> AsyncIterator[None]:
    import pandas  # noqa: F401 - complete before any session builds a figure (Plotly reads it unlocked)

    WarmUp().start()
    yield


class IndexPage:
    """ASGI middleware: the index page sends the viewport's width (VIEWPORT_JS); a request for a pretrained page
    sets MODELS_WANTED."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        if b"mode=Pretrained" in scope.get("query_string", b""):  # its script will need a model in ~1 s
            MODELS_WANTED.set()
        start: Message | None = None
        body: list[bytes] = []

        async def send_with_width(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                if headers.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in headers:
                    start = message  # held until the whole page is here
                    return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            # at the end of <head>: after the viewport's <meta> (a phone's width)
            page = b"".join(body).replace(b"</head>", VIEWPORT_JS + b"</head>", 1)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, send_with_width)


class PlainDownloads:
    """ASGI middleware: downloads (Streamlit's /media/ route: the exports) are sent uncompressed. Streamlit gzips
    them on every request (compression level 5, in the server's process); a trace's JSON is base64 arrays and its
    NPZ float32 binary, which gzip shrinks little, and bench_heavy measured ~13 s of the server's CPU spent
    compressing five exports, taken from every other session's pages."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and "/media/" in scope.get("path", ""):
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"accept-encoding"]
            scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)


app = st.App("page.py", lifespan=warm_start, middleware=[Middleware(IndexPage), Middleware(PlainDownloads)])
