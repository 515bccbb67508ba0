"""The one renderer of attention heads (renderer.js) and its hosts.

renderer.js paints the heads grid, the lines view and the layers x heads overview from one payload of every layer's
weights (mha_viz/layer_payload.py) and exports `render({model, el})`, where model is anywidget's model or a host's
small stand-in (get, set, on, off, save_changes). Each host is that module plus a few lines that adapt it:
- the notebook widget (mha_viz/widget.py): NOTEBOOK_ESM, anywidget's module;
- the app's Heads views and layer buttons (mha_viz/ui/heads_component.py): module(STREAMLIT_ADAPTER), a Streamlit
  component whose data is the payload with the view's state in its header (a pretrained model's every layer, a
  configurable layer, a long input's overview with its zoom's square).
Pure text: no Streamlit, no anywidget.
"""

from __future__ import annotations

from pathlib import Path

RENDERER = Path(__file__).with_name("renderer.js").read_text(encoding="utf-8")
NOTEBOOK_ESM = RENDERER + "\nexport default { render };\n"

# The app's host: the payload's header carries the state (view, active layer, labels, the subtitle around the
# layer's number, if any); a click repaints here at once, and the server hears of a layer (trigger "layer") once the
# clicks pause for SETTLE_MS, so that stepping through layers costs one rerun, not one per step; a rerun that
# arrives meanwhile does not take the page back to an earlier layer. A head picked in the grid is shown picked in
# the page only. On a zoomable grid (a long input's overview) a cell clicked moves the mark at once and tells the
# server (trigger "zoom", {row, col}) at once.
STREAMLIT_ADAPTER = """
const SETTLE_MS = 400; // with the weights; without them ("buttons") the server is told at once
export default function ({ data, parentElement, setTriggerValue }) {
  const root = parentElement.querySelector(".mv-root");
  const { meta } = header(data); // render() decodes the values once
  const focused = root.contains(root.getRootNode().activeElement); // a keyboard user stepping through layers
  const subtitle = meta.subtitle; // none: no title (one layer, named by the page)
  const active = meta.active || 0;
  // A layer picked here stays shown through the server's reruns that do not answer it yet (one for an earlier pick,
  // or another widget's): until the server draws that layer, or moves to a layer of its own. Kept on the root,
  // which outlives this call; the timer tells the server through the latest call's trigger.
  const picked = root.mvPicked;
  const keep = picked !== undefined && picked !== active && (active === root.mvServer || active === root.mvTold);
  if (!keep) root.mvPicked = undefined;
  root.mvServer = active;
  root.mvTell = () => {
    root.mvTimer = null;
    if (root.mvPicked === undefined || root.mvPicked === root.mvServer) return;
    root.mvTold = root.mvPicked;
    setTriggerValue("layer", root.mvTold);
  };
  const values = { data, view: meta.view || "heads", views: [meta.view || "heads"], layer: keep ? picked : active,
                   head: meta.head ?? null, query_labels: meta.queries, key_labels: meta.keys,
                   failed_checks: meta.failed || {}, mark: meta.mark || null, zoomable: Boolean(meta.zoomable) };
  const tellLater = () => {
    clearTimeout(root.mvTimer);
    root.mvTimer = setTimeout(() => root.mvTell(), values.view === "buttons" ? 0 : SETTLE_MS);
  };
  if (keep && !root.mvTimer) tellLater(); // the earlier tell is answered: tell this one
  const listeners = {};
  const model = {
    get: (k) => (k === "title" ? (subtitle ? subtitle[0] + values.layer + subtitle[1] : "") : values[k]),
    set: (k, v) => { values[k] = v; (listeners["change:" + k] || []).forEach((f) => f()); },
    on: (e, f) => { (listeners[e] = listeners[e] || []).push(f); },
    off: (e, f) => { listeners[e] = (listeners[e] || []).filter((g) => g !== f); },
    save_changes: () => {
      if (values.zoom) { // a cell clicked on a zoomable grid: the server computes that zoom now
        setTriggerValue("zoom", values.zoom);
        values.zoom = undefined;
        return;
      }
      root.mvPicked = values.layer;
      tellLater();
    },
  };
  const stop = render({ model, el: root });
  if (focused) { // a rerun redraws the buttons: the keyboard's focus goes on from the pressed one
    const again = root.querySelector('.mv-layers button[aria-pressed="true"]');
    if (again) again.focus();
  }
  return stop; // a pending tell outlives a rerun's redraw (its timer is the root's)
}
"""


def module(adapter: str) -> str:
    """The renderer with a host's adapter: one ES module."""
    return RENDERER + adapter
