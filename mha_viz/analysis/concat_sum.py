"""Concat versus sum: what W_O could no longer do if the head outputs were added instead of concatenated.

Concat: output - b_O = concat W_O^T = sum_h head_h W_O^(h)T      every head has its own block W_O^(h)
Sum:    output - b_O ~ (sum_h head_h) W'^T = sum_h head_h W'^T   one shared W' [d_out, d_v] for all heads
The map into the output then sees d_v numbers per token instead of H*d_v, and W' has to stand in for every
block W_O^(h) at once. Two shared W' are tried:
    fitted  the one that best does each block's work on this input, least squares over all H*T head-output
            vectors: W' = argmin sum_h ||head_h W'^T - head_h W_O^(h)T||
    mean    the shared block nearest to the real ones:  W' = mean_h W_O^(h)
Both fit exactly when all W_O^(h) are equal. The fit is in-sample: when the H*T head-output vectors are
linearly independent (H*T <= d_v) it reproduces every head's term exactly, and the input is too short to tell.
(Fitting W' to the T sums instead would leave it free whenever T <= d_v, the usual case for a sentence.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import AttentionTrace
from .knockout import relative_change


@dataclass(frozen=True)
class ConcatVsSum:
    concat_error: float  # ||concat W_O^T - target|| / ||target||, ~0 (float rounding): the real path
    fitted_error: float  # with the shared W' fitted to every head's term
    mean_error: float  # with W' = mean_h W_O^(h)
    fitted_per_token: np.ndarray  # (T,) relative error per token, fitted W'
    mean_per_token: np.ndarray  # (T,) relative error per token, mean W'
    concat_dims: int  # H*d_v numbers per token reach W_O
    sum_dims: int  # d_v numbers per token reach W'
    fits_any: bool  # the H*T head-output vectors are independent: the fitted W' reproduces any per-head terms


def concat_vs_sum(trace: AttentionTrace) -> ConcatVsSum:
    """Relative errors of the summed path against the real output of trace's layer (bias removed)."""
    heads = trace.require("head_outputs").astype(np.float64)  # (H, T, d_v)
    target = trace.require("output") - (0.0 if trace.b_O is None else trace.b_O)  # (T, d_out)
    summed = heads.sum(0)  # (T, d_v)  sum_h head_h
    if not (np.isfinite(summed).all() and np.isfinite(target).all()):
        raise ValueError("the head outputs or the output hold values that are not finite numbers (NaN or infinity), "
                         "so no shared W' can be fitted")
    blocks = trace.W_O_blocks().astype(np.float64)  # (H, d_out, d_v)
    vectors = heads.reshape(-1, heads.shape[-1])  # (H*T, d_v) every head's output at every token
    terms = np.einsum("htv,hov->hto", heads, blocks).reshape(len(vectors), -1)  # (H*T, d_out) head_h W_O^(h)T
    W_fit = np.linalg.lstsq(vectors, terms, rcond=None)[0].T  # (d_out, d_v)
    W_mean = blocks.mean(0)  # (d_out, d_v)
    fitted, mean = summed @ W_fit.T, summed @ W_mean.T  # (T, d_out) each
    return ConcatVsSum(
        concat_error=relative_change(target, trace.require("concat") @ trace.W_O.T),
        fitted_error=relative_change(target, fitted),
        mean_error=relative_change(target, mean),
        fitted_per_token=relative_change(target, fitted, axis=-1),
        mean_per_token=relative_change(target, mean, axis=-1),
        concat_dims=trace.num_heads * trace.d_v,
        sum_dims=trace.d_v,
        fits_any=bool(np.linalg.matrix_rank(vectors) == len(vectors)),
    )
