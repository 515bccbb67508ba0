"""Figures of a training run: heads through training, loss and accuracy curves, relation scores; accuracy of trained
variants against their KV cache."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from ..figures import heads_figure
from ..figures.common import f32, index_axis
from ..trace import AttentionTrace
from .layer import TrainedLayer
from .variants import VariantRow


def heads_through_training_figure(
    traces: Sequence[AttentionTrace], steps: Sequence[int], *, cols: int | None = None
) -> go.Figure:
    """Every head's attention (heads_figure) with a step slider and a play button over the snapshots.

    Opens at the last snapshot, paused (Plotly's to_html would start the replay: the report passes auto_play=False);
    the colour scale is fixed to 0..1 so frames compare.
    """
    if len(traces) != len(steps) or not traces:
        raise ValueError(f"need one step per trace, got {len(traces)} traces and {len(steps)} steps")
    fig = heads_figure(traces[-1], cols=cols)
    heads = list(range(traces[-1].num_heads))
    fig.frames = [
        go.Frame(data=[go.Heatmap(z=z) for z in f32(t.weights)], traces=heads, name=str(s))  # z (T, S) per head
        for t, s in zip(traces, steps)
    ]
    animate = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}
    fig.update_layout(
        coloraxis={"cmin": 0.0, "cmax": 1.0},
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


def accuracy_vs_cache_figure(rows: Sequence[VariantRow], current: str | None = None) -> go.Figure:
    """Mean accuracy over seeds (± standard deviation) against KV-cache bytes per token per layer, one point a trained
    variant (mha_viz.training.variants rows); a diversity weight > 0 is a hollow point; the label `current` in red."""
    if not rows:
        raise ValueError("no trained variants to compare")
    fig = go.Figure()
    for diverse in (False, True):
        group = [r for r in rows if (r.diversity > 0) == diverse]
        if not group:
            continue
        names = [r.label + (f", diversity {r.diversity:g}" if diverse else "") for r in group]
        fig.add_trace(go.Scatter(
            x=[r.kv_bytes_per_token for r in group], y=np.array([r.accuracy_mean for r in group], dtype=np.float32),
            error_y={"type": "data", "array": np.array([r.accuracy_std for r in group], dtype=np.float32)},
            mode="markers+text", text=[r.label for r in group], textposition="top center",
            name="with diversity penalty" if diverse else "variants",
            marker={"size": 11, "symbol": "circle-open" if diverse else "circle",
                    "color": ["#d62728" if r.label == current else "#1f77b4" for r in group]},
            customdata=[[n, len(r.seeds), r.redundancy_mean] for n, r in zip(names, group)],
            hovertemplate="%{customdata[0]}<br>KV cache %{x} bytes / token / layer<br>accuracy %{y:.1%} over "
                          "%{customdata[1]} seeds<br>redundancy (mean JS) %{customdata[2]:.2f} bits<extra></extra>"))
    r0 = rows[0]
    fig.update_xaxes(title={"text": "KV cache, bytes per token per layer (bf16)"}, type="log")
    fig.update_yaxes(title={"text": "accuracy"}, tickformat=".0%")
    fig.update_layout(title={"text": f"Accuracy vs KV cache: {r0.task}, h = {r0.num_heads}, d_model = {r0.d_model}, "
                                      f"{r0.steps} steps"}, height=340,
                      margin={"l": 10, "r": 10, "t": 50, "b": 10}, legend={"orientation": "h", "y": -0.25})
    return fig
