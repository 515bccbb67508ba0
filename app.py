"""mha-viz: multi-head attention made visible.  Run: streamlit run app.py

This file is the server: Streamlit's st.App around page.py, the script each session runs (the sidebar,
the caches, the dispatch to mha_viz/ui/pages.py). It makes a cold page paint sooner in two ways:
- WarmUp: at server start a thread imports the pages' modules (torch, plotly, every view), then, once a
  first page has been drawn and its browser says it has painted a chart (PAINTED; or after WAIT_FOR_A_PAGE
  seconds, or at once when a browser asks for a pretrained page), loads both bundled models into the cache page.py
  loads them from (mha_viz.ui.loaders). A page opened meanwhile waits only for what it needs:
  Python's import locks hand it modules the thread is importing once they are complete, and
  load_model's lock lets one model load at a time. pandas comes last (mha_viz/ui/pandas_guard.py: a first page
  needs none; importing it before serving measured slower, bench/RESULTS.md).
- PreloadElements: the frontend code of each kind of element (Plotly's is 4.7 MB) is a chunk a browser
  would fetch only once the script sends the first such element, one after another from a server busy
  drawing the page; the index page has the browser fetch and compile the first page's chunks at once
  (page.py then runs Plotly's while the server is still busy: running it takes the browser ~0.7 s). It also tells
  the server the viewport's width (a cookie), so that a first page is laid out for its width in its first run.
PlainDownloads: exports are sent as they are, not gzipped on every download by the server (CPU the other
sessions need).
Only the standard library, Streamlit and Starlette are imported here, so the server answers at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import streamlit as st
from starlette.middleware import Middleware

Message = MutableMapping[str, Any]
STATIC_JS = Path(st.__file__).parent / "static" / "static" / "js"
# The frontend chunks of the elements a first page shows (Plotly's is 4.7 MB); the rest load when used.
FIRST_PAGE_ELEMENTS = ("PlotlyChart", "ButtonGroup", "Button", "TextArea", "TextInput", "Selectbox", "Slider",
                       "Multiselect", "NumberInput", "Checkbox", "Html", "BidiComponent", "Spinner")
WAIT_FOR_A_PAGE = 10.0  # seconds the model loads wait for a first page to finish drawing (they would slow it)
MODELS_WANTED = threading.Event()  # set when a browser asks for a pretrained page: the loads start at once
PAINTED = threading.Event()  # set when a browser says it has painted a first chart (a POST to PAINTED_PATH)
PAINTED_PATH = "/_mha_viz/painted"
# The index page tells the server when it has painted a first chart (Plotly's own classes: its graph, its SVG),
# two frames after it appeared; the warm-up's model loads wait for it rather than guess how long a paint takes.
PAINTED_JS = (b'<script>(() => { const start = Date.now(); const timer = setInterval(() => {'
              b' if (document.querySelector(".js-plotly-plot .main-svg")) { clearInterval(timer);'
              b' requestAnimationFrame(() => setTimeout(() => navigator.sendBeacon(new URL(".' + PAINTED_PATH.encode()
              + b'", location.href)))); } else if (Date.now() - start > 60000) clearInterval(timer); }, 50); })();</script>')
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
            import mha_viz.ui.pages  # noqa: F401 - torch, numpy, plotly and every view
            from mha_viz.ui.loaders import warm_up

            warm_up(wait=WAIT_FOR_A_PAGE, wanted=MODELS_WANTED, painted=PAINTED)  # both bundled models, into page.py's cache
        except Exception:  # the pages load what they need themselves; say why the warm-up did not
            logging.getLogger("mha_viz").exception("the warm-up at server start failed")


@asynccontextmanager
async def warm_start(_app: st.App) -> AsyncIterator[None]:
    WarmUp().start()
    yield


class PreloadElements:
    """ASGI middleware: the index page preloads the first page's element chunks (FIRST_PAGE_ELEMENTS) at once, sends
    the viewport's width (VIEWPORT_JS) and says when it has painted a chart (PAINTED_JS, to PAINTED_PATH)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        chunks = [f"./static/js/{p.name}" for name in FIRST_PAGE_ELEMENTS for p in STATIC_JS.glob(f"{name}.*.js")]
        self.link = "".join(f'<link rel="modulepreload" href="{c}">' for c in chunks).encode()
        self.scripts = VIEWPORT_JS + PAINTED_JS  # at the end of <head>: after the viewport's <meta> (a phone's width)

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path", "").endswith(PAINTED_PATH):
            PAINTED.set()
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        if b"mode=Pretrained" in scope.get("query_string", b""):  # its script will need a model in ~1 s
            MODELS_WANTED.set()
        start: Message | None = None
        body: list[bytes] = []

        async def send_with_link(message: Message) -> None:
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
            page = b"".join(body).replace(b"<head>", b"<head>" + self.link, 1).replace(b"</head>", self.scripts + b"</head>", 1)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, send_with_link)


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


app = st.App("page.py", lifespan=warm_start, middleware=[Middleware(PreloadElements), Middleware(PlainDownloads)])
