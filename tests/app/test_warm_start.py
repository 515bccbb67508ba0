"""app.py serves page.py (st.App): it imports pandas before it answers, and warms the imports and both bundled models
when the server starts (in a real server: tests/browser/test_warm_start_browser.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from harness.browser import ROOT


def test_app_py_imports_only_streamlit_so_the_server_answers_at_once() -> None:
    code = ("import sys; import app; print(type(app.app).__name__, 'torch' in sys.modules, "
            "any(m.startswith('mha_viz') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["App", "False", "False"]


def test_pandas_is_complete_before_the_server_answers() -> None:
    """Plotly reads pandas from sys.modules without the import lock: a figure built while another thread imported it
    met a half-initialised module. The lifespan imports it before the server serves anything (a fresh interpreter)."""
    code = textwrap.dedent("""
        import asyncio, sys
        import app
        from _plotly_utils.optional_imports import get_module
        app.WarmUp.start = lambda self: None  # the warm-up's imports would bring pandas too: this is the lifespan's own
        print("pandas" in sys.modules)

        async def serving():
            async with app.warm_start(None):
                pd = get_module("pandas", should_load=False)  # what Plotly's validators and JSON encoder read
                print(pd is not None and hasattr(pd, "Series") and hasattr(pd, "Index"))

        asyncio.run(serving())
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_warm_up_fills_the_cache_page_py_loads_models_from(monkeypatch) -> None:
    from mha_viz.pretrained import INDUCTION_MODEL
    from mha_viz.ui import loaders

    loaders.get_model.clear()
    loaders.warm_up()

    def no_load(*args, **kwargs):
        raise AssertionError("loaded again")

    monkeypatch.setattr(loaders, "load_model", no_load)  # what page.py asks for next must come from the cache
    models = [loaders.get_model("", False, None), loaders.get_model(INDUCTION_MODEL, False, None)]
    assert [m.num_layers for m in models] == [{"encoder": 6}, {"decoder": 2}]


def serve(path_query: tuple[str, bytes], content_type: bytes, body: bytes) -> tuple[dict, bytes]:
    """One GET through app.py's middleware in front of a fake app that answers body: (start message, body sent)."""
    import asyncio

    import app

    async def fake(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:]})

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path_query[0], "query_string": path_query[1]}
    # in a thread of its own: Playwright's sync API (the browser fixture) keeps an event loop running in this one
    worker = threading.Thread(target=asyncio.run, args=(app.IndexPage(fake)(scope, None, send),))
    worker.start()
    worker.join()
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_index_page_gets_the_viewport_width_and_nothing_else() -> None:
    import app

    page = b"<!doctype html><html><head><title>x</title></head><body></body></html>"
    start, body = serve(("/", b""), b"text/html; charset=utf-8", page)
    assert body == page.replace(b"</head>", app.VIEWPORT_JS + b"</head>")  # no preloads of the frontend's files
    assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()
    app.MODELS_WANTED.clear()
    serve(("/", b""), b"text/html", page)
    assert not app.MODELS_WANTED.is_set()
    serve(("/", b"mode=Pretrained&layer=2"), b"text/html", page)
    assert app.MODELS_WANTED.is_set()  # a pretrained page is coming: the warm-up loads the models at once
    script = b"console.log(1)"
    assert serve(("/static/js/x.js", b""), b"text/javascript", script)[1] == script  # other files pass untouched


def test_downloads_are_sent_uncompressed_and_other_responses_keep_gzip() -> None:
    """Streamlit gzips its /media/ route (the exports) on every request: the server's CPU, for base64 and binary
    arrays that barely shrink. app.PlainDownloads drops the browser's Accept-Encoding for that route only."""
    import asyncio

    from starlette.middleware.gzip import GZipMiddleware

    import app

    body = b'{"weights": "' + b"QUJD" * 20_000 + b'"}'

    async def fake(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def get(path: str) -> tuple[dict, bytes]:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.disconnect"}

        scope = {"type": "http", "method": "GET", "path": path, "query_string": b"",
                 "headers": [(b"accept-encoding", b"gzip, deflate, br")]}
        await app.PlainDownloads(GZipMiddleware(fake, minimum_size=1000, compresslevel=5))(scope, receive, send)
        return dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])

    results: dict = {}
    worker = threading.Thread(target=lambda: results.update(
        download=asyncio.run(get("/media/0a1b2c.json")), other=asyncio.run(get("/_stcore/some-json"))))
    worker.start()
    worker.join()
    headers, sent = results["download"]
    assert b"content-encoding" not in headers and sent == body
    headers, sent = results["other"]
    assert headers[b"content-encoding"] == b"gzip" and len(sent) < len(body)


def test_the_model_loads_wait_for_a_first_page_to_be_drawn_then_for_its_paint(monkeypatch) -> None:
    from mha_viz.ui import loaders

    loads: list[str] = []
    monkeypatch.setattr(loaders, "import_model_code", lambda: None)
    monkeypatch.setattr(loaders, "get_model", lambda name, *args: loads.append(name))
    monkeypatch.setattr(loaders, "page_drawn", threading.Event())
    worker = threading.Thread(target=loaders.warm_up, kwargs={"wait": 120.0, "after": 0.5})
    worker.start()
    worker.join(1.0)
    assert worker.is_alive() and loads == []  # no page drawn yet
    loaders.page_drawn.set()  # page.py's first run has ended
    worker.join(0.2)
    assert worker.is_alive() and loads == []  # its browser is given `after` seconds to paint it
    worker.join(60)
    assert not worker.is_alive() and len(loads) == 2


def test_a_page_that_asks_for_a_model_starts_the_loads_at_once(monkeypatch) -> None:
    from mha_viz.ui import loaders

    loads: list[str] = []
    monkeypatch.setattr(loaders, "import_model_code", lambda: None)
    monkeypatch.setattr(loaders, "get_model", lambda name, *args: loads.append(name))
    monkeypatch.setattr(loaders, "page_drawn", threading.Event())
    wanted = threading.Event()
    worker = threading.Thread(target=loaders.warm_up, kwargs={"wait": 120.0, "after": 120.0, "wanted": wanted})
    worker.start()
    worker.join(0.5)
    assert worker.is_alive() and loads == []
    wanted.set()
    worker.join(60)
    assert not worker.is_alive() and len(loads) == 2
