"""A self-contained HTML report of one AttentionTrace that opens offline.

    from mha_viz.report import html_report
    Path("report.html").write_text(html_report(trace, title="8 heads, d_model = 64"), encoding="utf-8")

One file: plotly.js is inlined (no CDN, nothing fetched), and a Content-Security-Policy
(default-src 'none', connect-src 'none') keeps the page from loading anything at all. It holds
the figures (by default the heads grid and, when the trace has the intermediates, the
concat -> W_O path and the per-head contributions), the tokens, every array's shape, the two
W_O identities' errors and the model's self-check, each against its tolerance (a failed check is said at the top,
mha_viz.checks), and any notes. All text from the trace (tokens, meta, notes, title) is
HTML-escaped; the figures' JSON escapes <, > and / (no "</script>" inside a script element).
The figures share a budget (MAX_FIGURE_BYTES): one that would pass it is left out, with a note
in its place, so a report stays under ~21 MB whatever the trace (plotly.js is 4.6 MB of that).
"""

from __future__ import annotations

import html
import json
import numbers
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import plotly.graph_objects as go

from .checks import failure_message, tolerance
from .export import jsonable, safe_filename, trace_arrays
from .figures import contributions_figure, heads_figure, output_path_figure
from .figures.common import visible_token, with_automargin
from .trace import AttentionTrace

MEANINGS = {
    "weights": "softmax(scores) over keys; each row sums to 1",
    "queries": "Q_h = x W_Q[h] + b_Q[h]",
    "keys": "K_h = context W_K[h] + b_K[h]",
    "values": "V_h = context W_V[h] + b_V[h]",
    "scores": "Q_h K_hᵀ / √d_k (masked entries −∞)",
    "head_outputs": "head_h = weights_h V_h",
    "concat": "heads side by side, before W_O",
    "output": "concat W_Oᵀ + b_O, after W_O",
    "W_O": "output projection; column block h multiplies head h",
    "b_O": "output bias",
    "W_Q": "query projection of each head: Q_h = x W_Q[h] + b_Q[h]",
    "W_K": "key projection of each head",
    "W_V": "value projection of each head",
    "b_Q": "query bias of each head",
    "b_K": "key bias of each head",
    "b_V": "value bias of each head",
    "sinks": "a learned sink logit per head: it joins each row's softmax and is dropped (rows sum to 1 - sink mass)",
    "lambdas": "differential attention: weights = maps[0] - lambda_h maps[1]",
    "maps": "differential attention: the two softmax maps of each head",
    "map_scores": "differential attention: the scores of the two maps",
    "gates": "mixture-of-heads: each head's gate per token (0: the token does not use the head), applied before W_O",
}
# Inline scripts and styles only; no network of any kind (plotly.js draws heatmaps into data: images).
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
PLOTLY_WINDOW_CONFIG = "window.PlotlyConfig = {MathJaxConfig: 'local'};"
MAX_FIGURE_BYTES = 16_000_000  # all figures of one report together (h = 16, d_model = 768, 512 tokens: 11 MB)
_URL = re.compile(r"https?://[^\s\"'<>]+")
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #1b1b1f; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .5rem 0; font-size: .92rem; }
th, td { border: 1px solid #ddd; padding: .25rem .6rem; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } td.num { font-variant-numeric: tabular-nums; text-align: right; }
.tokens { display: flex; flex-wrap: wrap; gap: .3rem; padding: 0; list-style: none; }
.tokens li { border: 1px solid #cfd4dc; border-radius: 4px; padding: 0 .35rem; background: #f7f9fc;
             font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre; }
.tokens li small { color: #888; margin-right: .25rem; }
figure { margin: 1rem 0 2rem; } figcaption { color: #555; font-size: .9rem; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; }
.failed { border: 2px solid #b3261e; background: #fdecea; color: #5f1410; padding: .6rem .9rem; border-radius: 6px; }
td.fail { color: #b3261e; font-weight: bold; }
"""


def meaning(name: str) -> str:
    """What a stored array is, for the report's table of shapes."""
    if name.startswith("score_bias:"):
        return f"what the model adds to scale · Q Kᵀ: {name.removeprefix('score_bias:')}"
    return MEANINGS[name]


def default_figures(trace: AttentionTrace) -> list[go.Figure]:
    """The heads grid, and the concat -> W_O path and per-head contributions when the trace has them."""
    figures = [heads_figure(trace, title="Attention weights: every head (row = query token, column = key token)")]
    if not trace.missing:
        figures += [output_path_figure(trace), contributions_figure(trace)]
    return figures


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _text(value: Any) -> str:
    """A note or meta value as escaped HTML; an http(s) address becomes a link (escaped href)."""
    if isinstance(value, str) and _URL.fullmatch(value.strip()):
        url = value.strip()
        return f'<a href="{_esc(url)}" rel="noopener noreferrer">{_esc(url)}</a>'
    if isinstance(value, str):
        return _esc(value)
    return f"<code>{_esc(json.dumps(jsonable(value), ensure_ascii=False))}</code>"


def _number(value: Any) -> str:
    return f"{value:.2e}" if isinstance(value, numbers.Real) and not isinstance(value, bool) else _text(value)


def _table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> str:
    """rows of already-escaped cell HTML."""
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _check_row(label: str, error: Any, tol: float) -> list[str]:
    """One row of the checks table: a difference within tol passes, one beyond it (or not a number) fails."""
    try:
        passed = float(error) <= tol
    except (TypeError, ValueError):
        passed = False
    return [f"<td>{_esc(label)}</td>", f'<td class="num">{_number(error)}</td>', f'<td class="num">{_number(tol)}</td>',
            "<td>pass</td>" if passed else '<td class="fail">FAILED</td>']


def _tokens(tokens: Sequence[str]) -> str:
    items = "".join(f"<li><small>{i}</small>{_esc(visible_token(t))}</li>" for i, t in enumerate(tokens))
    return f'<ol class="tokens">{items}</ol>'


def _plotlyjs() -> str:
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    if "</script" in js.lower():  # would end the inline script element early
        js = re.sub(r"(?i)</script", r"<\\/script", js)
    return js


def _figure_html(fig: go.Figure, index: int, filename: str) -> str:
    """The figure as a div; axes get automargin (as in the app), so that no label is cut off.

    The copy is made from fig.to_dict(), which only reads fig: go.Figure(fig) briefly edits fig's traces, so
    reports built at once from the same figures would see each other's edits."""
    config = {"displaylogo": False, "responsive": True,
              "toImageButtonOptions": {"format": "png", "scale": 2, "filename": safe_filename(filename)}}
    fig = with_automargin(go.Figure(fig.to_dict()))
    return fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False, config=config,
                       div_id=f"figure-{index}", default_width="100%", auto_play=False)  # a replay waits for ▶


def _figure_title(fig: go.Figure) -> str:
    title = fig.layout.title.text
    names = [a.text for a in fig.layout.annotations if a.text] if not title else []  # subplot titles
    return (title or "; ".join(names[:3]) or "untitled").replace("<br>", " ")  # titles are wrapped to the figure


def _version() -> str:
    try:
        return version("mha-viz")
    except PackageNotFoundError:
        return "unknown"


def html_report(
    trace: AttentionTrace,
    *,
    title: str,
    figures: Sequence[go.Figure] | None = None,
    notes: Mapping[str, Any] | None = None,
    filename: str | None = None,
    captions: Sequence[str] | None = None,
    max_figure_bytes: int = MAX_FIGURE_BYTES,
) -> str:
    """The report as one HTML page (a str; write it with encoding="utf-8").

    figures: None for default_figures(trace), else exactly these (e.g. the ones an app shows);
    captions: one line under each of them (e.g. which view it came from).
    notes: extra key -> value rows (how the trace was made, a link back to the live view, ...);
    a value that is an http(s) address becomes a link. filename: stem for the figures' PNG
    downloads (default: from the title). max_figure_bytes: the figures' budget, in order; a figure
    that would pass it is left out and a note says so (the trace's .npz holds every array).
    """
    figures = default_figures(trace) if figures is None else list(figures)
    stem = safe_filename(filename or title)
    H, T, S = trace.weights.shape
    parts: list[str] = []
    kind = ("cross-attention" if trace.cross else "self-attention") + (", causal" if trace.causal else "")
    summary = f"{H} heads · {T} query tokens · {S} key tokens · {kind}"
    if trace.kv_heads is not None:
        summary += f" · {len(set(trace.kv_heads))} key/value heads (grouped-query)"
    parts.append(f"<h1>{_esc(title)}</h1><p class=\"sub\">{_esc(summary)}</p>")
    failed = failure_message(trace)
    if failed:
        parts.append(f'<div class="failed" role="alert">{_esc(failed)}</div>')

    if notes:
        parts.append("<h2>Notes</h2>" + _table([[f"<th>{_esc(k)}</th>", f"<td>{_text(v)}</td>"] for k, v in notes.items()]))

    parts.append(f"<h2>Query tokens ({T})</h2>" + _tokens(trace.query_tokens))
    if trace.cross or tuple(trace.key_tokens) != tuple(trace.query_tokens):
        parts.append(f"<h2>Key tokens ({S})</h2>" + _tokens(trace.key_tokens))

    budget = max_figure_bytes
    for i, fig in enumerate(figures):
        caption = f"<figcaption>{_esc(captions[i])}</figcaption>" if captions is not None and i < len(captions) else ""
        div = _figure_html(fig, i, f"{stem}-figure{i + 1}")
        size = len(div.encode("utf-8"))
        if size > budget:
            div = (f"<p>Figure {i + 1} ({_esc(_figure_title(fig))}) is left out: it would add {size / 1e6:.1f} MB, "
                   f"more than the {budget / 1e6:.1f} MB left of this report's {max_figure_bytes / 1e6:.0f} MB for "
                   "figures. Its numbers are in the trace's .npz export.</p>")
        else:
            budget -= size
        parts.append(f"<figure>{div}{caption}</figure>")

    rows = [
        [f"<td><code>{_esc(name)}</code></td>", f"<td>{_esc(' × '.join(map(str, a.shape)))}</td>",
         f"<td>{_esc(a.dtype)}</td>", f"<td>{_esc(meaning(name))}</td>"]
        for name, a in trace_arrays(trace).items()
    ]
    rows += [[f"<td><code>{_esc(name)}</code></td>", "<td>—</td>", "<td>—</td>", "<td>not available</td>"]
             for name in trace.missing]
    parts.append("<h2>Shapes</h2>" + _table(rows, ["tensor", "shape", "dtype", "meaning"]))
    if trace.missing:
        reason = trace.meta.get("unavailable", "this trace was built from attention weights alone")
        parts.append(f"<p>Only the attention weights are available: {_esc(reason)}</p>")

    checks: list[list[str]] = []
    if not trace.missing:
        checks += [_check_row(label, err, max(trace.rounding_tolerance(), tolerance(trace, label)))
                   for label, err in trace.check_wo_path().items()]
    model_check = trace.meta.get("check")
    if isinstance(model_check, Mapping):
        checks += [_check_row(f"{label} (against the model's own numbers)", err, tolerance(trace, str(label)))
                   for label, err in model_check.items()]
    if checks:
        beyond = any("FAILED" in row[-1] for row in checks)
        verdict = "some are beyond float rounding: the rows marked FAILED" if beyond else "float rounding only"
        parts.append(
            "<h2>Concat → W_O check</h2><p>output = concat · W_Oᵀ + b_O = Σ_h head_h · W_O^(h)ᵀ + b_O; "
            f"max |difference| over all entries ({verdict}):</p>"
            + _table(checks, ["identity", "max error", "tolerance", "result"])
        )

    meta = {k: v for k, v in trace.meta.items() if k not in ("check", "check_scale", "unavailable")}
    if meta:
        parts.append("<h2>Trace metadata</h2>" + _table([[f"<th>{_esc(k)}</th>", f"<td>{_text(v)}</td>"]
                                                        for k, v in meta.items()]))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f'<p class="sub">Made with mha-viz {_esc(_version())} on {stamp}. This file is self-contained '
                 "and works offline.</p>")

    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title)}</title>\n<style>{STYLE}</style>\n"
        f"<script>{PLOTLY_WINDOW_CONFIG}</script>\n<script>{_plotlyjs()}</script>\n</head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body>\n</html>\n"
    )
