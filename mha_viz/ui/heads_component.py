"""The app's host of the one renderer (mha_viz/renderer.js): a Streamlit component that paints every head of every
layer from one payload and switches layers and heads in the browser; the server hears of a pick once the clicks pause
and its rerun redraws the rest of the page (the other views, the subtitle's text alternative) at that layer.

Values a (crafted) client sends back are checked like the URL's (mha_viz.limits.client_int)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import streamlit as st

from ..layer_payload import with_header
from ..limits import MAX_LAYERS, client_int
from ..renderer import STREAMLIT_ADAPTER, module
from . import state

_component = st.components.v2.component(
    "mha_viz.heads", html='<div class="mv-root"></div>', css=".mv-root { color: var(--st-text-color, #31333f); }",
    js=module(STREAMLIT_ADAPTER),
)


def picked(value: object, name: str, top: int) -> int | None:
    """The layer or head (name) the component's value says the browser picked, below top; None for anything else a
    (crafted) browser sends (negative, NaN, huge, a string, another type, a value that is no mapping)."""
    return client_int(value.get(name) if isinstance(value, Mapping) else None, 0, top - 1)


def zoom_cell(value: object, rows: int, cols: int) -> tuple[int, int] | None:
    """The (row, col) cell the browser says was clicked on a zoomable grid of rows x cols cells; None for anything
    else a (crafted) browser sends."""
    cell = value.get("zoom") if isinstance(value, Mapping) else None
    if not isinstance(cell, Mapping):
        return None
    row, col = client_int(cell.get("row"), 0, rows - 1), client_int(cell.get("col"), 0, cols - 1)
    return None if row is None or col is None else (row, col)


def heads_component(payload: tuple[bytes, list[str], list[str]], *, view: str, key: str, layer: int = 0,
                    subtitle: tuple[str, str] | None = None, failed: dict[str, str] | None = None,
                    on_layer: Callable[[int], None] | None = None,
                    mark: tuple[float, float, float, float] | None = None,
                    on_zoom: Callable[[int, int], None] | None = None,
                    marks: list[str] | None = None) -> None:
    """Draw the renderer's view of the payload (layer_payload.payload_of; no_weights for "buttons") at this layer
    under its layer buttons (more than one layer) and subtitle (before + layer + after; None: no title); on_layer(layer)
    runs on the server when the browser picks one. mark: (row0, col0, row1, col1) in cells, outlined on every head;
    on_zoom: the grid is zoomable, on_zoom(row, col) runs when a cell is clicked. marks: a word after each layer
    button's number (a hybrid model's layer kinds, mha_viz.mixers.layer_marks)."""
    data, queries, keys = payload

    def changed() -> None:
        number = picked(state.widget(key), "layer", MAX_LAYERS)
        if number is not None and on_layer is not None:
            on_layer(number)

    def zoomed() -> None:
        cell = zoom_cell(state.widget(key), len(queries), len(keys))
        if cell is not None and on_zoom is not None:
            on_zoom(*cell)

    _component(data=with_header(data, view=view, active=layer, queries=queries, keys=keys,
                                subtitle=None if subtitle is None else list(subtitle), failed=failed or {},
                                mark=None if mark is None else list(mark), zoomable=on_zoom is not None, layer_marks=marks),
               key=key, on_layer_change=changed, on_zoom_change=zoomed)
