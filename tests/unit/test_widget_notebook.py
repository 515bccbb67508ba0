"""docs/examples/notebook.ipynb run headless by nbclient in a real kernel: its output is the mha_viz.show() widget,
whose saved widget state holds the layer, the head and every layer's weights; exported to HTML, it shows the
widget's static copy and names no server to load scripts from."""

from __future__ import annotations

import base64
import json
import os
import re

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import mha_viz
from harness.browser import ROOT
from mha_viz.widget import export_html
from tests.unit.test_widget import BOUND, decoded_stack

NOTEBOOK = ROOT / "docs" / "examples" / "notebook.ipynb"
TEXT = "the red fox saw a big owl by the lake . the red fox saw a big owl"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

pytestmark = pytest.mark.slow  # starts a kernel


def executed(folder) -> nbformat.NotebookNode:
    """The example notebook, run in a fresh kernel (this interpreter, the checkout on its path), widget state kept."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=180, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(folder)}})
    client.execute(env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    return nb


def test_the_notebook_produces_the_widget_with_its_state(tmp_path) -> None:
    nb = executed(tmp_path)
    states = nb.metadata["widgets"][WIDGET_STATE]["state"]
    views = [o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if WIDGET_VIEW in o.get("data", {})]  # also tqdm's progress bars (loading the weights)
    (widget,) = [states[v] for v in views if states[v]["model_name"] == "AnyModel"]
    state = widget["state"]
    assert (state["layer"], state["head"], state["view"]) == (1, 2, "heads")
    assert "function render" in state["_esm"]  # the script travels with the state, from the package
    (buffer,) = [b for b in widget["buffers"] if b["path"] == ["data"]]
    header, stack = decoded_stack(base64.b64decode(buffer["data"]))
    expected = np.stack([t.weights for t in mha_viz.load_model(mha_viz.INDUCTION_MODEL).traces(TEXT)])
    assert (header["layers"], header["heads"]) == (2, 4)
    finite = np.isfinite(expected)
    assert np.array_equal(np.isfinite(stack), finite)
    assert np.abs(stack[finite] - expected[finite]).max() <= BOUND
    last = nb.cells[-1].outputs[0]["data"]["text/plain"]
    assert last == "(1, 2, 'heads')"

    nbformat.write(nb, tmp_path / "executed.ipynb")
    page = export_html(tmp_path / "executed.ipynb", tmp_path / "executed.html").read_text(encoding="utf-8")
    assert page.count('class="mha-viz-static"') == 1
    assert json.dumps(state["_esm"]).replace("</", "<\\/") in page
    loads = re.findall(r"""(?:src|href)=["'](https?:[^"']+)""", page)
    assert loads == [], f"the page loads from the network: {loads}"
    assert "unpkg" not in page and "jsdelivr" not in page  # nor the widget manager
