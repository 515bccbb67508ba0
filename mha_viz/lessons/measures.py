"""Numbers a lesson's answer quotes, measured on the live models: each a function of the app state returning named
values for the explanation's {placeholders}. A lesson names one by `measure = "<name>"`; add one with @measure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..params import ViewState

Measure = Callable[[ViewState], dict[str, Any]]
MEASURES: dict[str, Measure] = {}


def measure(function: Measure) -> Measure:
    """Register a measure under its function's name."""
    MEASURES[function.__name__] = function
    return function


@measure
def layer_shapes(state: ViewState) -> dict[str, Any]:
    """d_model, h, d_k = d_model / h, and the layer's weights 4 d_model^2 (standard widths)."""
    d, h = state.d_model, state.h
    return {"d_model": d, "h": h, "d_k": d // h if d % h == 0 else d / h, "weights": 4 * d * d}
