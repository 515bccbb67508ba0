"""mha_viz.show(): attention in a Jupyter notebook (JupyterLab, Notebook, VS Code) as an anywidget widget.

Every layer's weights go to the browser once, in one payload (mha_viz/layer_payload.py), and the one renderer
(mha_viz/renderer.js, the app's too) paints the views from them: a layer or head click repaints at once, without the
kernel, which is only told the new `layer` / `head`. It is the widget's only script (in the package: no CDN), and each
output also carries a static HTML copy of the widget (the same script and data inline) that an exported HTML
notebook shows offline: see export_html().

This module imports anywidget (`pip install "mha-viz[notebook]"`); `import mha_viz` does not.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import traitlets

from .checks import failure_message
from .layer_payload import MAX_BYTES, fits, payload_of, payload_shape
from .renderer import NOTEBOOK_ESM
from .trace import AttentionTrace

VIEWS = ("heads", "lines", "overview")
STATIC_MAX_BYTES = 4 * 2**20  # a larger payload is not copied into the static HTML (the notebook would double)


def traces_of(model_or_trace: Any, text: str | None = None, part: str | None = None) -> list[AttentionTrace]:
    """The layers to show: a trace, a sequence of traces (one per layer), a PretrainedModel with a text (every
    layer from one forward pass), or a source (mha_viz.sources: ConfigurableSource, ModelSource, ...; with text:
    on that text)."""
    if isinstance(model_or_trace, AttentionTrace):
        return [model_or_trace]
    if isinstance(model_or_trace, Sequence) and not isinstance(model_or_trace, str | bytes):
        traces = list(model_or_trace)
        if not traces or not all(isinstance(t, AttentionTrace) for t in traces):
            raise TypeError("show() needs a non-empty list of AttentionTrace (one per layer)")
        return traces
    if hasattr(model_or_trace, "traces") and hasattr(model_or_trace, "tokenizer"):  # a PretrainedModel
        if not isinstance(text, str):
            raise TypeError("show(model, text): a pretrained model needs the text to read")
        return list(model_or_trace.traces(text, part=part))
    if hasattr(model_or_trace, "trace") and hasattr(model_or_trace, "num_layers"):  # a source
        source = model_or_trace if text is None else model_or_trace.with_text(text)
        return [source.trace(i) for i in range(source.num_layers)]
    raise TypeError(f"show() takes an AttentionTrace, a list of them, a PretrainedModel with a text or a source, "
                    f"not {type(model_or_trace).__name__}")


def payload(traces: Sequence[AttentionTrace]) -> tuple[bytes, list[str], list[str]]:
    """The widget's data: (payload bytes, query labels, key labels); layer_payload.payload_of, refused with a
    ValueError when it is more than the widget sends."""
    shape = payload_shape(traces)
    if not fits(shape):
        raise ValueError(f"{shape[0]} layers x {shape[1]} heads of {shape[2]} x {shape[3]} weights are more than the "
                         f"widget sends ({MAX_BYTES // 2**20} MiB): show fewer layers")
    return payload_of(traces)


def failed_checks(traces: Sequence[AttentionTrace]) -> dict[str, str]:
    """{layer index as a string: failure_message} for each trace whose self-check failed."""
    return {str(i): message for i, t in enumerate(traces) if (message := failure_message(t)) is not None}


def title_of(traces: Sequence[AttentionTrace]) -> str:
    meta = traces[0].meta
    name = meta.get("model") or (f"random layer, seed {meta['seed']}" if "seed" in meta else "attention")
    return f"{name}: {len(traces)} layer{'s' * (len(traces) != 1)}, {traces[0].weights.shape[0]} heads"


class AttentionWidget(anywidget.AnyWidget):
    """Every layer's attention heads in a notebook. `layer`, `head` and `view` are read and set from Python (a set
    repaints the widget) and follow clicks in the browser."""

    _esm = NOTEBOOK_ESM
    data = traitlets.Bytes().tag(sync=True)
    query_labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    key_labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    view = traitlets.Enum(VIEWS, default_value="heads").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(None, allow_none=True).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    # {layer (as a string): what failed}: the layers whose self-check against the model failed (mha_viz.checks)
    failed_checks = traitlets.Dict(value_trait=traitlets.Unicode()).tag(sync=True)

    @property
    def num_layers(self) -> int:
        return self.header["layers"]

    @property
    def num_heads(self) -> int:
        return self.header["heads"]

    @property
    def header(self) -> dict:
        """The payload's JSON header (layers, heads, rows, cols, lo, hi, labels, paint)."""
        (n,) = np.frombuffer(self.data[:4], "<u4")
        return json.loads(self.data[4:4 + int(n)])

    @traitlets.validate("layer")
    def _check_layer(self, proposal: dict) -> int:
        layer = proposal["value"]
        if self.data and not 0 <= layer < self.num_layers:
            raise traitlets.TraitError(f"layer {layer} is out of range: the widget has layers 0..{self.num_layers - 1}")
        return layer

    @traitlets.validate("head")
    def _check_head(self, proposal: dict) -> int | None:
        head = proposal["value"]
        if head is not None and self.data and not 0 <= head < self.num_heads:
            raise traitlets.TraitError(f"head {head} is out of range: the widget has heads 0..{self.num_heads - 1}")
        return head

    def static_html(self) -> str:
        """The widget as self-contained HTML (its script and data inline, no network): what an exported HTML notebook
        shows. Clicks switch layers and heads there too, with no kernel."""
        state = {"data": base64.b64encode(self.data).decode(), "query_labels": self.query_labels,
                 "key_labels": self.key_labels, "view": self.view, "layer": self.layer, "head": self.head,
                 "title": self.title, "failed_checks": self.failed_checks}
        script = f"""
const state = {json.dumps(state)};
const esm = {json.dumps(NOTEBOOK_ESM)};
const url = URL.createObjectURL(new Blob([esm], {{type: "text/javascript"}}));
const bytes = Uint8Array.from(atob(state.data), (c) => c.charCodeAt(0));
const values = {{...state, data: bytes}};
const listeners = {{}};
const model = {{
  get: (k) => values[k],
  set: (k, v) => {{ values[k] = v; (listeners["change:" + k] || []).forEach((f) => f()); }},
  on: (e, f) => {{ (listeners[e] = listeners[e] || []).push(f); }},
  off: (e, f) => {{ listeners[e] = (listeners[e] || []).filter((g) => g !== f); }},
  save_changes: () => {{}},
}};
import(url).then((m) => m.render({{model, el: document.getElementById("{self.model_id}-static")}}));
"""
        script = script.replace("</", "<\\/")  # nothing inside closes the script element
        return f'<div id="{self.model_id}-static" class="mha-viz-static"></div><script type="module">{script}</script>'

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None and len(self.data) <= STATIC_MAX_BYTES:
            bundle[0]["text/html"] = self.static_html()
        return bundle


def show(model_or_trace: Any, text: str | None = None, *, view: str = "heads", layer: int = 0,
         head: int | None = None, part: str | None = None) -> AttentionWidget:
    """A notebook widget of every layer's heads: view "heads" (the grid; a click on a head picks it), "lines" (the
    picked head's query-to-key lines) or "overview" (layers x heads thumbnails; a click opens that layer and head).
    model_or_trace: an AttentionTrace, a list of them (one per layer), a PretrainedModel with `text`, or a source.
    part: the pretrained model's part (encoder, decoder, cross; default its first). A layer whose self-check against
    the model failed (mha_viz.checks) is flagged above its view, with the measured differences and tolerances."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, not {view!r}")
    traces = traces_of(model_or_trace, text, part)
    data, queries, keys = payload(traces)
    widget = AttentionWidget(data=data, query_labels=queries, key_labels=keys, view=view, title=title_of(traces),
                             failed_checks=failed_checks(traces))
    widget.layer = layer  # validated against the layers just sent
    widget.head = head
    return widget


def export_html(notebook: str | Path, html_path: str | Path) -> Path:
    """An executed notebook as one HTML file that shows its mha-viz widgets offline: nbconvert's HTML with each
    widget output's static copy instead of the widget view, and no script loaded from the network (nbconvert's
    defaults load require.js, MathJax and the widget manager from CDNs: LaTeX in markdown cells stays as text)."""
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    nb = nbformat.read(str(notebook), as_version=4)
    nb.metadata.pop("widgets", None)  # without the saved state nbconvert shows the outputs' text/html
    config = Config()
    config.HTMLExporter.require_js_url = "data:,"
    config.HTMLExporter.mathjax_url = "data:,"
    body, _ = HTMLExporter(config=config).from_notebook_node(nb)
    out = Path(html_path)
    out.write_text(body, encoding="utf-8")
    return out


__all__ = ["AttentionWidget", "export_html", "show"]
