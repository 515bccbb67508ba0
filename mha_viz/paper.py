"""Figures for a paper: any mha-viz figure written as SVG, PDF or PNG, optionally with the "paper" preset
(mha_viz.figures.paper: a column wide, 8 pt fonts, a colour scale that prints in greyscale, no label clipped).

    >>> mha_viz.save_figure(heads_figure(trace), "heads.pdf", preset="paper")            # 3.5 in wide
    >>> mha_viz.save_figure(heads_figure(trace), "heads.svg", preset="paper", columns=2)  # 7 in wide

Kaleido (PyPI `kaleido`) draws the figure in a headless Chromium: the one on this machine (the one kaleido's
BROWSER_PATH names, else chromium or Chrome on the PATH); nothing is downloaded. Sizes are CSS px, 96 to the inch:
an SVG opens at the preset's inches, a PDF page is as many points as 0.75 x the px. The PDF is kaleido's SVG printed
by that Chromium on a page of the figure's size with no margin (kaleido's own PDF keeps a 0.1 in margin inside the
page and shrinks the figure by 6 % to fit it, which would take the text below 8 pt).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import plotly.graph_objects as go

from .figures.paper import COLUMN_PX, paper_figure

FORMATS = {".svg": "svg", ".pdf": "pdf", ".png": "png"}
PRESETS = ("paper",)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PNG_DPI = 300
EXPORT_TIMEOUT_S = 120
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-pdf-header-footer")
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
    """The file of fig in fmt ("svg", "pdf" or "png", PNG at dpi dots per inch of the figure's size)."""
    if fmt not in FORMATS.values():
        raise ValueError(f"unknown format {fmt!r}: use svg, pdf or png")
    fig = prepared(fig, preset, columns=columns)
    try:
        import kaleido
    except ImportError:
        raise FigureExportError(f"SVG, PDF and PNG files need kaleido: {INSTALL_HINT}") from None
    browser = chromium_path()
    width = fig.layout.width or COLUMN_PX[2]
    height = fig.layout.height or 450
    opts = {"format": "svg" if fmt == "pdf" else fmt, "width": width, "height": height,
            "scale": dpi / 96 if fmt == "png" else 1}
    kopts = {"path": browser, "mathjax": False, "timeout": EXPORT_TIMEOUT_S}  # MathJax would come from a CDN
    try:
        data = kaleido.calc_fig_sync(fig, opts=opts, kopts=kopts)
    except Exception as err:  # kaleido's and choreographer's own errors, a browser that would not start
        raise FigureExportError(f"Chromium ({browser}) could not draw the figure: "
                                f"{type(err).__name__}: {' '.join(str(err).split())}") from err
    if isinstance(data, str):
        data = data.encode("utf-8")
    return _pdf(data, browser, width, height) if fmt == "pdf" else data


def _pdf(svg: bytes, browser: str, width: float, height: float) -> bytes:
    """The SVG printed by Chromium on one page of exactly width x height px (0.75 pt each), no margin."""
    with tempfile.TemporaryDirectory(prefix="mha-viz-pdf-") as folder:
        page, out = Path(folder) / "figure.html", Path(folder) / "figure.pdf"
        page.write_text(PDF_PAGE.format(width=width, height=height, svg=svg.decode("utf-8")), encoding="utf-8")
        command = [browser, *CHROMIUM_ARGS, f"--user-data-dir={folder}/profile", f"--print-to-pdf={out}",
                   page.as_uri()]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise FigureExportError(f"Chromium ({browser}) could not print the figure to PDF: {err}") from err
        if not out.is_file() or out.stat().st_size == 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise FigureExportError(f"Chromium ({browser}) wrote no PDF (exit {done.returncode}): {last}")
        return out.read_bytes()


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
