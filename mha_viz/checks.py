"""A trace's self-check against the model's own numbers, and what happens when it fails.

A trace of a real model rebuilds the layer with mha-viz's one attention function and compares it with what the model
itself computed: meta["check"] = {what was compared: max |difference|}. Rounding alone explains at most

    tolerance = max(1e-4, 16 eps(model dtype)) * max(1, magnitude)

magnitude: 1 for attention weights (probabilities); where meta["check_scale"] gives one by the check's label, that
(a mixer's M @ values, before its norm, is a signed sum over up to T tokens, whose rounding scales with the sizes of
its terms, sum_s |M_ts| |v_s|: bounded by each head's largest row sum of |M| times its largest |value|); else the largest |value| among the trace's vectors (queries,
keys, values, head outputs, concat, output). A larger difference (or NaN) means the trace is not what the model computed,
e.g. an adapter that departs from the model's code: that check fails. failures() lists the failed ones;
verify() warns (TraceCheckWarning) or, strict, raises TraceCheckError; every surface that shows a trace (the app, the
notebook widget, the HTML report, the command line) says so with failure_message().
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .trace import AttentionTrace

# float32 models: the most rounding explains, relative (measured: <= 1e-5 on every tested family; the bundled MiniLM
# at 512 tokens: at most 0.04 of the tolerance)
FLOOR = 1e-4
# half precision: how many units of its epsilon (measured on the bundled MiniLM at 512 tokens: weights off by up to
# 0.0067 in float16 and 0.074 in bfloat16, 0.43 and 0.59 of the tolerance: coarser checks than float32's)
ROUNDINGS = 16
_EPS = {"bfloat16": 2.0**-7}  # numpy does not know bfloat16
_WEIGHTS = ("weights vs", "both softmax maps vs")  # checks of attention weights: probabilities, magnitude 1
_VECTORS = ("queries", "keys", "values", "head_outputs", "concat", "output")


class TraceCheckWarning(UserWarning):
    """A trace's rebuilt numbers differ from the model's own beyond rounding (its meta["check"] failed)."""


class TraceCheckError(RuntimeError):
    """strict=True: a trace's rebuilt numbers differ from the model's own beyond rounding."""


@dataclass(frozen=True)
class CheckFailure:
    """One failed comparison: its label, the measured max |difference| and the tolerance it exceeds."""

    label: str
    error: float
    tolerance: float

    def __str__(self) -> str:
        return f"{self.label}: max |difference| {self.error:.3g} > tolerance {self.tolerance:.2g}"


def epsilon(dtype: str) -> float:
    """The machine epsilon of a float dtype's name ("float32", "bfloat16", ...); float32's for an unknown name."""
    if dtype in _EPS:
        return _EPS[dtype]
    try:
        return float(np.finfo(np.dtype(dtype)).eps)
    except (TypeError, ValueError):
        return float(np.finfo(np.float32).eps)


def tolerance(trace: AttentionTrace, label: str, magnitude: Callable[[], float] | None = None) -> float:
    """The most that rounding explains for the check `label` of trace (see the module docstring); magnitude: what
    gives the trace's _magnitude (failures passes one that computes it once for all the trace's checks)."""
    relative = max(FLOOR, ROUNDINGS * epsilon(str(trace.meta.get("model_dtype", "float32"))))
    if label.startswith(_WEIGHTS):
        return relative
    scale = (trace.meta.get("check_scale") or {}).get(label)
    if scale is not None:
        return relative * max(1.0, float(scale))
    return relative * (_magnitude(trace) if magnitude is None else magnitude())


def _magnitude(trace: AttentionTrace) -> float:
    """The largest finite |entry| of the trace's vectors (queries ... output), at least 1: what they are rounded
    against."""
    arrays = (np.asarray(a) for name in _VECTORS if (a := getattr(trace, name, None)) is not None)  # a long layer:
    tops = [float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for a in arrays]  # its q, k, v (tensors) bound its outputs
    return max([1.0, *tops])


def _number(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def failures(trace: AttentionTrace) -> list[CheckFailure]:
    """The checks of trace.meta["check"] whose difference exceeds the tolerance (or is not a number); [] when the
    trace has no check (a configurable layer) or passes it."""
    check = trace.meta.get("check")
    if not isinstance(check, Mapping):
        return []
    out, magnitude = [], functools.cache(functools.partial(_magnitude, trace))
    for label, value in check.items():
        error, tol = _number(value), tolerance(trace, str(label), magnitude)
        if not error <= tol:  # NaN fails too
            out.append(CheckFailure(str(label), error, tol))
    return out


def where(trace: AttentionTrace) -> str:
    """Which layer the trace is: "model, part layer n" (what its meta says of it)."""
    meta = trace.meta
    layer = " ".join(str(x) for x in (meta.get("part"), None if meta.get("layer") is None else f"layer {meta['layer']}")
                     if x)
    return ", ".join(str(x) for x in (meta.get("model"), layer) if x) or "this trace"


def failure_message(trace: AttentionTrace) -> str | None:
    """What failed, with the measured differences and tolerances; None when every check passes."""
    failed = failures(trace)
    if not failed:
        return None
    return (f"Self-check failed for {where(trace)}: mha-viz's rebuild differs from the model's own numbers beyond "
            f"rounding ({'; '.join(map(str, failed))}). The numbers shown for this layer are not what the model "
            "computed.")


def verify(traces: Iterable[AttentionTrace], *, strict: bool = False, stacklevel: int = 3) -> None:
    """Warn (TraceCheckWarning) for each trace whose self-check failed, or with strict raise TraceCheckError at the
    first one."""
    for trace in traces:
        message = failure_message(trace)
        if message is None:
            continue
        if strict:
            raise TraceCheckError(message)
        warnings.warn(message, TraceCheckWarning, stacklevel=stacklevel)


__all__ = ["CheckFailure", "TraceCheckError", "TraceCheckWarning", "failure_message", "failures", "tolerance",
           "verify"]
