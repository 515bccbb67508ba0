"""Figures for a paper: any mha-viz figure written as SVG, PDF or PNG, optionally with the "paper" preset
(mha_viz.figures.paper: a column wide, 8 pt fonts, a colour scale that prints in greyscale, no label clipped).

    >>> mha_viz.save_figure(heads_figure(trace), "heads.pdf", preset="paper")            # 3.5 in wide
    >>> mha_viz.save_figure(heads_figure(trace), "heads.svg", preset="paper", columns=2)  # 7 in wide

Kaleido (PyPI `kaleido`) draws the figure in a headless Chromium: the one on this machine (the one kaleido's
BROWSER_PATH names, else chromium or Chrome on the PATH); nothing is downloaded. Sizes are CSS px, 96 to the inch:
an SVG opens at the preset's inches, a PDF page is as many points as 0.75 x the px. The PDF is kaleido's SVG printed
by that Chromium on a page of the figure's size with no margin (kaleido's own PDF keeps a 0.1 in margin inside the
page and shrinks the figure by 6 % to fit it, which would take the text below 8 pt).

The browser is kept warm: one Chromium per process, started by the first figure (a few seconds) and reused by every
later one, SVG, PDF and PNG alike, one figure at a time. It runs on a daemon thread with its own asyncio loop; a call
waits at most EXPORT_TIMEOUT_S for it, so a browser that died or hangs becomes a FigureExportError, never a hang, and
the next figure starts a new one. It is closed when the process exits, or at once by close_browser().
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import concurrent.futures
import importlib.util
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import plotly.graph_objects as go

from .figures.paper import COLUMN_PX, paper_figure

FORMATS = {".svg": "svg", ".pdf": "pdf", ".png": "png"}
PRESETS = ("paper",)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PNG_DPI = 300
EXPORT_TIMEOUT_S = 120  # the longest wait for the browser to start, or to draw or print one figure
CLOSE_TIMEOUT_S = 10  # the longest wait for a browser to close before it is killed
PDF_PAGE = ("<!DOCTYPE html><html><head><meta charset='utf-8'><style>@page {{ size: {width}px {height}px; margin: 0 }} "
            "html, body {{ margin: 0; padding: 0 }} svg {{ display: block }}</style></head><body>{svg}</body></html>")
INSTALL_HINT = ("install it with `pip install kaleido==1.5.0` (it uses the machine's Chromium: "
                "`apt-get install chromium` on Debian and Ubuntu, or set BROWSER_PATH to a Chrome or Chromium)")


class FigureExportError(RuntimeError):
    """A figure could not be drawn to a file: kaleido or Chromium is missing, or the browser failed."""


def figure_format(path: str | os.PathLike[str]) -> str:
    """"svg", "pdf" or "png" from path's suffix; ValueError for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"cannot tell the format of {os.fspath(path)!r}: its name must end in "
                         f"{', '.join(FORMATS)} (got {suffix or 'no suffix'!r})")
    return FORMATS[suffix]


def chromium_path() -> str:
    """The Chromium (or Chrome) kaleido drives; FigureExportError, saying how to get one, when there is none."""
    given = os.environ.get("BROWSER_PATH")  # kaleido's (choreographer's) own setting
    if given:
        if not (Path(given).is_file() and os.access(given, os.X_OK)):
            raise FigureExportError(f"BROWSER_PATH={given!r} is not an executable Chrome or Chromium")
        return given
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise FigureExportError("no Chromium or Chrome found to draw the figure: install one (`apt-get install chromium` "
                            "on Debian and Ubuntu) or set BROWSER_PATH to its path")


def export_missing() -> str | None:
    """Why figures cannot be drawn to files here (kaleido or Chromium missing, and how to install it), or None."""
    try:
        found = importlib.util.find_spec("kaleido") is not None
    except ValueError:  # sys.modules["kaleido"] is None: an import of it fails
        found = False
    if not found:
        return f"SVG, PDF and PNG files need kaleido: {INSTALL_HINT}"
    try:
        chromium_path()
    except FigureExportError as err:
        return str(err)
    return None


def prepared(fig: go.Figure, preset: str | None = "paper", *, columns: int = 1) -> go.Figure:
    """fig as it will be drawn: through the preset (None: as it is)."""
    if preset is None:
        return fig
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: use {' or '.join(map(repr, PRESETS))}, or None for none")
    return paper_figure(fig, columns=columns)


def figure_bytes(fig: go.Figure, fmt: str, *, preset: str | None = "paper", columns: int = 1,
                 dpi: int = PNG_DPI) -> bytes:
    """The file of fig in fmt ("svg", "pdf" or "png", PNG at dpi dots per inch of the figure's size), drawn by this
    process's warm Chromium (started on first use; see the module's docstring)."""
    if fmt not in FORMATS.values():
        raise ValueError(f"unknown format {fmt!r}: use svg, pdf or png")
    fig = prepared(fig, preset, columns=columns)
    try:
        import kaleido  # noqa: F401  (here to say what is missing; the browser's thread uses it)
    except ImportError:
        raise FigureExportError(f"SVG, PDF and PNG files need kaleido: {INSTALL_HINT}") from None
    width = fig.layout.width or COLUMN_PX[2]
    height = fig.layout.height or 450
    opts = {"format": "svg" if fmt == "pdf" else fmt, "width": width, "height": height,
            "scale": dpi / 96 if fmt == "png" else 1}
    with _DRAWING:
        return _draw(fig, opts, fmt == "pdf")


def close_browser() -> None:
    """Close this process's warm Chromium, if one runs (the next figure starts a new one). Runs at exit too."""
    with _DRAWING:
        _discard()


T = TypeVar("T")
_DRAWING = threading.Lock()  # one figure at a time through the one browser
_WARM: _WarmBrowser | None = None


class _WarmBrowser:
    """A kaleido.Kaleido (a choreographer.Browser) opened once on a daemon thread running its own asyncio loop."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.kaleido: Any = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mha-viz-chromium", daemon=True)
        self.thread.start()
        try:
            self.kaleido = self.run(self._open())
        except BaseException:
            self.close()
            raise

    async def _open(self) -> Any:
        import kaleido

        browser = kaleido.Kaleido(path=self.path, mathjax=False, timeout=EXPORT_TIMEOUT_S)  # MathJax is from a CDN
        await browser.open()
        return browser

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """work's result on the browser's loop; TimeoutError (the work cancelled) after timeout (default:
        EXPORT_TIMEOUT_S) seconds."""
        timeout = EXPORT_TIMEOUT_S if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None

    def alive(self) -> bool:
        return self.thread.is_alive() and self.kaleido is not None and self.kaleido.subprocess.poll() is None

    def close(self) -> None:
        """Close the browser (kill its process group when it does not close in time) and end the loop's thread."""
        if self.kaleido is not None:
            try:
                self.run(self.kaleido.close(), CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001  a hung or half-dead browser: its process group goes
                try:
                    os.killpg(self.kaleido.subprocess.pid, signal.SIGKILL)
                except OSError:
                    pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CLOSE_TIMEOUT_S)

    async def svg_to_pdf(self, svg: bytes, width: float, height: float) -> bytes:
        """The SVG printed on one page of exactly width x height px (0.75 pt each), no margin, text kept as text."""
        with tempfile.TemporaryDirectory(prefix="mha-viz-pdf-") as folder:
            page = Path(folder) / "figure.html"
            page.write_text(PDF_PAGE.format(width=width, height=height, svg=svg.decode("utf-8")), encoding="utf-8")
            tab = await self.kaleido.create_tab()
            try:
                await tab.send_command("Page.enable")
                loaded = tab.subscribe_once("Page.loadEventFired")
                await tab.send_command("Page.navigate", params={"url": page.as_uri()})
                await loaded
                printed = await tab.send_command("Page.printToPDF", params={
                    "paperWidth": width / 96, "paperHeight": height / 96, "marginTop": 0, "marginBottom": 0,
                    "marginLeft": 0, "marginRight": 0, "preferCSSPageSize": True, "printBackground": True})
            finally:
                await tab.close()
        if "error" in printed:
            raise RuntimeError(f"Page.printToPDF failed: {printed['error']}")
        return base64.b64decode(printed["result"]["data"])

    async def draw(self, fig: go.Figure, opts: dict, pdf: bool) -> bytes:
        data = await self.kaleido.calc_fig(fig, opts=opts)
        if isinstance(data, str):
            data = data.encode("utf-8")
        return await self.svg_to_pdf(data, opts["width"], opts["height"]) if pdf else data


def _draw(fig: go.Figure, opts: dict, pdf: bool) -> bytes:
    """fig drawn by the warm browser (under _DRAWING), started when there is none or it died. A browser that fails is
    closed; one that had drawn before and is found dead after failing is replaced once, for this same figure."""
    path = chromium_path()
    reused = _WARM is not None and _WARM.alive() and _WARM.path == path
    try:
        return _started(path).run(_WARM.draw(fig, opts, pdf))
    except Exception as err:  # kaleido's and choreographer's errors, a browser that would not start or answer
        died = _WARM is None or not _WARM.alive()
        _discard()
        if not (reused and died):
            raise _export_error(path, err) from err
    try:  # the browser died since the last figure: one new browser for this one
        return _started(path).run(_WARM.draw(fig, opts, pdf))
    except Exception as err:
        _discard()
        raise _export_error(path, err) from err


def _started(path: str) -> _WarmBrowser:
    """The warm browser at path, started when there is none, it died, or it is another browser."""
    global _WARM
    if _WARM is None or not _WARM.alive() or _WARM.path != path:
        _discard()
        _WARM = _WarmBrowser(path)
    return _WARM


def _discard() -> None:
    global _WARM
    if _WARM is not None:
        _WARM.close()
        _WARM = None


def _export_error(path: str, err: BaseException) -> FigureExportError:
    return FigureExportError(f"Chromium ({path}) could not draw the figure: "
                             f"{type(err).__name__}: {' '.join(str(err).split())}")


def _close_at_exit() -> None:
    """close_browser at exit, without waiting past CLOSE_TIMEOUT_S for a figure still being drawn on another thread."""
    if _DRAWING.acquire(timeout=CLOSE_TIMEOUT_S):
        try:
            _discard()
        finally:
            _DRAWING.release()
    elif _WARM is not None and _WARM.kaleido is not None:
        try:
            os.killpg(_WARM.kaleido.subprocess.pid, signal.SIGKILL)
        except OSError:
            pass


atexit.register(_close_at_exit)


def save_figure(fig: go.Figure, path: str | os.PathLike[str], preset: str | None = "paper", *, columns: int = 1,
                dpi: int = PNG_DPI) -> Path:
    """Write fig to path as SVG, PDF or PNG (by path's suffix); returns the path.

    preset "paper" (default): laid out for print by mha_viz.figures.paper.paper_figure, one column (3.5 in) wide, or
    the text width (7 in) with columns=2; None: the figure as it is. dpi: PNG only (300: print quality).
    ValueError for an unknown suffix or preset; FigureExportError when kaleido or Chromium is missing or fails.
    """
    path = Path(path)
    data = figure_bytes(fig, figure_format(path), preset=preset, columns=columns, dpi=dpi)
    path.write_bytes(data)
    return path
