"""Concat versus sum: what W_O could no longer do if the head outputs were added instead of concatenated.

Concat: output - b_O = concat W_O^T = sum_h head_h W_O^(h)T      every head has its own block W_O^(h)
Sum:    output - b_O ~ (sum_h head_h) W'^T                       one shared W' [d_out, d_v] for all heads
The map into the output then sees d_v numbers per token instead of H*d_v. Two shared W' are tried:
    fitted  least squares on this input:  W' = argmin ||(sum_h head_h) W'^T - (output - b_O)||
    mean    the shared block nearest to the real ones:  W' = mean_h W_O^(h)
Both fit exactly when all W_O^(h) are equal. The fit is in-sample: when the summed head outputs
[T, d_v] have rank T (e.g. T <= d_v) any target is fitted exactly, and the input is too short to tell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import AttentionTrace
from .knockout import relative_change


@dataclass(frozen=True)
class ConcatVsSum:
    concat_error: float  # ||concat W_O^T - target|| / ||target||, ~0 (float rounding): the real path
    fitted_error: float  # with the least-squares shared W'
    mean_error: float  # with W' = mean_h W_O^(h)
    fitted_per_token: np.ndarray  # (T,) relative error per token, fitted W'
    mean_per_token: np.ndarray  # (T,) relative error per token, mean W'
    concat_dims: int  # H*d_v numbers per token reach W_O
    sum_dims: int  # d_v numbers per token reach W'
    fits_any: bool  # the summed head outputs have rank T: the fitted W' reproduces any target


def concat_vs_sum(trace: AttentionTrace) -> ConcatVsSum:
    """Relative errors of the summed path against the real output of trace's layer (bias removed)."""
    heads = trace.require("head_outputs").astype(np.float64)  # (H, T, d_v)
    target = trace.require("output") - (0.0 if trace.b_O is None else trace.b_O)  # (T, d_out)
    summed = heads.sum(0)  # (T, d_v)  sum_h head_h
    if not (np.isfinite(summed).all() and np.isfinite(target).all()):
        raise ValueError("the head outputs or the output hold values that are not finite numbers (NaN or infinity), "
                         "so no shared W' can be fitted")
    W_fit = np.linalg.lstsq(summed, target, rcond=None)[0].T  # (d_out, d_v)
    W_mean = trace.W_O_blocks().mean(0)  # (d_out, d_v)
    fitted, mean = summed @ W_fit.T, summed @ W_mean.T  # (T, d_out) each
    T = summed.shape[0]
    return ConcatVsSum(
        concat_error=relative_change(target, trace.require("concat") @ trace.W_O.T),
        fitted_error=relative_change(target, fitted),
        mean_error=relative_change(target, mean),
        fitted_per_token=relative_change(target, fitted, axis=-1),
        mean_per_token=relative_change(target, mean, axis=-1),
        concat_dims=trace.num_heads * trace.d_v,
        sum_dims=trace.d_v,
        fits_any=bool(np.linalg.matrix_rank(summed) == T),
    )
