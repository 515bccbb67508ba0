"""Figures of a training run: heads through training, loss and accuracy curves, relation scores; accuracy of trained
variants against their KV cache."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from ..trace import AttentionTrace
from ..training.layer import TrainedLayer
from ..training.variants import VariantRow
from ..variants import COLOURS, LEGENDS
from .common import f32, index_axis
from .heads import heads_figure


def heads_at_step_figure(trace: AttentionTrace, *, cols: int | None = None) -> go.Figure:
    """Every head's attention at one training snapshot (heads_figure), its colour scale fixed to 0..1 so that
    snapshots compare (the app's replay: one snapshot, picked by a step slider of the page)."""
    fig = heads_figure(trace, cols=cols)
    fig.update_layout(coloraxis={"cmin": 0.0, "cmax": 1.0})
    return fig


def heads_through_training_figure(
    traces: Sequence[AttentionTrace], steps: Sequence[int], *, cols: int | None = None
) -> go.Figure:
    """Every head's attention (heads_at_step_figure) with Plotly's step slider and play button over the snapshots
    (a notebook's or a report's replay).

    Opens at the last snapshot, paused (Plotly's to_html would start the replay: the report passes auto_play=False).
    """
    if len(traces) != len(steps) or not traces:
        raise ValueError(f"need one step per trace, got {len(traces)} traces and {len(steps)} steps")
    fig = heads_at_step_figure(traces[-1], cols=cols)
    heads = list(range(traces[-1].num_heads))
    fig.frames = [
        go.Frame(data=[go.Heatmap(z=z) for z in f32(t.weights)], traces=heads, name=str(s))  # z (T, S) per head
        for t, s in zip(traces, steps)
    ]
    animate = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}
    fig.update_layout(
        height=fig.layout.height + 90,
        margin={"b": 90},
        sliders=[
            {
                "active": len(steps) - 1,
                "currentvalue": {"prefix": "step "},
                "pad": {"t": 30},
                "steps": [{"label": str(s), "method": "animate", "args": [[str(s)], animate]} for s in steps],
            }
        ],
        updatemenus=[
            {
                "type": "buttons",
                "direction": "left",
                "x": 0.0,
                "y": 0.0,
                "xanchor": "right",
                "yanchor": "top",
                "pad": {"t": 45, "r": 10},
                "buttons": [
                    {"label": "▶", "method": "animate",
                     "args": [None, {**animate, "frame": {"duration": 120, "redraw": True}, "fromcurrent": False}]},
                    {"label": "❚❚", "method": "animate", "args": [[None], animate]},
                ],
            }
        ],
    )
    return fig


def curves_figure(
    steps: np.ndarray,
    loss: Mapping[str, np.ndarray],
    accuracy: Mapping[str, np.ndarray],
    train_loss: Mapping[str, np.ndarray] | None = None,
) -> go.Figure:
    """Evaluation loss (log scale) and accuracy at the snapshot steps [N], one line per label.

    train_loss [steps] per label (optional) adds every optimiser step's batch loss as a faint line.
    """
    titles = ("loss (cross-entropy, log scale)", "accuracy")
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.1)
    x = np.asarray(steps)
    for i, label in enumerate(loss):
        colour = qualitative.Plotly[i % len(qualitative.Plotly)]
        if train_loss is not None:
            batch = f32(train_loss[label])  # (steps,)
            fig.add_trace(
                go.Scatter(x=np.arange(1, len(batch) + 1), y=batch, name=f"{label} (batch)", opacity=0.3,
                           line={"color": colour, "width": 1}, legendgroup=label, showlegend=False,
                           hovertemplate="step %{x}<br>batch loss %{y:.4f}"),
                row=1, col=1,
            )
        fig.add_trace(
            go.Scatter(x=x, y=f32(loss[label]), name=label, line={"color": colour}, legendgroup=label,
                       hovertemplate="step %{x}<br>loss %{y:.4f}"),
            row=1, col=1,
        )
        fig.add_trace(
            go.Scatter(x=x, y=f32(accuracy[label]), name=label, line={"color": colour}, legendgroup=label,
                       showlegend=False, hovertemplate="step %{x}<br>accuracy %{y:.3f}"),
            row=1, col=2,
        )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(type="log", dtick=1, exponentformat="power", row=1, col=1)  # one tick per decade
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    fig.update_layout(height=340, margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend={"orientation": "h", "y": -0.25})
    return fig


def relation_scores_figure(scores: np.ndarray, relations: Sequence[str], *, title: str | None = None) -> go.Figure:
    """Heads x relations heatmap of scores [H, R] (attention mass on each relation's keys), values printed."""
    H, R = scores.shape
    if len(relations) != R:
        raise ValueError(f"{len(relations)} relation names for {R} score columns")
    fig = go.Figure(
        go.Heatmap(
            z=f32(scores),
            zmin=0.0,
            zmax=1.0,
            colorscale="Blues",
            texttemplate="%{z:.2f}",
            hovertemplate="head %{y} · %{customdata}<br>attention mass %{z:.3f}<extra></extra>",
            customdata=np.broadcast_to(np.array(relations, dtype=object), (H, R)),
            colorbar={"title": {"text": "mass"}},
        )
    )
    fig.update_xaxes(index_axis(R), tickmode="array", tickvals=list(range(R)), ticktext=list(relations), side="top")
    fig.update_yaxes(index_axis(H), range=[H - 0.5, -0.5], tickmode="array", tickvals=list(range(H)),
                     ticktext=[f"head {h}" for h in range(H)])  # head 0 on top
    fig.update_layout(
        title={"text": title} if title else None,
        height=110 + 45 * H,
        margin={"l": 10, "r": 10, "t": 70 if title else 40, "b": 10},
    )
    return fig


def accuracy_by_heads_figure(layers: Sequence[TrainedLayer], current: int | None = None) -> go.Figure:
    """Mean accuracy of trained layers that differ in h (one bar each), the current h highlighted.

    Hover: the accuracy per relation and each relation's top head (its attention mass on that relation).
    """
    layers = sorted(layers, key=lambda layer: layer.num_heads)
    if not layers:
        raise ValueError("no trained layers to compare")
    x = [str(layer.num_heads) for layer in layers]
    y = np.array([layer.mean_accuracy for layer in layers], dtype=np.float32)
    hover = []
    for layer in layers:
        best = layer.scores.argmax(0)  # (R,) top head per relation
        rows = [f"{r}: accuracy {a:.1%}, head {b} ({layer.scores[b, i]:.2f})"
                for i, (r, a, b) in enumerate(zip(layer.relations, layer.accuracy, best))]
        hover.append("<br>".join(rows))
    colours = ["#d62728" if layer.num_heads == current else "#9ecae1" for layer in layers]
    fig = go.Figure(go.Bar(x=x, y=y, marker_color=colours, text=[f"{v:.0%}" for v in y], textposition="outside",
                           customdata=hover, hovertemplate="h = %{x}: mean accuracy %{y:.1%}<br>%{customdata}"
                                                           "<extra></extra>"))
    fig.update_xaxes(title={"text": "number of heads h"}, type="category")
    fig.update_yaxes(title={"text": "accuracy"}, range=[0, 1.15], tickformat=".0%")
    fig.update_layout(title={"text": "Accuracy per h"}, height=300,
                      margin={"l": 10, "r": 10, "t": 50, "b": 10}, showlegend=False)
    return fig


KIND_COLOURS, KIND_NAMES = COLOURS, LEGENDS  # each registered variant's (mha_viz.variants.spec.Training)


def _short_label(row: VariantRow) -> str:
    """The label a point carries beside its legend entry: the variant's parameters (kv=2, c=8, w=2, k=1+1), or its
    name where it has none."""
    name = row.label.split(" (")[0]  # "Window w=2 (logit sinks)" -> "Window w=2"
    kind, _, params = name.partition(" ")
    return (params or kind).replace(" shared", "s")


def _point_labels(rows: Sequence[VariantRow], line: float = 0.035) -> tuple[list[int], list[float], list[str]]:
    """Labels beside the points: at one KV size, a label block of n names stands n lines of `line` accuracy units
    tall around its points' mean accuracy; neighbouring blocks that would overlap become one block (their names one a
    line), so no two labels overlap."""
    out: tuple[list[int], list[float], list[str]] = ([], [], [])
    for size in sorted({r.kv_bytes_per_token for r in rows}):
        column = sorted((r for r in rows if r.kv_bytes_per_token == size), key=lambda r: -r.accuracy_mean)
        clusters: list[list[VariantRow]] = [[r] for r in column]

        def centre(cluster: list[VariantRow]) -> float:
            return float(np.mean([r.accuracy_mean for r in cluster]))

        i = 0
        while i < len(clusters) - 1:
            a, b = clusters[i], clusters[i + 1]
            if centre(a) - centre(b) < (len(a) + len(b)) / 2 * line:
                clusters[i:i + 2] = [a + b]
                i = max(i - 1, 0)  # the merged block may now reach the one above
            else:
                i += 1
        for cluster in clusters:
            kinds = len({r.kind for r in cluster}) > 1
            names = [(f"{KIND_NAMES.get(r.kind, r.kind).split(' ')[0]} " if kinds and r.kind not in ("mha", "diff")
                      else "") + _short_label(r) + (f" d={r.diversity:g}" if r.diversity else "") for r in cluster]
            out[0].append(size)
            out[1].append(centre(cluster))
            out[2].append("<br>".join("\u2003" + n for n in names))  # an em space clears the marker
    return out


PLOT_PX, LABEL_LINE_PX = 250, 16  # the accuracy chart's plotting height (420 px less title, legend, axis) and a line


def _label_range(rows: Sequence[VariantRow], y: Sequence[float], text: Sequence[str]) -> tuple[float, float]:
    """The accuracy axis' range that holds every point with its error bar and every label block: a block of n names
    stands n lines tall around its point, and a line is LABEL_LINE_PX of the PLOT_PX the range spans."""
    lo = min(float(r.accuracy_mean - r.accuracy_std) for r in rows)
    hi = max(float(r.accuracy_mean + r.accuracy_std) for r in rows)
    lo0, hi0 = lo, hi
    for _ in range(8):  # the line's height in accuracy units grows with the range it widens: settle
        line = max(hi - lo, 0.05) * LABEL_LINE_PX / PLOT_PX
        half = [(t.count("<br>") + 1) * line / 2 for t in text]
        lo = min(lo0, *(v - h for v, h in zip(y, half))) - line / 2
        hi = max(hi0, *(v + h for v, h in zip(y, half))) + line / 2
    return lo, hi


def accuracy_vs_cache_figure(rows: Sequence[VariantRow], current: str | None = None) -> go.Figure:
    """Mean accuracy over seeds (± standard deviation) against KV-cache bytes per token per layer, one point a trained
    variant (mha_viz.training.variants rows), one colour (and legend entry) a kind; a diversity weight > 0 is a hollow
    point; the points labelled `current` ringed in red (trace "this layer's variant")."""
    if not rows:
        raise ValueError("no trained variants to compare")
    fig = go.Figure()
    for kind in dict.fromkeys(r.kind for r in rows):
        group = [r for r in rows if r.kind == kind]
        names = [r.label + (f", diversity {r.diversity:g}" if r.diversity else "") for r in group]
        fig.add_trace(go.Scatter(
            x=[r.kv_bytes_per_token for r in group], y=np.array([r.accuracy_mean for r in group], dtype=np.float32),
            error_y={"type": "data", "array": np.array([r.accuracy_std for r in group], dtype=np.float32)},
            mode="markers", name=KIND_NAMES.get(kind, kind),
            marker={"size": 10, "color": KIND_COLOURS.get(kind, "#7f7f7f"),
                    "symbol": ["circle-open" if r.diversity else "circle" for r in group]},
            customdata=[[n, len(r.seeds), r.redundancy_mean] for n, r in zip(names, group)],
            hovertemplate="%{customdata[0]}<br>KV cache %{x} bytes / token / layer<br>accuracy %{y:.1%} over "
                          "%{customdata[1]} seeds<br>redundancy (mean JS) %{customdata[2]:.2f} bits<extra></extra>"))
    line = 0.035
    for _ in range(6):  # a line's height in accuracy units depends on the range the label blocks widen: settle
        x, y, text = _point_labels(rows, line)
        lo, hi = _label_range(rows, y, text)
        line = max(0.035, (hi - lo) * LABEL_LINE_PX / PLOT_PX)
    x, y, text = _point_labels(rows, line)
    fig.add_trace(go.Scatter(x=x, y=np.array(y, dtype=np.float32), mode="text", text=text, textposition="middle right",
                             textfont={"size": 11}, showlegend=False, hoverinfo="skip", name="labels"))
    mine = [r for r in rows if r.label == current and not r.diversity]
    if mine:
        fig.add_trace(go.Scatter(
            x=[r.kv_bytes_per_token for r in mine], y=np.array([r.accuracy_mean for r in mine], dtype=np.float32),
            mode="markers", name="this layer's variant", text=[r.label for r in mine], hoverinfo="skip",
            marker={"size": 18, "symbol": "circle-open", "color": "#d62728", "line": {"width": 3}}))
    r0 = rows[0]
    sizes = np.log10([r.kv_bytes_per_token for r in rows])
    fig.update_xaxes(title={"text": "KV cache, bytes per token per layer (bf16)"}, type="log",
                     range=[float(sizes.min()) - 0.1, float(sizes.max()) + 0.4])  # room for the labels on the right
    lo, hi = _label_range(rows, y, text)  # the final blocks' range
    fig.update_yaxes(title={"text": "accuracy"}, tickformat=".0%", range=[lo, hi],
                     tickvals=[v / 10 for v in range(11) if lo <= v / 10 <= hi])  # no tick beyond 0% ... 100%
    fig.update_layout(title={"text": f"Accuracy vs KV cache<br>{r0.task}, h = {r0.num_heads}, d_model = {r0.d_model}, "
                                      f"{r0.steps} steps"}, height=420,
                      margin={"l": 10, "r": 10, "t": 70, "b": 10}, legend={"orientation": "h", "y": -0.25})
    return fig
