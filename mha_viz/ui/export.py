"""Export and share: download the trace (NPZ, JSON) or an offline HTML report, copy a link to the view.

Streamlit keeps a download button's callable for the session's life (until its tab has been closed for the
disconnect timeout): the callables here hold a function that reads the trace again and a key into the shared
cache (mha_viz/ui/cache.py) for the report's figures, never the trace or the figures themselves.
"""

from __future__ import annotations

import copy
import functools
import threading
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ..export import export_size, safe_filename, share_url
from ..figures import heads_figure
from ..serve.hosting import FULL_SIZE
from ..serve.slot import build_export
from ..trace import AttentionTrace
from .cache import shared_cache
from .state import keep
from .views import figures_shown

_DRAWING = threading.Lock()  # one figure drawn by Chromium (kaleido) at a time per server process
JSON_LISTS_MB = 20  # a JSON export of more than this with nested lists writes its arrays as base64 instead
REPORT_TOKEN = "_report_token"  # session key: a random name for this session's report figures in the shared cache


def human(nbytes: int) -> str:
    """A file size as people read it: 850 B, 12 kB, 3.4 MB."""
    if nbytes < 1000:
        return f"{nbytes} B"
    return f"{nbytes / 1e3:.0f} kB" if nbytes < 1e6 else f"{nbytes / 1e6:.1f} MB"


def export_section(load: Callable[[], AttentionTrace], **kwargs: Any) -> None:
    """An "Export and share" expander whose contents (export_controls) are built only while it is open
    (load: returns the trace, called only then; see export_controls).

    A closed expander still sends its contents to the browser on every rerun; these ~8 elements
    are ~20 ms of each slider step there.
    """
    section = st.expander("Export and share", key="export_open", on_change="rerun")
    if section.open:
        with section:
            export_controls(load, **kwargs)


HEADS_TITLE = "Every head of this layer"


def _figures_key(key: str) -> tuple[Hashable, ...]:
    """Where this session's report figures are in the shared cache (one entry per session and export section)."""
    token = keep(REPORT_TOKEN, lambda: uuid.uuid4().hex)
    return ("report figures", token, key)


def report_html(load: Callable[[], AttentionTrace], figures_key: Hashable, *, title: str, notes: Mapping[str, Any],
                stem: str) -> str:
    """The report of the trace load() returns, with the figures stored under figures_key in the shared cache; the
    default figures, drawn again from the trace, when the cache has let them go. Each call works on its own copy
    of the figures, so simultaneous builds do not share Plotly objects (Plotly's constructor edits what it reads)."""
    from ..report import html_report  # plotly.js (~5 MB) is read only when a report is asked for

    trace = load()
    stored = shared_cache().peek(figures_key)
    if stored is None:
        notes = {**notes, "figures": "the default figures: the page's own had left the server's memory"}
        return html_report(trace, title=title, notes=notes, filename=stem)
    specs, captions = stored
    return html_report(trace, title=title, figures=[_figure(spec, trace) for spec in specs], notes=notes,
                       filename=stem, captions=captions)


def _figure(spec: dict | None, trace: AttentionTrace) -> go.Figure:
    """A stored figure (a copy: Plotly's constructor edits what it reads), or for None the heads grid of the trace,
    drawn only now: the page painted it with the renderer (mha_viz/renderer.js), not as a Plotly figure."""
    return heads_figure(trace, title=HEADS_TITLE) if spec is None else go.Figure(copy.deepcopy(spec))


def paper_figure_file(load: Callable[[], AttentionTrace], figures_key: Hashable, index: int, fmt: str) -> bytes:
    """The figure stored at index under figures_key (the heads grid of load()'s trace when the cache has let it go) as
    an SVG or PDF file with the paper preset (mha_viz.paper), drawn by one Chromium at a time."""
    from ..paper import figure_bytes

    stored = shared_cache().peek(figures_key)
    if stored is None or index >= len(stored[0]):
        fig = heads_figure(load())
    else:
        fig = _figure(stored[0][index], load())
    with _DRAWING:
        return figure_bytes(fig, fmt, preset="paper")


def paper_downloads(load: Callable[[], AttentionTrace], figures_key: Hashable, names: Sequence[str], key: str) -> None:
    """A figure of the page (picked when there are several) as SVG and PDF for a paper, built on click; each chart's
    toolbar has its PNG. Disabled, saying how to install what is missing, without kaleido or Chromium."""
    from ..paper import export_missing

    missing = export_missing()
    index = 0
    if len(names) > 1:
        index = st.selectbox("Figure for a paper", range(len(names)), format_func=lambda i: names[i],
                             key=f"{key}_paper_figure")
    svg_col, pdf_col = st.columns(2)
    about = ("The paper preset: 3.5 in (one column) wide, 8 pt text, viridis (prints in greyscale), every token label "
             "inside the figure. `mha_viz.save_figure(fig, path, columns=2)` makes it 7 in wide.")
    for col, fmt, mime, icon in ((svg_col, "svg", "image/svg+xml", ":material/image:"),
                                 (pdf_col, "pdf", "application/pdf", ":material/picture_as_pdf:")):
        col.download_button(
            f"Figure for a paper (.{fmt})", data=functools.partial(paper_figure_file, load, figures_key, index, fmt),
            file_name=f"{names[index]}.{fmt}", mime=mime, key=f"{key}_{fmt}", on_click="ignore", icon=icon,
            width="stretch", disabled=missing is not None, help=missing or about,
        )


def export_controls(
    load: Callable[[], AttentionTrace],
    *,
    name: str,
    trace: AttentionTrace | None = None,
    figures: Sequence[go.Figure] | None = None,
    share_query: Mapping[str, str] | None = None,
    title: str | None = None,
    notes: Mapping[str, Any] | None = None,
    key: str = "export",
    max_mb: int | None = None,
) -> None:
    """Three download buttons (trace .npz, trace .json, report .html), a figure as SVG and PDF for a paper
    (paper_downloads) and the link to this view.

    load: returns the trace, cheaply (a read of the shared cache that computes it on a miss); it is called now
    and again at each click, so that the session keeps this function, not the trace. It must not hold the trace.
    trace: load()'s trace when the page has it at hand (not computed again for the sizes shown now).
    name: what the files are called, reduced to [A-Za-z0-9._-] ("all-MiniLM-L6-v2 layer 2" ->
    all-MiniLM-L6-v2-layer-2.npz, ...). figures: the report's figures (None: every figure on the
    page in this run, after the heads grid when the page does not show it). share_query: the view's URL parameters
    (mha_viz.params.to_query); the link is the app's address (st.context.url) plus them.
    Files are built only when a button is clicked (a callable as data), one large file at a time per
    server (serve.slot.build_export), and a download does not rerun the app (on_click="ignore"). The report's figures
    wait for the click in the shared cache, as plain dicts (dropped with the least recently used). Each button
    says the file's size beforehand; JSON arrays past JSON_LISTS_MB are base64 (exact, far smaller).
    max_mb: a public demo's cap; a larger file is not offered (the page says so).
    """
    trace = load() if trace is None else trace
    stem = safe_filename(name)
    link = share_url(st.context.url, share_query or {})
    title = title or f"mha-viz: {name}"
    report_notes = {**(notes or {}), **({"link to this view": link} if link.startswith("http") else {})}

    if figures is None:  # None: the heads grid, drawn from the trace when a file asks for it
        shown: list[tuple[go.Figure | None, str]] = figures_shown()
        if not any(filename.endswith("-heads") for _, filename in shown):
            shown.insert(0, (None, f"{stem}-heads"))
        figures, captions = [fig for fig, _ in shown], [filename for _, filename in shown]
    else:
        captions = None
    figures_key = _figures_key(key)
    shared_cache().put(figures_key, (tuple(None if fig is None else fig.to_dict() for fig in figures),
                                     captions and tuple(captions)))
    report = functools.partial(report_html, load, figures_key, title=title, notes=report_notes, stem=stem)

    npz_size = export_size(trace, "npz")  # uncompressed: the file is at most this
    array_format = "lists" if export_size(trace, "json") <= JSON_LISTS_MB * 1e6 else "base64"
    json_size = export_size(trace, "json", array_format=array_format)
    npz_col, json_col, html_col = st.columns(3)
    too_big = [f"{what} ({human(size)})" for what, size in (("NPZ", npz_size), ("JSON", json_size))
               if max_mb is not None and size > max_mb * 1e6]
    npz_col.download_button(
        f"Trace (.npz, ≤ {human(npz_size)})", data=lambda: build_export(load(), "npz"), file_name=f"{stem}.npz",
        mime="application/octet-stream", key=f"{key}_npz", on_click="ignore", icon=":material/download:",
        width="stretch", disabled=max_mb is not None and npz_size > max_mb * 1e6,
        help="Every array of this layer (weights, Q, K, V, scores, head outputs, concat, W_O, output) "
        "in its own dtype, with the tokens: `np.load(file)`.",
    )
    json_col.download_button(
        f"Trace (.json, {human(json_size)})", data=lambda: build_export(load(), "json", array_format=array_format),
        file_name=f"{stem}.json", mime="application/json", key=f"{key}_json", on_click="ignore",
        icon=":material/data_object:", width="stretch", disabled=max_mb is not None and json_size > max_mb * 1e6,
        help=('Tokens, shapes and every array as nested lists; masked scores are the string "-inf".'
              if array_format == "lists" else
              f"Tokens, shapes and every array, base64-encoded little-endian (past {JSON_LISTS_MB} MB of lists): "
              "exact and far smaller; the header says how to read them."),
    )
    html_col.download_button(
        "Report (.html)", data=report, file_name=f"{stem}-report.html", mime="text/html",
        key=f"{key}_html", on_click="ignore", icon=":material/description:", width="stretch",
        help="One self-contained page with the figures on this page (and every head), the tokens, shapes and the "
        "W_O check; opens offline.",
    )
    paper_downloads(load, figures_key, captions or [f"{stem}-figure-{i + 1}" for i in range(len(figures))], key)
    if too_big:
        st.caption(f"This public demo builds downloads of at most {max_mb} MB: {' and '.join(too_big)} "
                   f"{'is' if len(too_big) == 1 else 'are'} too large here; to {FULL_SIZE}.")
    if not link:
        st.caption("This is the app's default view: share the app's address as it is.")
    else:
        st.caption(
            "Link to this view (copy it with the button at the right):" if link.startswith("http")
            else "Add this to the app's address to share this view:"
        )
        with st.container(key="share_link"):  # its copy button always shows (mha_viz/ui/style.py)
            st.code(link, language=None, wrap_lines=True)
