// mha-viz's one renderer of attention heads: the heads grid, the lines view and the layers x heads overview, painted
// from every layer's weights sent once (mha_viz/layer_payload.py), so that a layer or head click repaints at once
// and the host (a notebook's kernel, the app's server) is only told the new `layer` / `head` (model.save_changes()).
// Plain DOM + canvas + SVG, no other script, and it owns everything it draws. Hosts (mha_viz/renderer.py): the
// notebook widget (anywidget: its model), its static HTML copy (widget.py: static_html) and the app's Heads views and
// layer buttons (a Streamlit component, mha_viz/ui/heads_component.py: a pretrained model's every layer, a configurable
// layer, a long input's overview), which drive it with a small model of their own.
//
// model: data (payload bytes), query_labels, key_labels, view ("heads" | "lines" | "overview"),
//        layer (int), head (int or null), title, failed_checks ({layer: message} of the layers whose self-check
//        against the model failed: said in an alert above the view), mark ([row0, col0, row1, col1] in cells, or
//        null: a window outlined on every head, e.g. a long input's zoom) and zoomable (a click on a cell moves the
//        mark there, centred, and sets zoom = {row, col}: the host computes the window)
const NAN = 65535;
const SVG = "http://www.w3.org/2000/svg";
const GROUP_COLOURS = ["#0072b2", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#d55e00", "#000000", "#f0e442"];

function bytesOf(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof DataView) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (data && data.buffer instanceof ArrayBuffer) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return new Uint8Array(0);
}

export function header(data) {
  // the payload's JSON header and where the values start, without decoding them
  const bytes = bytesOf(data);
  const n = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0, true);
  return { bytes, n, meta: JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + n))) };
}

export function decode(data) {
  const { bytes, n, meta } = header(data);
  const count = meta.layers * meta.heads * meta.rows * meta.cols;
  const copy = bytes.slice(4 + n, 4 + n + 2 * count); // a fresh, aligned buffer
  const codes = new Uint16Array(copy.buffer);
  const step = (meta.hi - meta.lo) / 65534;
  const values = new Float32Array(count); // as layer_switch.js decodes: lo + v * step in float64, kept as float32
  for (let i = 0; i < count; i++) values[i] = codes[i] === NAN ? NaN : meta.lo + codes[i] * step;
  return { meta, values };
}

function matrix(d, layer, head) {
  const { heads, rows, cols } = d.meta;
  const start = (layer * heads + head) * rows * cols;
  return d.values.subarray(start, start + rows * cols);
}

function top(values) {
  let t = 0;
  for (const v of values) if (Math.abs(v) > t) t = Math.abs(v);
  return t || 1;
}

const SHADES = 1024; // colours of |v| / top in [0, 1], looked up, not interpolated per cell

function shades(d) {
  // paint.colorscale (the app's heatmaps' Blues) at SHADES + 1 evenly spaced positions, as [r, g, b, 255] bytes
  const scale = d.meta.paint.colorscale;
  const out = new Uint8ClampedArray(4 * (SHADES + 1));
  for (let s = 0; s <= SHADES; s++) {
    const x = s / SHADES;
    let rgb = scale[scale.length - 1][1];
    for (let i = 1; i < scale.length; i++) {
      const [p1, c1] = scale[i];
      if (x <= p1) {
        const [p0, c0] = scale[i - 1];
        const f = p1 > p0 ? (x - p0) / (p1 - p0) : 0;
        rgb = c0.map((c, k) => Math.round(c + f * (c1[k] - c)));
        break;
      }
    }
    out.set([...rgb, 255], 4 * s);
  }
  return out;
}

function paintCells(d, m, scaleTop, pixels) {
  // Blues from 0 to scaleTop (paint.colorscale, as the app's heatmaps); a negative weight (differential
  // attention) in red; NaN (masked) the background. pixels: the canvas's RGBA bytes.
  const lut = d.shades || (d.shades = shades(d));
  const [br, bg, bb] = d.meta.paint.background;
  for (let i = 0, o = 0; i < m.length; i++, o += 4) {
    const v = m[i];
    if (v !== v) { // NaN
      pixels[o] = br; pixels[o + 1] = bg; pixels[o + 2] = bb; pixels[o + 3] = 255;
    } else if (v >= 0) {
      const s = 4 * Math.round(Math.min(v / scaleTop, 1) * SHADES);
      pixels[o] = lut[s]; pixels[o + 1] = lut[s + 1]; pixels[o + 2] = lut[s + 2]; pixels[o + 3] = 255;
    } else {
      const x = Math.min(-v / scaleTop, 1);
      pixels[o] = 255; pixels[o + 1] = pixels[o + 2] = Math.round(255 * (1 - 0.8 * x)); pixels[o + 3] = 255;
    }
  }
}

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

function operable(node, act) {
  // a click, Enter or Space: a panel works from the keyboard as a button does
  node.addEventListener("click", act);
  node.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      act();
    }
  });
}

function describe(d, m, layer, head, queries, keys) {
  // the text alternative of one head: its size and its strongest weight, with the tokens
  let best = -1;
  for (let i = 0; i < m.length; i++) if (!Number.isNaN(m[i]) && (best < 0 || m[i] > m[best])) best = i;
  const { rows, cols } = d.meta;
  const where = best < 0 ? "every weight masked"
    : `strongest weight ${m[best].toFixed(3)}, from query ${queries[Math.floor(best / cols)]} to key ${keys[best % cols]}`;
  return `layer ${layer}, ${d.meta.labels[head]}: ${rows} queries x ${cols} keys; ${where}`;
}

function heatmap(d, layer, head, cell, scaleTop, tip, names) {
  // One head as a canvas of rows x cols cells, `cell` px each; the hover names the token pair and the weight.
  const { rows, cols } = d.meta;
  const canvas = el("canvas", { class: "mv-heatmap", width: cols, height: rows, "data-layer": layer, "data-head": head,
    role: "img", "aria-label": describe(d, matrix(d, layer, head), layer, head, ...names) });
  canvas.style.width = `${cols * cell}px`;
  canvas.style.height = `${rows * cell}px`;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(cols, rows);
  paintCells(d, matrix(d, layer, head), scaleTop, image.data);
  ctx.putImageData(image, 0, 0);
  canvas.addEventListener("mousemove", (e) => {
    const box = canvas.getBoundingClientRect();
    const c = Math.min(cols - 1, Math.floor(((e.clientX - box.left) / box.width) * cols));
    const r = Math.min(rows - 1, Math.floor(((e.clientY - box.top) / box.height) * rows));
    tip(e, d, layer, head, r, c);
  });
  canvas.addEventListener("mouseleave", () => tip(null));
  return canvas;
}

export function render({ model, el: root }) {
  const d = decode(model.get("data"));
  const { layers, heads, rows, cols } = d.meta;
  // a hybrid model's layers can differ in heads (header layer_heads); the payload holds `heads`, NaN beyond a layer's
  const headsOf = (l) => (d.meta.layer_heads ? d.meta.layer_heads[l] : heads);
  const queries = model.get("query_labels");
  const keys = model.get("key_labels");
  root.classList.add("mha-viz-widget");
  const style = el("style");
  style.textContent = `
.mha-viz-widget { font: 13px system-ui, sans-serif; color: #222; position: relative; }
.mha-viz-widget button { margin: 0 2px 2px 0; padding: 2px 8px; border: 1px solid #c4c9d4; border-radius: 6px;
  background: #fff; color: #222; cursor: pointer; font: inherit; }
.mha-viz-widget button[aria-pressed="true"] { background: #1f5fa8; border-color: #1f5fa8; color: #fff; }
.mha-viz-widget .mv-bar { display: flex; flex-wrap: wrap; align-items: center; gap: 4px; margin: 2px 0 6px; }
.mha-viz-widget .mv-grid { display: flex; flex-wrap: wrap; gap: 12px; }
.mha-viz-widget .mv-legend { display: flex; align-items: center; gap: 6px; margin: 0 0 4px; }
.mha-viz-widget .mv-strip { display: inline-block; width: 120px; height: 10px; border: 1px solid #c4c9d4; }
.mha-viz-widget .mv-panel { cursor: pointer; padding: 3px; border: 2px solid transparent; border-radius: 4px; }
.mha-viz-widget .mv-panel[aria-pressed="true"] { outline: 3px solid #d55e00; }
.mha-viz-widget canvas { image-rendering: pixelated; display: block; }
.mha-viz-widget .mv-marked { position: relative; display: inline-block; }
.mha-viz-widget .mv-marked canvas { cursor: crosshair; }
.mha-viz-widget .mv-mark { position: absolute; border: 2px solid #d62728; box-sizing: border-box; pointer-events: none; }
.mha-viz-widget .mv-tip { position: absolute; pointer-events: none; background: #222; color: #fff; padding: 3px 6px;
  border-radius: 4px; white-space: pre; font-size: 12px; z-index: 10; }
.mha-viz-widget .mv-overview { display: grid; gap: 3px 8px; align-items: center; justify-content: start; }
.mha-viz-widget .mv-muted { opacity: 0.65; }
.mha-viz-widget [role="group"] > .mv-muted { margin-right: 6px; }
.mha-viz-widget .mv-alert { border: 2px solid #b3261e; background: #fdecea; color: #5f1410; padding: 4px 8px;
  border-radius: 6px; margin: 2px 0 6px; white-space: pre-line; }
.mha-viz-widget .mv-labelled { display: grid; grid-template-columns: auto auto; gap: 2px; }
.mha-viz-widget .mv-keys { display: flex; align-items: flex-end; max-height: 70px; }
.mha-viz-widget .mv-keys span { writing-mode: vertical-rl; transform: rotate(180deg); overflow: hidden;
  white-space: nowrap; line-height: 1; }
.mha-viz-widget .mv-queries { display: flex; flex-direction: column; align-items: flex-end; max-width: 70px; }
.mha-viz-widget .mv-queries span { display: flex; align-items: center; overflow: hidden; white-space: nowrap; }`;
  const title = el("div", { class: "mv-title" });
  const alert = el("div", { class: "mv-alert", role: "alert" });
  const bar = el("div", { class: "mv-bar" });
  const body = el("div", { class: "mv-body" });
  const tipBox = el("div", { class: "mv-tip" });
  tipBox.hidden = true;
  root.replaceChildren(style, title, alert, bar, body, tipBox);

  const tip = (e, _d, layer, head, r, c) => {
    if (!e) {
      tipBox.hidden = true;
      return;
    }
    const v = matrix(d, layer, head)[r * cols + c];
    tipBox.textContent = `layer ${layer}, ${d.meta.labels[head]}\nquery ${queries[r]}\nkey ${keys[c]}\n` +
      `weight ${Number.isNaN(v) ? "masked" : v.toFixed(3)}`;
    const box = root.getBoundingClientRect();
    tipBox.style.left = `${e.clientX - box.left + 12}px`;
    tipBox.style.top = `${e.clientY - box.top + 12}px`;
    tipBox.hidden = false;
  };
  const pick = (changes) => {
    for (const [k, v] of Object.entries(changes)) model.set(k, v);
    model.save_changes(); // the repaint below runs on the local change event: the kernel is only told
  };

  let focusAfterPaint = null; // the button the keyboard moved to, focused again once the view is repainted

  function buttons(label, count, active, name, onClick, marks = null) {
    // marks: a short word after each number (a hybrid model's layer kinds: "lin", "ssm", "attn"), or null
    const group = el("span", { role: "group", "aria-label": label, class: `mv-${name}s` });
    group.appendChild(el("span", { class: "mv-muted" }, label));
    for (let i = 0; i < count; i++) {
      const text = marks ? `${i} ${marks[i]}` : String(i);
      const b = el("button", { type: "button", "aria-pressed": String(i === active), "data-index": i,
        title: `Show ${label.toLowerCase()} ${text}`, tabindex: i === active ? 0 : -1 }, text); // one tab stop: arrows step
      b.addEventListener("click", () => onClick(i));
      b.addEventListener("keydown", (e) => { // the arrows step from the pressed button, as a slider would
        const to = e.key === "ArrowRight" ? i + 1 : e.key === "ArrowLeft" ? i - 1 : null;
        if (to === null || to < 0 || to >= count) return;
        e.preventDefault();
        focusAfterPaint = `.mv-${name}s button[data-index="${to}"]`; // the repaint below focuses it
        onClick(to);
      });
      group.appendChild(b);
    }
    return group;
  }

  function labelled(canvas, cell) {
    // The heatmap with its tokens: queries down the left, keys along the top (when a cell is tall enough to read).
    if (cell < 9) return canvas;
    const font = `${Math.min(cell - 1, 11)}px`;
    const box = el("div", { class: "mv-labelled" });
    const tokens = (labels, cls) => {
      const axis = el("div", { class: cls });
      for (const t of labels) {
        const s = el("span", {}, t.replace(/^\d+(-\d+)?: /, ""));
        s.style.fontSize = font;
        s.style[cls === "mv-keys" ? "width" : "height"] = `${cell}px`;
        axis.appendChild(s);
      }
      return axis;
    };
    box.append(el("span"), tokens(keys, "mv-keys"), tokens(queries, "mv-queries"), canvas);
    return box;
  }

  function legend(scaleTop, signed) {
    // the grid's one colour scale: a strip from 0 (or -top, red, when a weight is negative) to its top value
    const rgb = (v) => {
      const px = new Uint8ClampedArray(4);
      paintCells(d, [v], scaleTop, px);
      return `rgb(${px[0]}, ${px[1]}, ${px[2]})`;
    };
    const stops = [];
    for (let i = 0; i <= 10; i++) stops.push(rgb((signed ? i / 5 - 1 : i / 10) * scaleTop));
    const strip = el("span", { class: "mv-strip", "aria-hidden": "true" });
    strip.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
    const lo = signed ? (-scaleTop).toFixed(3) : "0";
    const box = el("div", { class: "mv-legend", role: "note",
      "aria-label": `colour scale from ${lo} to ${scaleTop.toFixed(3)}, one for every head of the layer` });
    box.append(el("span", { class: "mv-muted" }, lo), strip, el("span", { class: "mv-muted" }, scaleTop.toFixed(3)));
    return box;
  }

  function cellPx() {
    // a cell's px: up to 4 heads a row where the width allows ~240 px a head (a phone: one; a projector: 4 large)
    const width = root.clientWidth || 700;
    const perRow = Math.max(1, Math.min(heads, 4, Math.floor((width + 12) / 240)));
    const matrixPx = Math.floor((width + 12) / perRow) - 12 - 86; // the gap, the query labels and the panel's frame
    return Math.max(2, Math.min(28, Math.floor(matrixPx / Math.max(rows, cols))));
  }

  function heads_view(layer, head) {
    const m = d.values.subarray(layer * heads * rows * cols, (layer + 1) * heads * rows * cols);
    const scaleTop = top(m); // one colour scale for the layer's grid
    const cell = cellPx();
    const grid = el("div", { class: "mv-grid", "data-layer": layer, role: "group",
      "aria-label": `attention weights of the ${heads} heads of layer ${layer}, ${rows} queries x ${cols} keys each` });
    let signed = false;
    for (const v of m) if (v < 0) { signed = true; break; }
    const view = el("div");
    view.append(legend(scaleTop, signed), grid);
    const mark = model.get("mark");
    const zoomable = Boolean(model.get("zoomable"));
    for (let h = 0; h < headsOf(layer); h++) {
      // a panel picks its head; on a zoomable grid a click on a cell moves the zoom instead
      const panel = zoomable ? el("div", { class: "mv-panel" })
        : el("div", { class: "mv-panel", role: "button", tabindex: 0, "aria-pressed": String(h === head),
          title: `pick ${d.meta.labels[h]}` });
      panel.appendChild(el("div", {}, d.meta.labels[h]));
      if (d.meta.kv_heads) { // grouped-query attention: heads that read one K/V head share a frame (colour and dash)
        const g = d.meta.kv_heads[h];
        panel.dataset.kvHead = g;
        panel.style.border = `2px ${g % 2 ? "dashed" : "solid"} ${GROUP_COLOURS[g % GROUP_COLOURS.length]}`;
      }
      const canvas = heatmap(d, layer, h, cell, scaleTop, tip, [queries, keys]);
      panel.appendChild(labelled(mark || zoomable ? marked(canvas, cell, mark, zoomable) : canvas, cell));
      if (!zoomable) operable(panel, () => pick({ head: h }));
      grid.appendChild(panel);
    }
    return view;
  }

  function marked(canvas, cell, mark, zoomable) {
    // the canvas with the mark outlined on it; zoomable: a click centres the mark on the cell and asks for its zoom
    const box = el("span", { class: "mv-marked" });
    box.appendChild(canvas);
    if (mark) {
      const [r0, c0, r1, c1] = mark;
      const frame = el("span", { class: "mv-mark", "aria-hidden": "true" });
      Object.assign(frame.style, { top: `${r0 * cell}px`, left: `${c0 * cell}px`, height: `${(r1 - r0) * cell}px`,
        width: `${(c1 - c0) * cell}px` });
      box.appendChild(frame);
    }
    if (zoomable) {
      canvas.addEventListener("click", (e) => {
        const at = canvas.getBoundingClientRect();
        const c = Math.min(cols - 1, Math.floor(((e.clientX - at.left) / at.width) * cols));
        const r = Math.min(rows - 1, Math.floor(((e.clientY - at.top) / at.height) * rows));
        const [h, w] = mark ? [mark[2] - mark[0], mark[3] - mark[1]] : [0, 0];
        const centred = (x, size, top) => Math.min(Math.max(x + 0.5 - size / 2, 0), Math.max(top - size, 0));
        const r0 = centred(r, h, rows), c0 = centred(c, w, cols);
        pick({ mark: [r0, c0, r0 + h, c0 + w], zoom: { row: r, col: c } }); // shown at once; the host computes it
      });
    }
    return box;
  }

  function lines_view(layer, head) {
    const h = head ?? 0;
    const m = matrix(d, layer, h);
    const scaleTop = top(m);
    const rowPx = 18;
    const width = 420;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("width", width);
    svg.setAttribute("height", rowPx * Math.max(rows, cols) + 24);
    svg.setAttribute("class", "mv-lines");
    svg.setAttribute("data-layer", layer);
    svg.setAttribute("data-head", h);
    const text = (x, y, s, anchor) => {
      const t = document.createElementNS(SVG, "text");
      Object.entries({ x, y, "text-anchor": anchor, "font-size": 12, "dominant-baseline": "middle" })
        .forEach(([k, v]) => t.setAttribute(k, v));
      t.textContent = s;
      svg.appendChild(t);
      return t;
    };
    text(130, 8, "queries", "end").setAttribute("font-weight", "bold");
    text(290, 8, "keys", "start").setAttribute("font-weight", "bold");
    const lines = [];
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        const v = m[r * cols + c];
        if (!(Math.abs(v) >= 0.01 * scaleTop)) continue; // NaN and near-zero weights draw no line
        const line = document.createElementNS(SVG, "line");
        Object.entries({ x1: 140, y1: 24 + r * rowPx + rowPx / 2, x2: 280, y2: 24 + c * rowPx + rowPx / 2,
          stroke: v < 0 ? "#c0392b" : "#1f5fa8", "stroke-width": 3, "stroke-opacity": Math.abs(v) / scaleTop })
          .forEach(([k, val]) => line.setAttribute(k, val));
        line.dataset.row = r;
        line.addEventListener("mousemove", (e) => tip(e, d, layer, h, r, c));
        line.addEventListener("mouseleave", () => tip(null));
        svg.appendChild(line);
        lines.push(line);
      }
    }
    for (let r = 0; r < rows; r++) {
      const t = text(130, 24 + r * rowPx + rowPx / 2, queries[r], "end");
      t.style.cursor = "pointer";
      t.addEventListener("mouseenter", () => lines.forEach((l) => { l.style.display = l.dataset.row == r ? "" : "none"; }));
      t.addEventListener("mouseleave", () => lines.forEach((l) => { l.style.display = ""; }));
    }
    for (let c = 0; c < cols; c++) text(290, 24 + c * rowPx + rowPx / 2, keys[c], "start");
    const box = el("div");
    const bar = el("div", { class: "mv-bar" });
    bar.appendChild(buttons("Head", headsOf(layer), h, "head", (i) => pick({ head: i })));
    box.append(bar, svg);
    return box;
  }

  function overview_view(layer, head) {
    const scaleTop = top(d.values); // one colour scale for every thumbnail
    const cell = Math.max(1, Math.floor(56 / Math.max(rows, cols)));
    const grid = el("div", { class: "mv-overview" });
    grid.style.gridTemplateColumns = `max-content repeat(${heads}, max-content)`;
    grid.appendChild(el("span"));
    for (let h = 0; h < heads; h++) grid.appendChild(el("span", { class: "mv-muted" }, `h${h}`));
    for (let l = 0; l < layers; l++) {
      grid.appendChild(el("span", { class: "mv-muted" }, `layer ${l}`));
      for (let h = 0; h < heads; h++) {
        if (h >= headsOf(l)) { grid.appendChild(el("span")); continue; } // not a head of this layer
        const panel = el("div", { class: "mv-panel", role: "button", tabindex: 0,
          "aria-pressed": String(l === layer && h === head),
          title: `layer ${l}, ${d.meta.labels[h]}` });
        panel.appendChild(heatmap(d, l, h, cell, scaleTop, tip, [queries, keys]));
        operable(panel, () => pick({ layer: l, head: h }));
        grid.appendChild(panel);
      }
    }
    return grid;
  }

  function paint() {
    const view = model.get("view");
    const layer = Math.min(Math.max(model.get("layer"), 0), layers - 1);
    const head = model.get("head");
    title.textContent = model.get("title");
    title.hidden = !title.textContent;
    const failed = model.get("failed_checks") || {};
    // the shown layer's failure; the overview shows every layer, so every failure
    const said = view === "overview" ? Object.values(failed) : failed[String(layer)] ? [failed[String(layer)]] : [];
    alert.textContent = said.join("\n");
    alert.hidden = said.length === 0;
    bar.replaceChildren();
    const choices = model.get("views") ?? ["heads", "lines", "overview"]; // a host with its own view menu: one
    if (choices.length > 1) {
      const views = el("span", { role: "group", "aria-label": "View", class: "mv-views" });
      for (const name of choices) {
        const b = el("button", { type: "button", "aria-pressed": String(name === view), "data-view": name }, name);
        b.addEventListener("click", () => pick({ view: name }));
        views.appendChild(b);
      }
      bar.appendChild(views);
    }
    if (view !== "overview" && layers > 1) bar.appendChild(buttons("Layer", layers, layer, "layer", (i) => pick({ layer: i }),
      d.meta.layer_marks || null));
    tipBox.hidden = true;
    // "buttons": the layer control alone (a host whose view is drawn elsewhere, without the weights)
    const drawn = view === "buttons" ? [] : [view === "lines" ? lines_view(layer, head)
      : view === "overview" ? overview_view(layer, head) : heads_view(layer, head)];
    body.replaceChildren(...drawn);
    if (focusAfterPaint) {
      const again = root.querySelector(focusAfterPaint);
      focusAfterPaint = null;
      if (again) again.focus();
    }
    root.dataset.mhaViz = "renderer";
    root.dataset.view = view;
    root.dataset.layer = String(layer);
    root.dataset.painted = String(Number(root.dataset.painted || 0) + 1); // how many paints: read by tests and bench
  }

  paint();
  const watched = ["layer", "head", "view", "title", "failed_checks", "mark"];
  for (const name of watched) model.on(`change:${name}`, paint);
  let cell = cellPx();
  const resized = new ResizeObserver(() => { // a narrower or wider page: the heads' cells follow
    if (model.get("view") !== "heads" || cellPx() === cell) return;
    cell = cellPx();
    paint();
  });
  resized.observe(root);
  return () => {
    resized.disconnect();
    for (const name of watched) model.off(`change:${name}`, paint);
  };
}

