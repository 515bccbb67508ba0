"""The one renderer of attention heads (renderer.js) and its hosts.

renderer.js paints the heads grid, the lines view and the layers x heads overview from one payload of every layer's
weights (mha_viz/layer_payload.py) and exports `render({model, el})`, where model is anywidget's model or a host's
small stand-in (get, set, on, off, save_changes). Each host is that module plus a few lines that adapt it:
- the notebook widget (mha_viz/widget.py): NOTEBOOK_ESM, anywidget's module;
- the app's Heads and Overview views (mha_viz/ui/heads_component.py): module(STREAMLIT_ADAPTER), a Streamlit
  component whose data is the payload with the view's state in its header.
Pure text: no Streamlit, no anywidget.
"""

from __future__ import annotations

from pathlib import Path

RENDERER = Path(__file__).with_name("renderer.js").read_text(encoding="utf-8")
NOTEBOOK_ESM = RENDERER + "\nexport default { render };\n"

# The app's host: the payload's header carries the state (view, active layer, labels, the subtitle around the
# layer's number, if any); a click repaints here at once, and the server hears of a layer (trigger "layer") once the
# clicks pause for SETTLE_MS, so that stepping through layers costs one rerun, not one per step. A head picked
# in the grid is shown picked in the page only.
STREAMLIT_ADAPTER = """
const SETTLE_MS = 400; // with the weights; without them ("buttons") the server is told at once
export default function ({ data, parentElement, setTriggerValue }) {
  const root = parentElement.querySelector(".mv-root");
  const { meta } = header(data); // render() decodes the values once
  const focused = root.contains(root.getRootNode().activeElement); // a keyboard user stepping through layers
  const subtitle = meta.subtitle; // none: no title (one layer, named by the page)
  const values = { data, view: meta.view || "heads", views: [meta.view || "heads"], layer: meta.active || 0,
                   head: meta.head ?? null, query_labels: meta.queries, key_labels: meta.keys,
                   failed_checks: meta.failed || {} };
  let told = values.layer;
  const listeners = {};
  let timer = null;
  const model = {
    get: (k) => (k === "title" ? (subtitle ? subtitle[0] + values.layer + subtitle[1] : "") : values[k]),
    set: (k, v) => { values[k] = v; (listeners["change:" + k] || []).forEach((f) => f()); },
    on: (e, f) => { (listeners[e] = listeners[e] || []).push(f); },
    off: (e, f) => { listeners[e] = (listeners[e] || []).filter((g) => g !== f); },
    save_changes: () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        if (values.layer !== told) { told = values.layer; setTriggerValue("layer", told); }
      }, values.view === "buttons" ? 0 : SETTLE_MS);
    },
  };
  const stop = render({ model, el: root });
  if (focused) { // a rerun redraws the buttons: the keyboard's focus goes on from the pressed one
    const again = root.querySelector('.mv-layers button[aria-pressed="true"]');
    if (again) again.focus();
  }
  return () => { clearTimeout(timer); stop(); };
}
"""


def module(adapter: str) -> str:
    """The renderer with a host's adapter: one ES module."""
    return RENDERER + adapter
