"""Figures of mha_viz.analysis: head statistics, redundancy, knockout, rollout, comparison, concat vs sum."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import Comparison, ConcatVsSum, HeadStats, Redundancy
from .common import (
    PANEL_TITLE_PX,
    TOOLBAR_PX,
    WIDE_PX,
    f32,
    lines_px,
    pair_labels,
    symmetric_range,
    token_axis,
    token_label,
    token_tickangle,
    wrap,
)

SHARES = ("entropy", "confidence", "first", "special", "previous", "same", "next")  # statistics in [0, 1]


def _head_axis(heads: Sequence[int], title: str | None = None) -> dict:
    return {"tickmode": "array", "tickvals": list(range(len(heads))), "ticktext": [f"head {h}" for h in heads],
            "title": {"text": title} if title else None, "showgrid": False, "zeroline": False}


def head_stats_figure(stats: HeadStats, *, width: int | None = None) -> go.Figure:
    """Heads x statistics in [0, 1] as one heatmap (values written in), mean attended distance beside it
    (width: the px the figure is drawn at; titles wrap and labels turn to fit it)."""
    H = stats.num_heads
    shares = SHARES + tuple(name for name in ("sink", "dropped")  # a sink's share, a sparse layer's dropped mass,
                            if getattr(stats, name) is not None)  # where the model has them
    z = np.stack([getattr(stats, name) for name in shares], axis=1)  # (H, 7 to 9)
    room = (width or WIDE_PX) - 70  # the head labels
    titles = [wrap("share / normalised value (0 … 1)", room * 0.74, PANEL_TITLE_PX),
              wrap("mean distance (tokens)", room * 0.22, PANEL_TITLE_PX)]
    top = TOOLBAR_PX + max(lines_px(t, PANEL_TITLE_PX) for t in titles) + 6
    fig = make_subplots(rows=1, cols=2, column_widths=[0.78, 0.22], horizontal_spacing=0.04, subplot_titles=titles)
    fig.add_trace(
        go.Heatmap(z=f32(z), coloraxis="coloraxis", text=np.where(np.isfinite(z), np.round(z, 2), np.nan),
                   texttemplate="%{text}", hovertemplate="head %{y}<br>%{customdata}: %{z:.3f}<extra></extra>",
                   customdata=np.broadcast_to(np.array(shares, dtype=object), z.shape)),
        row=1, col=1,
    )
    fig.add_trace(
        go.Bar(x=f32(stats.distance), y=np.arange(H), orientation="h", marker_color="#ff7f0e",
               hovertemplate="head %{y}<br>mean distance %{x:.2f} tokens<extra></extra>"),
        row=1, col=2,
    )
    fig.update_xaxes({"tickmode": "array", "tickvals": list(range(len(shares))), "ticktext": list(shares)},
                     tickangle=token_tickangle(shares, room * 0.74), row=1, col=1)
    fig.update_yaxes(_head_axis(range(H)), autorange="reversed", row=1, col=1)
    fig.update_yaxes(showticklabels=False, autorange="reversed", row=1, col=2)
    fig.update_layout(
        coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": 1.0, "showscale": False},
        height=max(220, 28 * H + 110) + int(top) - 60, showlegend=False, margin={"l": 10, "r": 10, "t": int(top), "b": 10},
    )
    return fig


def divergence_figure(result: Redundancy) -> go.Figure:
    """Head-by-head Jensen-Shannon divergence, heads in clustered order; near-duplicates marked ×."""
    order = [int(h) for h in result.order]
    D = result.divergence[np.ix_(order, order)]  # (H, H)
    position = {h: i for i, h in enumerate(order)}
    fig = go.Figure(go.Heatmap(
        z=f32(D), colorscale="Viridis", zmin=0.0, zmax=max(float(D.max()), 1e-9),
        colorbar={"title": {"text": "JSD (bits)"}},
        customdata=np.stack(np.broadcast_arrays(np.array(order)[:, None], np.array(order)[None, :]), axis=-1),
        hovertemplate="head %{customdata[0]} vs head %{customdata[1]}<br>mean JSD %{z:.3f} bits<extra></extra>",
    ))
    pairs = [(position[a], position[b]) for a, b in result.duplicates]
    if pairs:
        x, y = zip(*(p for a, b in pairs for p in ((a, b), (b, a))))
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers", marker={"symbol": "x", "color": "white", "size": 10},
                                 name=f"near-duplicate (< {result.threshold:g})", hoverinfo="skip"))
    fig.update_xaxes(_head_axis(order), tickangle=-60)
    fig.update_yaxes(_head_axis(order), autorange="reversed")
    fig.update_layout(
        title={"text": "How differently the heads attend (0 = identical), similar heads clustered"},
        height=max(300, 26 * len(order) + 150), margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.15}, plot_bgcolor="#eeeeee",
    )
    return fig


def knockout_figure(per_token: Mapping[str, tuple[Sequence[str], np.ndarray]]) -> go.Figure:
    """Relative change per token, one panel per measured place: {title: (tokens, change [T])}."""
    fig = make_subplots(rows=len(per_token), cols=1, subplot_titles=list(per_token), vertical_spacing=0.25)
    for row, (tokens, change) in enumerate(per_token.values(), start=1):
        fig.add_trace(
            go.Bar(x=np.arange(len(tokens)), y=f32(change), marker_color="#d62728",
                   customdata=[token_label(t, 24) for t in tokens],
                   hovertemplate="token %{x}: <b>%{customdata}</b><br>relative change %{y:.3f}<extra></extra>"),
            row=row, col=1,
        )
        fig.update_xaxes(token_axis(tokens), tickangle=token_tickangle(tokens), row=row, col=1)
        fig.update_yaxes(title={"text": "‖Δ‖ / ‖out‖"}, rangemode="tozero", row=row, col=1)
    fig.update_layout(height=230 * len(per_token) + 60, showlegend=False, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def ranking_figure(effects: Mapping[str, np.ndarray]) -> go.Figure:
    """Heads sorted by the first series' single-head knockout effect; {series name: effect [H]}."""
    first = next(iter(effects.values()))
    order = [int(h) for h in np.argsort(-np.nan_to_num(first, nan=-np.inf), kind="stable")]
    fig = go.Figure([
        go.Bar(x=[f"head {h}" for h in order], y=f32(np.asarray(e)[order]), name=name,
               hovertemplate="%{x}: relative change %{y:.3f}<extra>" + name + "</extra>")
        for name, e in effects.items()
    ])
    fig.update_layout(
        title={"text": "Which heads matter: relative change when one head alone is switched off"},
        barmode="group", yaxis={"title": {"text": "‖Δ‖ / ‖out‖"}, "rangemode": "tozero"},
        height=340, margin={"l": 10, "r": 10, "t": 70, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1},
    )
    return fig


def next_token_figure(
    probs: np.ndarray, knocked: np.ndarray, decode: Callable[[list[int]], Sequence[str]], top: int = 10
) -> go.Figure:
    """The most likely next tokens before and after the knockout (union of both top lists).

    decode: token ids -> token labels (e.g. mha_viz.token_labels.vocab_labels).
    """
    ids = list(dict.fromkeys([*np.argsort(-probs)[:top].tolist(), *np.argsort(-knocked)[:top].tolist()]))
    ids.sort(key=lambda i: -probs[i])
    names = [f"{token_label(t, 24)} ({i})" for i, t in zip(ids, decode(ids))]  # ids keep equal labels apart
    fig = go.Figure([
        go.Bar(y=names, x=f32(probs[ids]), orientation="h", name="all heads"),
        go.Bar(y=names, x=f32(knocked[ids]), orientation="h", name="heads switched off"),
    ])
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(title={"text": "Next-token probabilities"}, barmode="group", xaxis={"title": {"text": "p"}},
                      height=max(260, 34 * len(ids) + 100), margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def rollout_figure(rollout: np.ndarray, tokens: Sequence[str], title: str | None = None) -> go.Figure:
    """Rollout [T, T]: row i = how much of each input token (column) reaches position i."""
    customdata = pair_labels(tokens, tokens)
    hover = ("position %{y}: <b>%{customdata[0]}</b><br>from input %{x}: <b>%{customdata[1]}</b>"
             if customdata is not None else "position %{y} ← input %{x}") + "<br>rollout %{z:.3f}<extra></extra>"
    fig = go.Figure(go.Heatmap(z=f32(rollout), colorscale="Blues", zmin=0.0, customdata=customdata,
                               hovertemplate=hover, colorbar={"title": {"text": "rollout"}}))
    fig.update_xaxes(token_axis(tokens, "input token"), tickangle=token_tickangle(tokens), constrain="domain")
    fig.update_yaxes(token_axis(tokens, "position after the layers"), autorange="reversed", constrain="domain")
    fig.update_layout(title={"text": title} if title else None, height=min(700, max(320, 16 * len(tokens) + 160)),
                      margin={"l": 10, "r": 10, "t": 50 if title else 20, "b": 10})
    return fig


def comparison_figure(result: Comparison, head: int | None = None, labels: tuple[str, str] = ("A", "B")) -> go.Figure:
    """A and B side by side (one colour scale) and B - A when the tokens line up; head None: mean over heads."""
    def pick(w: np.ndarray) -> np.ndarray:
        return w.mean(0) if head is None else w[head]  # (T, S)

    a_name, b_name = (html.escape(label) for label in labels)
    panels = [(a_name, result.a, pick(result.a.weights)), (b_name, result.b, pick(result.b.weights))]
    titles = [a_name, b_name] + ([f"{b_name} − {a_name}"] if result.difference is not None else [])
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.08)
    top = max(float(np.nanmax(z)) for _, _, z in panels)
    for col, (name, trace, z) in enumerate(panels, start=1):
        fig.add_trace(go.Heatmap(z=f32(z), coloraxis="coloraxis", name=name,
                                 hovertemplate="query %{y} → key %{x}<br>weight %{z:.3f}<extra>%{fullData.name}</extra>"),
                      row=1, col=col)
        fig.update_xaxes(token_axis(trace.key_tokens), tickangle=token_tickangle(trace.key_tokens), constrain="domain", row=1, col=col)
        fig.update_yaxes(token_axis(trace.query_tokens), autorange="reversed", constrain="domain", row=1, col=col)
    layout = {"coloraxis": {"colorscale": "Blues", "cmin": 0.0, "cmax": max(top, 1e-9),
                            "colorbar": {"title": {"text": "weight"}, "x": 1.0, "len": 0.45, "y": 0.75}}}
    if result.difference is not None:
        diff = pick(result.difference)  # (T, S)
        fig.add_trace(go.Heatmap(z=f32(diff), coloraxis="coloraxis2", name="difference",
                                 hovertemplate="query %{y} → key %{x}<br>Δ weight %{z:+.3f}<extra></extra>"),
                      row=1, col=3)
        fig.update_xaxes(token_axis(result.a.key_tokens), tickangle=token_tickangle(result.a.key_tokens),
                         constrain="domain", row=1, col=3)
        fig.update_yaxes(token_axis(result.a.query_tokens), autorange="reversed", constrain="domain", row=1, col=3)
        d = symmetric_range(diff)
        layout["coloraxis2"] = {"colorscale": "RdBu", "cmin": -d, "cmax": d,
                                "colorbar": {"title": {"text": "Δ"}, "x": 1.0, "len": 0.45, "y": 0.25}}
    T = max(len(result.a.query_tokens), len(result.b.query_tokens))
    fig.update_layout(**layout, height=min(560, max(300, 14 * T + 160)), margin={"l": 10, "r": 10, "t": 40, "b": 10},
                      plot_bgcolor="#eeeeee")
    return fig


def concat_sum_figure(result: ConcatVsSum, tokens: Sequence[str]) -> go.Figure:
    """Relative error of the real concat path and of two summed paths, overall and per token."""
    names = (f"concat · W_Oᵀ ({result.concat_dims} dims)", f"sum · fitted W'ᵀ ({result.sum_dims} dims)",
             f"sum · mean-block W'ᵀ ({result.sum_dims} dims)")
    colours = ("#2ca02c", "#1f77b4", "#ff7f0e")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.4, 0.6], horizontal_spacing=0.1,
                        subplot_titles=("‖error‖ / ‖output − b‖", "per token"))
    errors = (result.concat_error, result.fitted_error, result.mean_error)
    fig.add_trace(go.Bar(x=list(names), y=f32(np.array(errors)), marker_color=list(colours), showlegend=False,
                         hovertemplate="%{x}<br>relative error %{y:.3g}<extra></extra>"), row=1, col=1)
    for name, colour, per_token in zip(names[1:], colours[1:], (result.fitted_per_token, result.mean_per_token)):
        fig.add_trace(go.Scatter(x=np.arange(len(tokens)), y=f32(per_token), mode="lines+markers", name=name,
                                 line={"color": colour}, hovertemplate="token %{x}<br>relative error %{y:.3f}"
                                 "<extra></extra>"), row=1, col=2)
    fig.update_xaxes(tickangle=-20, row=1, col=1)
    fig.update_xaxes(token_axis(tokens), tickangle=token_tickangle(tokens), row=1, col=2)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=400, margin={"l": 10, "r": 10, "t": 70, "b": 10},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.1, "xanchor": "right", "x": 1})
    return fig
