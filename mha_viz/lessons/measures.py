"""Numbers a lesson's answer quotes, measured on the live models: each a function of the app state returning named
values for the explanation's {placeholders}. A lesson names one by `measure = "<name>"`; add one with @measure."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

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


# Lessons 1, 2 and 4 (one head, heads specialise, concat and W_O): numbers from the trained layers, the bundled
# pretrained models and the configurable layer, computed with the library exactly as the app computes what it shows.
LESSON_HEADS = (1, 2, 4)  # the h that lessons 1 and 2 compare (shipped trained layers at d_model = 64)


def _trained(state: ViewState, h: int | None = None):
    """The trained layer the trained-weights page shows for this state (h: another head count)."""
    from ..training import trained_layer

    return trained_layer(state.task, state.h if h is None else h, state.d_model, state.seed, state.steps)


def _layer_trace(state: ViewState):
    """The AttentionTrace of the configurable page's layer: trained weights, or random (seeded) ones."""
    if state.weights == "trained":
        return _trained(state).trace(state.sequence or None)
    from ..config import MHAConfig
    from ..sources import configurable_trace

    return configurable_trace(state.text, MHAConfig(state.d_model, state.h, d_k=state.d_k, d_v=state.d_v,
                                                    d_out=state.d_out), seed=state.seed, causal=state.causal,
                              positional=state.pe)


@lru_cache(maxsize=4)
def _detector_scores(model: str) -> dict[str, np.ndarray]:
    """detect_heads of a pretrained model ("" the bundled MiniLM), seed 0 as the app runs it; only the small score
    arrays are kept, not the model."""
    from ..analysis import detect_heads
    from ..pretrained import load_model

    return detect_heads(load_model(model or None), seed=0)


@lru_cache(maxsize=16)
def _first_shares(model: str, text: str, layer: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Head statistics' first column of a pretrained model's layer on text (special tokens shown), and its keys."""
    from ..analysis.head_stats import trace_head_stats
    from ..pretrained import load_model

    loaded = load_model(model or None)
    trace = loaded.trace(text, layer)
    return trace_head_stats(trace, loaded.tokenizer.all_special_tokens).first, trace.key_tokens


def _key(name: str) -> str:
    return name.replace(" ", "_")


@measure
def it_row(state: ViewState) -> dict[str, Any]:
    """Head 0's row for the query "it" (the first one) on the state's sentence: its sum, its weight on "animal" and on
    the sentence's last word, and the key it weighs most."""
    trace = _layer_trace(state)
    tokens = [t.lower() for t in trace.query_tokens]
    if "it" not in tokens:
        raise ValueError("it_row needs a sentence with the word 'it'")
    row = trace.weights[0, tokens.index("it")].astype(float)  # (S,)
    keys = [t.lower() for t in trace.key_tokens]
    top = int(row.argmax())
    return {"row_sum": float(row.sum()), "w_animal": float(row[keys.index("animal")]) if "animal" in keys else 0.0,
            "last_word": trace.key_tokens[-1], "w_last": float(row[-1]), "top_key": trace.key_tokens[top],
            "w_top": float(row[top]), "n_keys": len(row), "uniform": 1.0 / len(row)}


@measure
def trained_heads(state: ViewState) -> dict[str, Any]:
    """The trained layer of this state: its accuracy (mean and per relation, accuracy_<relation>), each head's
    attention mass on each relation (mass_<relation> of head 0; head<i>_<relation> of every head), and the number of
    heads whose largest mass is each relation (heads_on_<relation>)."""
    layer = _trained(state)
    out: dict[str, Any] = {"h": layer.num_heads, "accuracy": float(layer.mean_accuracy)}
    best = layer.scores.argmax(1)  # (H,) the relation each head follows most
    for r, name in enumerate(layer.relations):
        out[f"accuracy_{_key(name)}"] = float(layer.accuracy[r])
        out[f"mass_{_key(name)}"] = float(layer.scores[0, r])
        out[f"heads_on_{_key(name)}"] = int((best == r).sum())
        for head in range(layer.num_heads):
            out[f"head{head}_{_key(name)}"] = float(layer.scores[head, r])
    return out


@measure
def trained_accuracy(state: ViewState) -> dict[str, Any]:
    """Mean accuracy of the trained layers with h = 1, 2 and 4 (accuracy_h<h>) on the state's task, d_model, seed and
    steps, as the accuracy-per-h chart shows them."""
    return {f"accuracy_h{h}": float(_trained(state, h).mean_accuracy) for h in LESSON_HEADS}


@measure
def head_detectors(state: ViewState) -> dict[str, Any]:
    """The state's pretrained model: for each detector kind (previous, duplicate, induction), the head that scores
    highest (<kind>_layer, <kind>_head, <kind>_score), the second-highest score of any head (<kind>_next) and the
    lowest score in the top head's layer (<kind>_layer_min), as Analysis → Head detectors finds them (seed 0)."""
    out: dict[str, Any] = {}
    for kind, scores in _detector_scores(state.model).items():
        layer, head = divmod(int(scores.argmax()), scores.shape[1])
        ranked = np.sort(scores.ravel())[::-1]
        out |= {f"{kind}_layer": layer, f"{kind}_head": head, f"{kind}_score": float(ranked[0]),
                f"{kind}_next": float(ranked[1]), f"{kind}_layer_min": float(scores[layer].min())}
    return out


@measure
def first_token_head(state: ViewState) -> dict[str, Any]:
    """The state's pretrained model at the state's layer, on its text: the head with the largest share on the first
    token (Head statistics' first column), that share, the first token, and what a uniform row would give it."""
    first, keys = _first_shares(state.model, state.text, state.layer)  # (H,), (S,)
    head = int(first.argmax())
    return {"layer": state.layer, "head": head, "first_share": float(first[head]), "first_token": keys[0],
            "median_share": float(np.median(first)), "uniform": 1.0 / len(keys)}


@measure
def concat_widths(state: ViewState) -> dict[str, Any]:
    """h, d_v, the width of the concatenation h·d_v that reaches W_O, and d_model (arithmetic on the layer's shapes)."""
    trace = _layer_trace(state)
    return {"h": trace.num_heads, "d_v": trace.d_v, "width": trace.num_heads * trace.d_v,
            "d_model": int(trace.W_O.shape[0])}


@measure
def wo_path(state: ViewState) -> dict[str, Any]:
    """The two identities of the concat → W_O path on the state's layer: the largest difference between concat·W_Oᵀ + b
    and the output (concat_error), and between the sum of the heads' contributions + b and the output (sum_error), with
    the larger of the two (max_error) and the float rounding allowed (tolerance)."""
    trace = _layer_trace(state)
    concat_error, sum_error = trace.check_wo_path().values()
    return {"concat_error": concat_error, "sum_error": sum_error, "max_error": max(concat_error, sum_error),
            "tolerance": trace.rounding_tolerance()}


@measure
def concat_sum(state: ViewState) -> dict[str, Any]:
    """Analysis → Concat vs sum on the state's layer: the relative error of the real path, of the best shared W' and of
    the mean block, and the numbers per token each path gives W_O."""
    from ..analysis.concat_sum import concat_vs_sum

    r = concat_vs_sum(_layer_trace(state))
    return {"concat_error": r.concat_error, "fitted_error": r.fitted_error, "mean_error": r.mean_error,
            "concat_dims": r.concat_dims, "sum_dims": r.sum_dims, "fits_any": r.fits_any}


@measure
def contributions(state: ViewState) -> dict[str, Any]:
    """Analysis → Contribution on the state's layer: each head's mean ‖head_h·W_O^(h)ᵀ‖ over the queries
    (contribution<h>), the largest and the smallest, and their ratio."""
    from ..analysis.contribution import contribution_norms

    means = contribution_norms(_layer_trace(state)).mean(-1)  # (H,)
    top, low = int(means.argmax()), int(means.argmin())
    return {**{f"contribution{h}": float(v) for h, v in enumerate(means)}, "top_head": top,
            "top": float(means[top]), "low_head": low, "low": float(means[low]), "ratio": float(means[top] / means[low])}
