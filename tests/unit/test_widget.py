"""mha_viz.show(): the notebook widget's data and state, from a trace, a list of layers, a source and a model."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import traitlets

from harness.browser import ROOT
from mha_viz import AttentionTrace
from mha_viz.config import MHAConfig
from mha_viz.figures.heads import MAX_CELLS_PER_SIDE
from mha_viz.layer_payload import NAN
from mha_viz.renderer import NOTEBOOK_ESM
from mha_viz.sources import ConfigurableSource, configurable_trace
from mha_viz.widget import show
from tests.tiny_causal import tiny_causal

TEXT = "the cat sat on the mat because it was tired"
BOUND = 1.53e-5  # the uint16 codes' error in [0, 1] (mha_viz/layer_payload.py's docstring)


def decoded_stack(data: bytes) -> tuple[dict, np.ndarray]:
    """The payload as widget.js decodes it: (header, [L, H, t, s] float32, NaN where masked)."""
    (n,) = np.frombuffer(data[:4], "<u4")
    header = json.loads(data[4:4 + int(n)])
    shape = (header["layers"], header["heads"], header["rows"], header["cols"])
    codes = np.frombuffer(data[4 + int(n):], "<u2").reshape(shape)
    step = (header["hi"] - header["lo"]) / (NAN - 1)
    values = (header["lo"] + codes.astype(np.float64) * step).astype(np.float32)
    return header, np.where(codes == NAN, np.float32(np.nan), values)


def assert_weights(widget, traces: list[AttentionTrace]) -> None:
    header, stack = decoded_stack(widget.data)
    expected = np.stack([t.weights for t in traces]).astype(np.float32)
    assert (header["layers"], header["heads"]) == expected.shape[:2] == (widget.num_layers, widget.num_heads)
    assert stack.shape == expected.shape
    finite = np.isfinite(expected)
    assert np.array_equal(np.isfinite(stack), finite)  # masked cells (causal) arrive as NaN
    assert np.abs(stack[finite] - expected[finite]).max() <= BOUND
    assert widget.query_labels == [f"{i}: {t}" for i, t in enumerate(traces[0].query_tokens)]
    assert widget.key_labels == [f"{i}: {t}" for i, t in enumerate(traces[0].key_tokens)]


@pytest.mark.slow
def test_import_mha_viz_does_not_import_anywidget() -> None:
    code = "import sys, mha_viz; mha_viz.AttentionTrace; print('anywidget' in sys.modules, 'ipywidgets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]


def test_a_trace_is_one_layer_with_its_weights_and_tokens() -> None:
    trace = configurable_trace(TEXT, MHAConfig(32, 4), seed=3, causal=True)
    widget = show(trace)
    assert_weights(widget, [trace])
    assert (widget.layer, widget.head, widget.view) == (0, None, "heads")
    assert widget.header["labels"] == [f"head {h}" for h in range(4)]


def test_a_source_and_a_list_of_layers() -> None:
    source = ConfigurableSource("placeholder", MHAConfig(24, 3), seed=1)
    widget = show(source, TEXT, view="lines", head=2)
    trace = source.with_text(TEXT).trace(0)
    assert_weights(widget, [trace])
    other = configurable_trace(TEXT, MHAConfig(24, 3), seed=9)
    widget = show([trace, other], layer=1)
    assert_weights(widget, [trace, other])
    assert (widget.layer, widget.head, widget.view) == (1, None, "heads")


def test_a_model_sends_every_layer_once() -> None:
    model = tiny_causal("llama")  # 2 layers, 4 query heads on 2 K/V heads
    widget = show(model, TEXT, view="overview", layer=1, head=3)
    traces = list(model.traces(TEXT))
    assert len(traces) == 2
    assert_weights(widget, traces)
    assert widget.header["labels"][3] == "head 3 (K/V head 1)"
    assert (widget.layer, widget.head, widget.view) == (1, 3, "overview")
    assert widget.title.startswith("tiny-llama: 2 layers, 4 heads")


def test_layer_and_head_are_state_python_reads_and_sets() -> None:
    widget = show([configurable_trace(TEXT, MHAConfig(16, 2), seed=s) for s in range(3)])
    seen = []
    widget.observe(lambda change: seen.append((change["name"], change["new"])), names=["layer", "head"])
    widget.layer, widget.head, widget.view = 2, 1, "lines"
    assert seen == [("layer", 2), ("head", 1)]
    state = widget.get_state()  # what goes to the browser (and into a notebook's saved widget state)
    assert (state["layer"], state["head"], state["view"]) == (2, 1, "lines")
    assert bytes(state["data"]) == widget.data
    with pytest.raises(traitlets.TraitError, match="layer 3 is out of range"):
        widget.layer = 3
    with pytest.raises(traitlets.TraitError, match="head 2 is out of range"):
        widget.head = 2
    with pytest.raises(traitlets.TraitError):
        widget.view = "pie"
    assert (widget.layer, widget.head) == (2, 1)


def test_bad_input_gets_a_clear_exception() -> None:
    trace = configurable_trace(TEXT, MHAConfig(16, 2))
    with pytest.raises(ValueError, match="view must be one of heads, lines, overview"):
        show(trace, view="pie")
    with pytest.raises(TypeError, match="show\\(\\) takes an AttentionTrace"):
        show(np.zeros((2, 3, 3)))
    with pytest.raises(TypeError, match="non-empty list of AttentionTrace"):
        show([])
    with pytest.raises(TypeError, match="needs the text"):
        show(tiny_causal("gpt2"))
    with pytest.raises(traitlets.TraitError, match="layer 1 is out of range"):
        show(trace, layer=1)


def test_long_inputs_are_pooled_as_the_heads_chart_draws_them() -> None:
    text = " ".join(f"w{i % 50}" for i in range(300))
    trace = configurable_trace(text, MHAConfig(16, 2), max_tokens=300)
    widget = show(trace)
    header, _ = decoded_stack(widget.data)
    assert header["rows"] == len(widget.query_labels) <= MAX_CELLS_PER_SIDE
    assert widget.query_labels[0].startswith("0-2: ") and widget.query_labels[0].endswith("(max)")


def test_the_static_copy_is_offline_and_holds_the_state() -> None:
    widget = show([configurable_trace(TEXT, MHAConfig(16, 2), seed=s) for s in range(2)], layer=1, head=0)
    data, _ = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    page = data["text/html"]
    assert json.dumps(NOTEBOOK_ESM).replace("</", "<\\/") in page  # the widget's own script
    assert re.findall(r"https?://[^\s\"'\\]+", page) == ["http://www.w3.org/2000/svg"]  # a namespace, not a fetch
    state = json.loads(re.search(r"const state = (\{.*?\});\n", page).group(1))
    assert base64.b64decode(state["data"]) == widget.data
    assert (state["layer"], state["head"]) == (1, 0)
