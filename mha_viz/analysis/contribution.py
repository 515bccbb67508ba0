"""How much each head adds to the output after W_O, beside how much it attends.

    contribution_h,i = || sum_j w_ij f_h(x_j) ||    = || head_h[i] W_O^(h)T ||      per head and query
    norm attention   = || w_ij f_h(x_j) ||          = w_ij || v_j W_O^(h)T ||      Kobayashi et al. 2020
with f_h(x_j) = v_j W_O^(h)T the value vector of key j carried through head h's block of W_O.
A large weight on a key whose transformed value is short moves the output little; the norm
attention shows that, the raw weights do not.
"""

from __future__ import annotations

import numpy as np

from ..trace import AttentionTrace


def contribution_norms(trace: AttentionTrace) -> np.ndarray:
    """[H, T]: ||head_h[i] W_O^(h)T||, the size of what head h adds to query i's output."""
    return np.linalg.norm(trace.head_contributions(), axis=-1)  # (H, T)


def transformed_value_norms(trace: AttentionTrace) -> np.ndarray:
    """[H, S]: ||f_h(x_j)|| = ||v_j W_O^(h)T||."""
    f = np.einsum("hsv,hov->hso", trace.require("values"), trace.W_O_blocks())  # (H, S, d_out)
    return np.linalg.norm(f, axis=-1)  # (H, S)


def norm_attention(trace: AttentionTrace) -> np.ndarray:
    """[H, T, S]: ||w_ij f_h(x_j)|| = w_ij ||f_h(x_j)|| (weights are >= 0)."""
    return trace.weights * transformed_value_norms(trace)[:, None, :]  # (H, T, S)
