"""mha_viz.show() in Chromium: the example notebook opened and run in a real JupyterLab (no token, nothing from the
network), and the same notebook exported to HTML. The grid is painted from every layer's weights sent once; a layer
click repaints it while the kernel waits for an input() (no kernel round trip), and Python then reads the clicked layer."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import numpy as np
import pytest

import mha_viz
from harness.browser import CHROMIUM, ROOT, free_port, stop, wait_healthy
from mha_viz.widget import export_html
from tests.unit.test_widget_notebook import NOTEBOOK, TEXT, executed

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason=f"{CHROMIUM} not installed")
WIDGET = ".mha-viz-widget"
PAINTED_JS = "(sel) => { const w = document.querySelector(sel); return w ? Number(w.dataset.painted || 0) : 0; }"


def offline(page) -> list[str]:
    """Abort every request that leaves the machine; returns the list of those it aborted."""
    aborted: list[str] = []

    def route(r) -> None:
        url = r.request.url
        if url.startswith(("http://127.0.0.1", "file:", "data:", "blob:")):
            r.continue_()
        else:
            aborted.append(url)
            r.abort()

    page.route("**/*", route)
    return aborted


def grid_layer(page) -> str | None:
    return page.evaluate(f"() => {{ const g = document.querySelector('{WIDGET} .mv-grid'); return g && g.dataset.layer; }}")


def hover_text(page, head: int, row: int, col: int, rows: int, cols: int) -> str:
    """The tooltip over cell (row, col) of a head's heatmap."""
    canvas = page.locator(f"{WIDGET} canvas.mv-heatmap[data-head='{head}']").first
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + (col + 0.5) * box["width"] / cols, box["y"] + (row + 0.5) * box["height"] / rows)
    return page.locator(f"{WIDGET} .mv-tip").inner_text()


def check_grid_and_switch(page, traces) -> None:
    """4 heads of layer 1 painted; the hover shows a cell's tokens and weight; a click on layer 0 repaints."""
    page.wait_for_selector(f"{WIDGET} .mv-grid[data-layer='1'] canvas.mv-heatmap", timeout=120_000)
    assert page.locator(f"{WIDGET} .mv-grid canvas.mv-heatmap").count() == 4
    T = len(traces[0].query_tokens)
    r, c = T - 1, 8  # the last "owl" and the "by" after the first: an induction head (layer 1, head 2)
    text = hover_text(page, 2, r, c, T, T)
    assert f"query {r}: owl" in text and f"key {c}: by" in text
    assert f"weight {traces[1].weights[2, r, c]:.3f}" in text
    assert f"weight {traces[0].weights[2, r, c]:.3f}" not in text  # layer 0's number differs here


@contextlib.contextmanager
def jupyterlab(folder: Path) -> Iterator[str]:
    """JupyterLab on a free port serving folder, no token, its settings and runtime files in folder: the base URL."""
    port = free_port()
    (folder / ".config" / "labconfig").mkdir(parents=True)  # no "get Jupyter news?" question over the notebook
    (folder / ".config" / "labconfig" / "page_config.json").write_text(
        '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTER_CONFIG_DIR": str(folder / ".config"), "JUPYTER_RUNTIME_DIR": str(folder / ".runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(folder / ".workspaces"), "IPYTHONDIR": str(folder / ".ipython")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.root_dir={folder}", "--IdentityProvider.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", "--allow-root", "--LabApp.news_url=",
           "--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = open(folder / "jupyterlab.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120, lambda: ": " + (folder / "jupyterlab.log").read_text()[-2000:], interval=0.5,
                     path="/api/status", server="JupyterLab")
        yield url
    finally:
        stop(proc)
        log.close()


KERNEL_JS = "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status"
RUN_CELL_JS = """(source) => {
    const panel = window.jupyterapp.shell.currentWidget;
    const n = panel.content.model.cells.length;
    panel.content.model.sharedModel.insertCell(n, {cell_type: 'code', source});
    panel.content.activeCellIndex = n;
    window.jupyterapp.commands.execute('notebook:run-cell');  // not awaited: it resolves when the cell is done
}"""


def kernel_is(page, status: str, timeout: float = 120_000) -> None:
    page.wait_for_function(f"() => ({KERNEL_JS})() === '{status}'", timeout=timeout)


def run_cell(page, source: str) -> None:
    """A new cell at the end of the notebook with this source, run (JupyterLab's own command)."""
    page.evaluate(RUN_CELL_JS, source)


@needs_chromium
def test_jupyterlab_runs_the_notebook_and_a_layer_click_repaints_while_the_kernel_waits(
    browser, tmp_path: Path, assets: Path
) -> None:
    traces = mha_viz.load_model(mha_viz.INDUCTION_MODEL).traces(TEXT)
    shutil.copy(NOTEBOOK, tmp_path / "notebook.ipynb")
    with jupyterlab(tmp_path) as url:
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        aborted = offline(page)
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{url}/lab/tree/notebook.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        kernel_is(page, "idle")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        check_grid_and_switch(page, traces)
        kernel_is(page, "idle")
        page.locator(WIDGET).screenshot(path=str(assets / "notebook-widget.png"))

        # The kernel busy until the page answers input(): it handles no widget message before that.
        run_cell(page, "answer = input('the kernel waits: ')")
        page.wait_for_selector(".jp-Stdin-input")
        kernel_is(page, "busy")
        before = page.evaluate(PAINTED_JS, WIDGET)
        page.locator(f"{WIDGET} .mv-layers button[data-index='0']").click()
        page.wait_for_function("() => document.querySelector('.mha-viz-widget .mv-grid').dataset.layer === '0'")
        assert page.evaluate(PAINTED_JS, WIDGET) == before + 1
        assert page.evaluate(KERNEL_JS) == "busy"  # still waiting for the input
        T = len(traces[0].query_tokens)
        r, c = T - 1, 8
        assert f"weight {traces[0].weights[2, r, c]:.3f}" in hover_text(page, 2, r, c, T, T)  # layer 0's numbers

        page.locator(".jp-Stdin-input").fill("done")
        page.locator(".jp-Stdin-input").press("Enter")
        run_cell(page, "print('python reads layer', widget.layer)")  # after the click's message
        page.wait_for_selector(".jp-OutputArea-output:has-text('python reads layer 0')", timeout=90_000)
        page.close()
    assert errors == [] and aborted == []


@needs_chromium
def test_the_exported_html_notebook_shows_the_widget_offline(browser, tmp_path: Path) -> None:
    nb = executed(tmp_path)
    nbformat.write(nb, tmp_path / "executed.ipynb")
    html = export_html(tmp_path / "executed.ipynb", tmp_path / "executed.html")
    traces = mha_viz.load_model(mha_viz.INDUCTION_MODEL).traces(TEXT)
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    aborted = offline(page)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(html.as_uri())
    check_grid_and_switch(page, traces)
    page.locator(f"{WIDGET} .mv-layers button[data-index='0']").click()
    assert grid_layer(page) == "0"  # repainted at once: there is no kernel here
    page.locator(f"{WIDGET} .mv-views button[data-view='overview']").click()
    assert page.locator(f"{WIDGET} .mv-overview canvas.mv-heatmap").count() == 2 * 4
    page.locator(f"{WIDGET} .mv-overview .mv-panel").nth(4 + 3).click()  # layer 1, head 3
    assert page.locator(f"{WIDGET} .mv-overview .mv-panel[aria-pressed='true']").get_attribute("title") == (
        "layer 1, head 3")
    page.locator(f"{WIDGET} .mv-views button[data-view='lines']").click()
    assert page.locator(f"{WIDGET} svg.mv-lines").get_attribute("data-head") == "3"
    assert page.locator(f"{WIDGET} svg.mv-lines").get_attribute("data-layer") == "1"
    n = int(np.sum(traces[1].weights[3] >= 0.01 * np.nanmax(traces[1].weights[3])))
    assert page.locator(f"{WIDGET} svg.mv-lines line").count() == n
    page.close()
    assert errors == [] and aborted == []
