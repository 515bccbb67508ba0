"""The warm Chromium behind save_figure: figures in a row share one browser process, a browser killed or hung between
two figures gives way to a new one (a FigureExportError after a bounded wait for the hung one, never a hang), and the
PDF it prints is still one page a column wide with the labels as text."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import mha_viz
import mha_viz.paper
from harness.browser import CHROMIUM, require_tools
from mha_viz.figures import heads_figure
from mha_viz.paper import FigureExportError, figure_bytes, save_figure

require_tools({CHROMIUM: "chromium", "pdfinfo": "poppler-utils"})
pytest.importorskip("kaleido")

TOKENS = ["The", "cat", "sat", "on", "the", "mat"]


@pytest.fixture(scope="module")
def figure():
    x = mha_viz.embed_tokens(TOKENS, 32)
    return heads_figure(mha_viz.MultiHeadAttention(32, 2, seed=0)(x, query_tokens=TOKENS))


@pytest.fixture(autouse=True)
def no_browser_left():
    """Each test starts and ends without a warm browser in this process."""
    mha_viz.paper.close_browser()
    yield
    mha_viz.paper.close_browser()
    assert chromium_children() == set()


def chromium_children() -> set[int]:
    """The browsers this process started and that still run, each as its session id: choreographer starts the browser
    (through a wrapper) as the leader of a new session, a child of this process, with Chromium's processes in it."""
    processes = {}  # pid: (name, state, parent, session)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended while listed
            continue
        fields = text[text.rindex(")") + 2:].split()
        processes[int(stat.parent.name)] = (text[text.index("(") + 1:text.rindex(")")], fields[0], int(fields[1]),
                                            int(fields[3]))
    return {session for name, state, _, session in processes.values()
            if "chrom" in name.lower() and state != "Z" and session in processes
            and processes[session][2] == os.getpid()}


def pdf_width_pt(data: bytes, tmp_path: Path) -> float:
    pdf = tmp_path / "figure.pdf"
    pdf.write_bytes(data)
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True, timeout=60).stdout
    assert next(line for line in info.splitlines() if line.startswith("Pages:")).split()[-1] == "1"
    return float(next(line for line in info.splitlines() if line.startswith("Page size:")).split()[2])


def test_figures_in_a_row_share_one_browser_process(figure, tmp_path) -> None:
    assert figure_bytes(figure, "svg").startswith(b"<svg")
    first = chromium_children()
    assert len(first) == 1, f"one warm Chromium after the first figure, found {first}"
    pdf = figure_bytes(figure, "pdf")  # the PDF is printed by the same browser: no second Chromium
    assert chromium_children() == first
    assert pdf.startswith(b"%PDF-") and pdf_width_pt(pdf, tmp_path) == pytest.approx(3.5 * 72, abs=1.5)
    save_figure(figure, tmp_path / "heads.svg")
    assert chromium_children() == first
    mha_viz.paper.close_browser()
    assert chromium_children() == set()


def test_a_browser_killed_between_two_figures_is_replaced(figure, tmp_path) -> None:
    figure_bytes(figure, "svg")
    (killed,) = chromium_children()
    os.killpg(killed, signal.SIGKILL)  # the browser and its renderers: the session's process group
    pdf = figure_bytes(figure, "pdf")
    assert pdf.startswith(b"%PDF-") and pdf_width_pt(pdf, tmp_path) == pytest.approx(3.5 * 72, abs=1.5)
    (replacement,) = chromium_children()
    assert replacement != killed


def test_a_hung_browser_is_an_error_after_a_bounded_wait_and_the_next_figure_works(figure, monkeypatch) -> None:
    figure_bytes(figure, "svg")
    (hung,) = chromium_children()
    monkeypatch.setattr(mha_viz.paper, "EXPORT_TIMEOUT_S", 3)
    monkeypatch.setattr(mha_viz.paper, "CLOSE_TIMEOUT_S", 3)
    os.killpg(hung, signal.SIGSTOP)  # alive, but answers nothing
    try:
        with pytest.raises(FigureExportError, match="could not draw the figure"):
            figure_bytes(figure, "svg")
    finally:
        try:
            os.killpg(hung, signal.SIGCONT)  # if it was not killed (it should have been)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    while hung in chromium_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hung not in chromium_children()  # killed, not left stopped
    assert figure_bytes(figure, "svg").startswith(b"<svg")
