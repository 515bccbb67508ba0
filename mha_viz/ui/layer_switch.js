// Switch a heads chart between layers (or open another head) in the browser, from every layer's
// weights sent once.
//
// data: bytes = [uint32 n, little-endian][n bytes of JSON header][uint16 values, little-endian]
//   header: {layers, heads, rows, cols, lo, hi, labels, active, chart, param, thumbnails, subtitle, paint}
//   paint: {colorscale: [[position, [r, g, b]], ...], background: [r, g, b], downward}: how the chart colours
//   its heatmaps, sent by the server (layer_switch.paint_style), so that only Plotly's public API is used
//   values: [layers, heads, rows, cols]; 65535 is NaN, else lo + v * ((hi - lo) / 65534), kept as float32
//   (the server picks each v so that this value's toFixed(3), the hover's %{z:.3f}, is the true value's;
//   layer_switch.py states the error bound; decode exactly this way)
// The chart is the Plotly chart whose element has the Streamlit key `chart`.
// - Layer buttons (no `thumbnails`), the page's one layer control: a click rewrites the subtitle
//   (subtitle[0] + layer + subtitle[1]), repaints every heatmap of the chart (trace i = head i)
//   and writes `param` into the URL at once; the server is told (trigger "layer") once the clicks
//   pause for SETTLE_MS, and its rerun redraws the page at that layer (stepping through layers
//   costs one rerun, not one per step). Without the chart, Plotly or weights (heads 0), the
//   server is told at once.
// - `thumbnails` (the key of an overview chart whose points carry [layer, head]): a click on a
//   thumbnail repaints the chart if it shows one head; the overview's own click event tells the
//   server, whose rerun redraws the page with that head open.
const NAN = 65535;
const SETTLE_MS = 400;
const REDRAW_MS = 250; // Plotly's own redraw of the grid follows the fast paint at most this late (sooner when idle)

function decode(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = view.getUint32(0, true);
  const meta = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + n)));
  const count = meta.layers * meta.heads * meta.rows * meta.cols;
  const copy = bytes.slice(4 + n, 4 + n + 2 * count); // a fresh, aligned buffer
  return { meta, values: new Uint16Array(copy.buffer) };
}

function layerMatrices(meta, values, layer) {
  // z of every head of one layer (rows of Float32Array) and each head's largest finite value.
  const { heads, rows, cols, lo, hi } = meta;
  const step = (hi - lo) / 65534;
  const zs = [];
  const tops = [];
  for (let h = 0; h < heads; h++) {
    const z = [];
    let top = 0;
    for (let r = 0; r < rows; r++) {
      const start = ((layer * heads + h) * rows + r) * cols;
      const row = new Float32Array(cols);
      for (let c = 0; c < cols; c++) {
        const v = values[start + c];
        row[c] = v === NAN ? NaN : lo + v * step;
        if (v !== NAN && row[c] > top) top = row[c];
      }
      z.push(row);
    }
    zs.push(z);
    tops.push(top);
  }
  return { zs, tops };
}

const chartOf = (key) => document.querySelector(`.st-key-${key} .js-plotly-plot`);
const idle = window.requestIdleCallback ? (f, options) => window.requestIdleCallback(f, options) : (f) => setTimeout(f, 50);

export default function ({ data, parentElement, setTriggerValue }) {
  const root = parentElement.querySelector(".layer-switch");
  if (!root || !data) return;
  const { meta, values } = decode(data instanceof Uint8Array ? data : new Uint8Array(data));
  const cache = new Map();
  const matrices = (layer) => {
    if (!cache.has(layer)) cache.set(layer, layerMatrices(meta, values, layer));
    return cache.get(layer);
  };
  // Decode every layer while the page is idle, so that a click only repaints.
  for (let layer = 0; layer < meta.layers; layer++) idle(() => matrices(layer));
  const focused = root.contains(root.getRootNode().activeElement); // a keyboard user stepping through layers
  root.replaceChildren();
  if (meta.thumbnails) return openOnClick(meta, matrices);
  const subtitle = parentElement.querySelector(".subtitle");
  return layerButtons(meta, matrices, root, subtitle, setTriggerValue, focused);
}

function openOnClick(meta, matrices) {
  // Repaint the one-head chart when a thumbnail of the overview is clicked.
  let opened = 0; // the latest click's number: an earlier click's late redraw is dropped
  function open(event) {
    const point = event && event.points && event.points[0];
    const target = point && point.customdata;
    const gd = chartOf(meta.chart);
    if (!Array.isArray(target) || !gd || !window.Plotly || gd.data.length !== 1) return;
    const [layer, head] = target.map(Number);
    const { zs, tops } = matrices(layer);
    const top = Math.max(tops[head], 1e-9);
    const redraw = () => window.Plotly.update(gd, { z: [zs[head]] }, {
      "coloraxis.cmax": top, "title.text": `layer ${layer}`, "annotations[0].text": meta.labels[head],
    }, [0]);
    // As the layer buttons do: the heatmap now, Plotly's redraw (title, head label, colour bar) once idle.
    const click = ++opened;
    const current = () => click === opened && gd.isConnected; // not a later click's, not a chart a rerun replaced
    if (paintHeatmaps(gd, [zs[head]], top, meta.paint)) idle(() => current() && redraw(), { timeout: REDRAW_MS });
    else redraw();
  }
  // The overview chart is redrawn (a new element) after every rerun: listen on whichever is there
  // when a pointer goes down on it, before its click.
  function attach(event) {
    const gd = event.target.closest && event.target.closest(`.st-key-${meta.thumbnails} .js-plotly-plot`);
    if (gd && gd.on && !gd.mhaVizOpens) {
      gd.on("plotly_click", open);
      gd.mhaVizOpens = true;
    }
  }
  document.addEventListener("pointerdown", attach, true);
  return () => document.removeEventListener("pointerdown", attach, true);
}

function layerButtons(meta, matrices, root, subtitle, setTriggerValue, focused) {
  let active = meta.active;
  let pending = null; // [timer, layer] of a layer the server has not been told yet
  const [before, after] = meta.subtitle || ["", ""];
  const title = (layer) => {
    if (subtitle) subtitle.textContent = before || after ? `${before}${layer}${after}` : "";
  };
  title(active);
  const label = document.createElement("span");
  label.className = "label";
  label.textContent = "Layer";
  root.appendChild(label);
  const buttons = [];
  for (let layer = 0; layer < meta.layers; layer++) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = String(layer);
    b.title = `Show layer ${layer}`;
    b.setAttribute("aria-pressed", String(layer === active));
    b.tabIndex = layer === active ? 0 : -1; // one tab stop; the arrow keys step the layer
    b.addEventListener("click", () => show(layer));
    b.addEventListener("keydown", (e) => {
      const next = e.key === "ArrowRight" ? layer + 1 : e.key === "ArrowLeft" ? layer - 1 : null;
      if (next !== null && next >= 0 && next < meta.layers) {
        e.preventDefault();
        buttons[next].focus();
        show(next);
      }
    });
    buttons.push(b);
    root.appendChild(b);
  }
  if (focused && buttons[active]) buttons[active].focus(); // redrawn by the server's rerun: the focus stays
  if (meta.heads > 0 && meta.chart) {
    const note = document.createElement("span");
    note.className = "note";
    note.textContent = "switches in your browser";
    root.appendChild(note);
  }

  function tell() {
    if (pending === null) return;
    clearTimeout(pending[0]);
    const layer = pending[1];
    pending = null;
    setTriggerValue("layer", layer);
  }

  function show(layer) {
    if (layer === active) return;
    active = layer;
    buttons.forEach((b, i) => {
      b.setAttribute("aria-pressed", String(i === layer));
      b.tabIndex = i === layer ? 0 : -1;
    });
    title(layer);
    const gd = meta.heads > 0 && meta.chart ? chartOf(meta.chart) : null;
    const here = gd !== null && window.Plotly !== undefined;
    if (here) {
      const { zs, tops } = matrices(layer);
      const top = Math.max(...tops, 1e-9);
      const redraw = () => window.Plotly.update(gd, { z: zs }, { "coloraxis.cmax": top }, zs.map((_, i) => i));
      // Plotly redraws the whole grid (axes, titles, colour bar: ~60-90 ms for 12 heads); the heatmap images
      // alone take a few ms. Paint those now, and let Plotly bring the rest in line once the browser is idle.
      // Until then the hover reads the old values (Plotly's redraw follows within REDRAW_MS).
      if (paintHeatmaps(gd, zs, top, meta.paint)) {
        idle(() => active === layer && gd.isConnected && redraw(), { timeout: REDRAW_MS }); // not a replaced chart
      }
      else redraw();
    }
    const url = new URL(window.location.href);
    url.searchParams.set(meta.param, String(layer));
    window.history.replaceState(window.history.state, "", url);
    if (pending !== null) clearTimeout(pending[0]);
    pending = [setTimeout(tell, here ? SETTLE_MS : 0), layer];
  }

  return tell; // unmounted or redrawn with new data: a layer not yet told is told now
}

function colorAt(scale, t) {
  // Plotly's colour for t in [0, 1] on a colour scale [[position, [r, g, b]], ...]: linear in RGB.
  let i = 1;
  while (i < scale.length - 1 && scale[i][0] < t) i++;
  const [p0, c0] = scale[i - 1];
  const [p1, c1] = scale[i];
  const f = p1 > p0 ? Math.min(1, Math.max(0, (t - p0) / (p1 - p0))) : 0;
  return c0.map((v, k) => Math.round(v + f * (c1[k] - v)));
}

function bmp(z, scale, top, downward, background) {
  // A 24-bit BMP data URL of z, one pixel a cell (row 0 at the top when downward): no compression to wait for.
  const rows = z.length;
  const cols = z[0].length;
  const stride = (3 * cols + 3) & ~3;
  const bytes = new Uint8Array(54 + stride * rows);
  const view = new DataView(bytes.buffer);
  bytes[0] = 0x42; bytes[1] = 0x4d; // "BM"
  view.setUint32(2, bytes.length, true);
  view.setUint32(10, 54, true);
  view.setUint32(14, 40, true);
  view.setInt32(18, cols, true);
  view.setInt32(22, -rows, true); // top-down
  view.setUint16(26, 1, true);
  view.setUint16(28, 24, true);
  view.setUint32(34, stride * rows, true);
  for (let r = 0; r < rows; r++) {
    const row = z[downward ? r : rows - 1 - r];
    let o = 54 + r * stride;
    for (let c = 0; c < cols; c++, o += 3) {
      const v = row[c];
      const [red, green, blue] = Number.isNaN(v) ? background : colorAt(scale, v / top);
      bytes[o] = blue; bytes[o + 1] = green; bytes[o + 2] = red;
    }
  }
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return "data:image/bmp;base64," + btoa(text);
}

function paintHeatmaps(gd, zs, top, paint) {
  // Draw each head's new z straight into the <image> Plotly drew for it (one pixel a cell, scaled without
  // smoothing), with the server's colour scale from 0 to top (paint: see the header). False when the chart is
  // not drawn as expected (one image per head) or the paint is missing: then Plotly redraws it all.
  const images = gd.querySelectorAll(".heatmaplayer image");
  if (!paint || images.length !== zs.length || !Array.isArray(paint.colorscale)) return false;
  const { colorscale, background, downward } = paint;
  zs.forEach((z, i) => {
    images[i].style.imageRendering = "pixelated";
    images[i].setAttribute("href", bmp(z, colorscale, top, downward, background));
  });
  return true;
}
