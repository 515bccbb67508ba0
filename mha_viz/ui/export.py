"""Export and share: download the trace (NPZ, JSON) or an offline HTML report, copy a link to the view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ..export import safe_filename, share_url, trace_to_json, trace_to_npz
from ..figures import heads_figure
from ..trace import AttentionTrace
from .views import figures_shown


def export_section(trace: AttentionTrace, **kwargs: Any) -> None:
    """An "Export and share" expander whose contents (export_controls) are built only while it is open.

    A closed expander still sends its contents to the browser on every rerun; these ~8 elements
    are ~20 ms of each slider step there.
    """
    section = st.expander("Export and share", key="export_open", on_change="rerun")
    if section.open:
        with section:
            export_controls(trace, **kwargs)


def export_controls(
    trace: AttentionTrace,
    *,
    name: str,
    figures: Sequence[go.Figure] | None = None,
    share_query: Mapping[str, str] | None = None,
    title: str | None = None,
    notes: Mapping[str, Any] | None = None,
    key: str = "export",
) -> None:
    """Three download buttons (trace .npz, trace .json, report .html) and the link to this view.

    name: what the files are called, reduced to [A-Za-z0-9._-] ("all-MiniLM-L6-v2 layer 2" ->
    all-MiniLM-L6-v2-layer-2.npz, ...). figures: the report's figures (None: every figure on the
    page in this run, after the heads grid when the page does not show it). share_query: the view's URL parameters
    (mha_viz.params.to_query); the link is the app's address (st.context.url) plus them.
    Files are built only when a button is clicked (a callable as data) and a download does not
    rerun the app (on_click="ignore").
    """
    stem = safe_filename(name)
    link = share_url(st.context.url, share_query or {})
    title = title or f"mha-viz: {name}"
    report_notes = {**(notes or {}), **({"link to this view": link} if link.startswith("http") else {})}

    if figures is None:
        shown = figures_shown()
        if not any(filename.endswith("-heads") for _, filename in shown):
            shown.insert(0, (heads_figure(trace, title="Every head of this layer"), f"{stem}-heads"))
        figures, captions = [fig for fig, _ in shown], [filename for _, filename in shown]
    else:
        captions = None

    def report() -> str:
        from ..report import html_report  # plotly.js (~5 MB) is read only when a report is asked for

        return html_report(trace, title=title, figures=figures, notes=report_notes, filename=stem, captions=captions)

    npz_col, json_col, html_col = st.columns(3)
    npz_col.download_button(
        "Trace (.npz)", data=lambda: trace_to_npz(trace), file_name=f"{stem}.npz", mime="application/octet-stream",
        key=f"{key}_npz", on_click="ignore", icon=":material/download:", width="stretch",
        help="Every array of this layer (weights, Q, K, V, scores, head outputs, concat, W_O, output) "
        "in its own dtype, with the tokens: `np.load(file)`.",
    )
    json_col.download_button(
        "Trace (.json)", data=lambda: trace_to_json(trace), file_name=f"{stem}.json", mime="application/json",
        key=f"{key}_json", on_click="ignore", icon=":material/data_object:", width="stretch",
        help='Tokens, shapes and every array as nested lists; masked scores are the string "-inf". '
        "Large for long inputs.",
    )
    html_col.download_button(
        "Report (.html)", data=report, file_name=f"{stem}-report.html", mime="text/html",
        key=f"{key}_html", on_click="ignore", icon=":material/description:", width="stretch",
        help="One self-contained page with the figures on this page (and every head), the tokens, shapes and the "
        "W_O check; opens offline.",
    )
    if not link:
        st.caption("This is the app's default view: share the app's address as it is.")
    else:
        st.caption(
            "Link to this view (copy it with the button at the right):" if link.startswith("http")
            else "Add this to the app's address to share this view:"
        )
        st.code(link, language=None, wrap_lines=True)
