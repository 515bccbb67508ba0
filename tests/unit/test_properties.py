"""Property tests: identities that must hold for every shape, mask and input."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_viz import MultiHeadAttention

F64 = torch.float64
TOL = 1e-10

dims = st.integers(1, 16)


@st.composite
def cases(draw, causal=None, cross=None):
    """A float64 layer with random (non-zero) biases, an input, and maybe a context."""
    H = draw(st.integers(1, 6))
    d_model, d_k, d_v, d_out = draw(dims), draw(dims), draw(dims), draw(dims)
    bias = draw(st.booleans())
    is_cross = draw(st.booleans()) if cross is None else cross
    is_causal = draw(st.booleans()) if causal is None else causal
    d_context = draw(dims) if is_cross else d_model
    T = draw(st.integers(1, 12))
    S = draw(st.integers(1, 12)) if is_cross else T
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))  # 5.0 makes some softmax rows very peaked
    mha = MultiHeadAttention(
        d_model, H, d_k=d_k, d_v=d_v, d_out=d_out, d_context=d_context, bias=bias, seed=seed, dtype=F64
    )
    gen = torch.Generator().manual_seed(seed)
    if bias:
        with torch.no_grad():
            for b in (mha.b_Q, mha.b_K, mha.b_V, mha.b_O):
                b.copy_(torch.randn(b.shape, generator=gen, dtype=F64))
    x = torch.randn(T, d_model, generator=gen, dtype=F64) * scale
    c = torch.randn(S, d_context, generator=gen, dtype=F64) * scale if is_cross else None
    return mha, x, c, is_causal


SETTINGS = settings(max_examples=100, deadline=None)


@SETTINGS
@given(cases())
def test_weight_rows_are_distributions(case):
    mha, x, c, causal = case
    t = mha(x, c, causal=causal)
    assert np.all(t.weights >= 0) and np.all(t.weights <= 1)
    assert np.abs(t.weights.sum(-1) - 1).max() <= TOL
    # the weights are softmax(scores), recomputed here with numpy
    finite = np.where(np.isinf(t.scores), -np.inf, t.scores)
    e = np.exp(finite - finite.max(-1, keepdims=True))
    assert np.abs(e / e.sum(-1, keepdims=True) - t.weights).max() <= TOL
    # and the scores are Q K^T / sqrt(d_k) wherever they are not masked
    raw = t.queries @ t.keys.transpose(0, 2, 1) / np.sqrt(t.d_k)
    ok = np.isfinite(t.scores)
    assert np.abs(raw[ok] - t.scores[ok]).max(initial=0.0) <= TOL


@SETTINGS
@given(cases(causal=True))
def test_causal_mask(case):
    mha, x, c, _ = case
    t = mha(x, c, causal=True)
    T, S = t.weights.shape[1:]
    above = np.triu(np.ones((T, S), dtype=bool), 1)  # key j > query i
    assert np.all(t.weights[:, above] == 0.0)
    assert np.all(np.isneginf(t.scores[:, above]))
    assert np.all(np.isfinite(t.scores[:, ~above]))
    # query 0 can only see key 0
    assert np.all(t.weights[:, 0, 0] == 1.0)
    # causal weights are the softmax of the unmasked run's scores over keys 0..i only
    full = mha(x, c, causal=False)
    assert np.array_equal(full.scores[:, ~above], t.scores[:, ~above])
    for i in range(T):
        n = min(i + 1, S)
        s = full.scores[:, i, :n]
        e = np.exp(s - s.max(-1, keepdims=True))
        assert np.abs(e / e.sum(-1, keepdims=True) - t.weights[:, i, :n]).max() <= TOL


@SETTINGS
@given(cases())
def test_w_o_path_identities(case):
    mha, x, c, causal = case
    t = mha(x, c, causal=causal)
    H, T, _ = t.weights.shape
    d_v = t.d_v
    bias = 0.0 if t.b_O is None else t.b_O
    # concat is the head outputs laid side by side, head 0 first
    for h in range(H):
        assert np.array_equal(t.concat[:, h * d_v : (h + 1) * d_v], t.head_outputs[h])
    # output = concat @ W_O^T + b_O
    assert np.abs(t.concat @ t.W_O.T + bias - t.output).max() <= TOL
    # output = sum over heads of each head's contribution + b_O
    contrib = t.head_contributions()
    assert contrib.shape == (H, T, t.d_out)
    assert np.abs(contrib.sum(0) + bias - t.output).max() <= TOL
    # a head's contribution uses only its own column block of W_O
    blocks = t.W_O_blocks()
    for h in range(H):
        assert np.array_equal(blocks[h], t.W_O[:, h * d_v : (h + 1) * d_v])
    errs = t.check_wo_path()
    assert len(errs) == 2 and all(0.0 <= e <= TOL for e in errs.values())


@SETTINGS
@given(cases())
def test_head_outputs_are_convex_combinations_of_values(case):
    mha, x, c, causal = case
    t = mha(x, c, causal=causal)
    lo = t.values.min(axis=1, keepdims=True)  # (H, 1, d_v)
    hi = t.values.max(axis=1, keepdims=True)
    assert np.all(t.head_outputs >= lo - TOL) and np.all(t.head_outputs <= hi + TOL)
    assert np.abs(t.weights @ t.values - t.head_outputs).max() <= TOL


@SETTINGS
@given(cases(causal=False), st.randoms(use_true_random=False))
def test_permutation_symmetry(case, rnd):
    """Without a mask, attention is a set operation over keys, and row-wise over queries."""
    mha, x, c, _ = case
    t = mha(x, c)
    T = x.shape[0]
    p = list(range(T))
    rnd.shuffle(p)
    if c is None:
        # self-attention: permuting the tokens permutes output rows and both weight axes
        tp = mha(x[p])
        assert np.abs(tp.output - t.output[p]).max() <= TOL
        assert np.abs(tp.weights - t.weights[:, p][:, :, p]).max() <= TOL
    else:
        # cross-attention: reordering the context does not change the output at all
        S = c.shape[0]
        q = list(range(S))
        rnd.shuffle(q)
        tq = mha(x, c[q])
        assert np.abs(tq.output - t.output).max() <= TOL
        assert np.abs(tq.weights - t.weights[:, :, q]).max() <= TOL


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(0, 2**31 - 1))
def test_attend_and_forward_agree(case, seed):
    mha, x, c, causal = case
    t = mha(x, c, causal=causal)
    a = mha.attend(x, c, causal=causal)
    for name in ("weights", "head_outputs", "concat", "output"):
        assert np.array_equal(getattr(t, name), getattr(a, name).detach().numpy()), name
    # a random head mask scales each head's block of concat
    mask = torch.rand(mha.config.num_heads, generator=torch.Generator().manual_seed(seed), dtype=F64)
    tm = mha(x, c, causal=causal, head_mask=mask)
    assert np.abs(tm.head_outputs - t.head_outputs * mask.numpy()[:, None, None]).max() <= TOL
