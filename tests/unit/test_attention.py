"""MultiHeadAttention against torch.nn.MultiheadAttention and against an independent reference.

Everything that is compared to torch runs in float64, so agreement is expected to ~1e-15;
the tolerance used is 1e-10.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from mha_viz import MultiHeadAttention
from mha_viz.trace import AttentionTrace

TOL = 1e-10
F64 = torch.float64


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def randomized_torch_mha(E: int, H: int, *, seed: int, bias: bool = True, kdim: int | None = None) -> nn.MultiheadAttention:
    """A float64 torch layer whose every parameter (biases included) is random and non-zero.

    torch initialises the in/out projection biases to zero, which would make a bias test
    vacuous, so all parameters are redrawn here.
    """
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=kdim, dtype=F64)
    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=F64) * 0.5)
    return m.eval()


def torch_reference(m: nn.MultiheadAttention, x: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None):
    with torch.no_grad():
        out, w = m(x, c, c, need_weights=True, average_attn_weights=False, attn_mask=mask)
    return out.numpy(), w.numpy()


def _np(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def max_diff(a, b) -> float:
    a, b = _np(a), _np(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    inf = np.isinf(a)  # masked scores: both must be -inf in exactly the same places
    assert np.array_equal(inf, np.isinf(b)) and np.array_equal(a[inf], b[inf])
    return float(np.abs(a[~inf] - b[~inf]).max(initial=0.0))


def loop_reference(mha: MultiHeadAttention, x: torch.Tensor, c: torch.Tensor, causal: bool = False):
    """Textbook multi-head attention, one head at a time, from the module's parameters.

    Written independently of mha_viz.attention (no einsum, explicit per-head matmuls).
    Returns (weights [H, T, S], head_outputs [H, T, d_v], concat [T, H*d_v], output [T, d_out]).
    """
    H, d_k = mha.W_Q.shape[0], mha.W_Q.shape[2]
    T, S = x.shape[0], c.shape[0]
    weights, heads = [], []
    with torch.no_grad():
        for h in range(H):
            q = x @ mha.W_Q[h]
            k = c @ mha.W_K[h]
            v = c @ mha.W_V[h]
            if mha.b_Q is not None:
                q, k, v = q + mha.b_Q[h], k + mha.b_K[h], v + mha.b_V[h]
            s = (q @ k.T) / math.sqrt(d_k)
            if causal:
                for i in range(T):
                    for j in range(S):
                        if j > i:
                            s[i, j] = float("-inf")
            w = torch.softmax(s, dim=-1)
            weights.append(w)
            heads.append(w @ v)
        concat = torch.cat(heads, dim=-1)
        out = concat @ mha.W_O.T
        if mha.b_O is not None:
            out = out + mha.b_O
    return torch.stack(weights).numpy(), torch.stack(heads).numpy(), concat.numpy(), out.numpy()


# ----------------------------------------------------------------------------------------------
# agreement with torch.nn.MultiheadAttention
# ----------------------------------------------------------------------------------------------

# (E, H, T, S, kdim, seed); kdim None = self-attention (S ignored, S = T).
SELF_CONFIGS = [
    (8, 2, 5, None, None, 0),
    (16, 4, 7, None, None, 1),
    (12, 3, 1, None, None, 2),
    (24, 6, 9, None, None, 3),
    (6, 1, 4, None, None, 4),
    (32, 8, 11, None, None, 5),
    (10, 10, 3, None, None, 6),
]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("E,H,T,S,kdim,seed", SELF_CONFIGS)
def test_self_attention_matches_torch(E, H, T, S, kdim, seed, causal, bias):
    m = randomized_torch_mha(E, H, seed=seed, bias=bias)
    ours = MultiHeadAttention.from_torch(m)
    assert ours.W_Q.dtype == F64
    assert (ours.b_O is None) == (not bias)
    gen = torch.Generator().manual_seed(seed + 7)
    x = torch.randn(T, E, generator=gen, dtype=F64)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None

    ref_out, ref_w = torch_reference(m, x, x, mask)
    trace = ours(x, causal=causal)

    assert trace.weights.shape == ref_w.shape == (H, T, T)
    assert trace.output.shape == ref_out.shape == (T, E)
    assert max_diff(trace.output, ref_out) <= TOL
    assert max_diff(trace.weights, ref_w) <= TOL
    if causal:
        upper = np.triu(np.ones((T, T), dtype=bool), 1)
        assert np.all(trace.weights[:, upper] == 0.0)
        assert np.all(ref_w[:, upper] == 0.0)
        assert np.all(np.isneginf(trace.scores[:, upper]))
        # and nothing on or below the diagonal is masked
        assert np.all(np.isfinite(trace.scores[:, ~upper]))


# (E, H, T, S, kdim, seed) with T != S and kdim != E
CROSS_CONFIGS = [
    (8, 2, 3, 5, 6, 10),
    (16, 4, 6, 2, 20, 11),
    (12, 3, 1, 7, 5, 12),
    (6, 6, 9, 4, 3, 13),
    (20, 5, 4, 10, 11, 14),
]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("E,H,T,S,kdim,seed", CROSS_CONFIGS)
def test_cross_attention_matches_torch(E, H, T, S, kdim, seed, causal, bias):
    assert T != S and kdim != E
    m = randomized_torch_mha(E, H, seed=seed, bias=bias, kdim=kdim)
    assert not m._qkv_same_embed_dim  # the separate q/k/v projection path is exercised
    ours = MultiHeadAttention.from_torch(m)
    assert ours.config.d_context == kdim
    gen = torch.Generator().manual_seed(seed + 7)
    x = torch.randn(T, E, generator=gen, dtype=F64)
    c = torch.randn(S, kdim, generator=gen, dtype=F64)
    mask = torch.ones(T, S, dtype=torch.bool).triu(1) if causal else None

    ref_out, ref_w = torch_reference(m, x, c, mask)
    trace = ours(x, c, causal=causal)

    assert trace.cross
    assert trace.weights.shape == ref_w.shape == (H, T, S)
    assert trace.keys.shape == (H, S, E // H)
    assert trace.output.shape == ref_out.shape == (T, E)
    assert max_diff(trace.output, ref_out) <= TOL
    assert max_diff(trace.weights, ref_w) <= TOL
    if causal:
        upper = np.triu(np.ones((T, S), dtype=bool), 1)
        assert np.all(trace.weights[:, upper] == 0.0)
        assert np.all(ref_w[:, upper] == 0.0)


def test_gradients_match_torch():
    """The differentiable path (attend) gives the same gradients as torch, for inputs and parameters."""
    E, H, T, S, kdim = 12, 3, 4, 6, 7
    m = randomized_torch_mha(E, H, seed=21, kdim=kdim)
    ours = MultiHeadAttention.from_torch(m)
    gen = torch.Generator().manual_seed(22)
    x0 = torch.randn(T, E, generator=gen, dtype=F64)
    c0 = torch.randn(S, kdim, generator=gen, dtype=F64)
    proj = torch.randn(T, E, generator=gen, dtype=F64)

    x1, c1 = x0.clone().requires_grad_(), c0.clone().requires_grad_()
    (m(x1, c1, c1, need_weights=False)[0] * proj).sum().backward()
    x2, c2 = x0.clone().requires_grad_(), c0.clone().requires_grad_()
    (ours.attend(x2, c2).output * proj).sum().backward()

    assert max_diff(x1.grad, x2.grad) <= TOL
    assert max_diff(c1.grad, c2.grad) <= TOL
    # parameter gradients, mapped back to torch's layout
    d = E // H
    per_head = lambda g: g.reshape(H, d, -1).transpose(1, 2)  # (E, in) rows per head -> (H, in, d)
    assert max_diff(ours.W_Q.grad, per_head(m.q_proj_weight.grad)) <= TOL
    assert max_diff(ours.W_K.grad, per_head(m.k_proj_weight.grad)) <= TOL
    assert max_diff(ours.W_V.grad, per_head(m.v_proj_weight.grad)) <= TOL
    assert max_diff(ours.W_O.grad, m.out_proj.weight.grad) <= TOL
    gq, gk, gv = m.in_proj_bias.grad.reshape(3, H, d)
    assert max_diff(ours.b_Q.grad, gq) <= TOL
    assert max_diff(ours.b_V.grad, gv) <= TOL
    assert max_diff(ours.b_K.grad, gk) <= TOL
    assert max_diff(ours.b_O.grad, m.out_proj.bias.grad) <= TOL


def test_from_torch_rejects_unsupported_layers():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=6))


def test_from_torch_copies_head_blocks():
    """W_Q[h] is the transpose of rows h*d:(h+1)*d of torch's query projection."""
    E, H = 12, 3
    d = E // H
    m = randomized_torch_mha(E, H, seed=30)
    ours = MultiHeadAttention.from_torch(m)
    Wq = m.in_proj_weight[:E]
    Wv = m.in_proj_weight[2 * E :]
    for h in range(H):
        assert torch.equal(ours.W_Q[h], Wq[h * d : (h + 1) * d].T)
        assert torch.equal(ours.W_V[h], Wv[h * d : (h + 1) * d].T)
        assert torch.equal(ours.b_K[h], m.in_proj_bias[E + h * d : E + (h + 1) * d])
    assert torch.equal(ours.W_O, m.out_proj.weight)
    assert torch.equal(ours.b_O, m.out_proj.bias)


# ----------------------------------------------------------------------------------------------
# the general form: d_k, d_v, d_out, d_context chosen freely
# ----------------------------------------------------------------------------------------------

GENERAL = [
    # d_model, H, d_k, d_v, d_out, d_context, T, S (None = self-attention), bias, seed
    (12, 3, 5, 7, 9, None, 6, None, True, 0),
    (10, 4, 3, 6, 11, None, 5, None, False, 1),  # 4 does not divide 10: allowed because d_k, d_v are set
    (8, 2, 7, 3, 5, 6, 4, 9, True, 2),
    (16, 5, 2, 9, 4, 13, 7, 3, True, 3),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d_model,H,d_k,d_v,d_out,d_context,T,S,bias,seed", GENERAL)
def test_general_form_matches_loop_reference(d_model, H, d_k, d_v, d_out, d_context, T, S, bias, seed, causal):
    assert len({d_k, d_v, d_out}) == 3 and d_model / H not in (d_k, d_v, d_out)
    mha = MultiHeadAttention(
        d_model, H, d_k=d_k, d_v=d_v, d_out=d_out, d_context=d_context, bias=bias, seed=seed, dtype=F64
    )
    if bias:  # biases start at zero; make them matter
        gen = torch.Generator().manual_seed(seed + 50)
        with torch.no_grad():
            for b in (mha.b_Q, mha.b_K, mha.b_V, mha.b_O):
                b.copy_(torch.randn(b.shape, generator=gen, dtype=F64))
    gen = torch.Generator().manual_seed(seed + 99)
    x = torch.randn(T, d_model, generator=gen, dtype=F64)
    c = None if S is None else torch.randn(S, d_context, generator=gen, dtype=F64)
    S_eff = T if S is None else S

    trace = mha(x, c, causal=causal)

    assert isinstance(trace, AttentionTrace)
    assert trace.missing == ()
    assert trace.queries.shape == (H, T, d_k)
    assert trace.keys.shape == (H, S_eff, d_k)
    assert trace.values.shape == (H, S_eff, d_v)
    assert trace.scores.shape == (H, T, S_eff)
    assert trace.weights.shape == (H, T, S_eff)
    assert trace.head_outputs.shape == (H, T, d_v)
    assert trace.concat.shape == (T, H * d_v)
    assert trace.output.shape == (T, d_out)
    assert trace.W_O.shape == (d_out, H * d_v)
    assert (trace.num_heads, trace.d_k, trace.d_v, trace.d_out) == (H, d_k, d_v, d_out)
    assert trace.cross == (c is not None) and trace.causal == causal

    w, heads, concat, out = loop_reference(mha, x, x if c is None else c, causal)
    assert max_diff(trace.weights, w) <= TOL
    assert max_diff(trace.head_outputs, heads) <= TOL
    assert max_diff(trace.concat, concat) <= TOL
    assert max_diff(trace.output, out) <= TOL


def test_default_token_labels():
    self_mha = MultiHeadAttention(8, 2, seed=0, dtype=F64)
    t_self = self_mha(torch.randn(4, 8, dtype=F64), query_tokens=["a", "b", "c", "d"])
    assert self_mha(torch.randn(2, 8, dtype=F64)).query_tokens == ("0", "1")
    mha = MultiHeadAttention(8, 2, d_context=3, seed=0, dtype=F64)
    x, c = torch.randn(3, 8, dtype=F64), torch.randn(5, 3, dtype=F64)
    with pytest.raises(ValueError, match="d_context=3"):
        mha(x)  # self-attention needs d_context == d_model
    assert t_self.key_tokens == t_self.query_tokens == ("a", "b", "c", "d")
    t_cross = mha(x, c, query_tokens=["x", "y", "z"])
    assert t_cross.query_tokens == ("x", "y", "z")
    assert t_cross.key_tokens == ("0", "1", "2", "3", "4")
    with pytest.raises(ValueError):
        mha(x, c, query_tokens=["only", "two"])


# ----------------------------------------------------------------------------------------------
# configuration, seeding, errors
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d_model,H,nearest",
    [(64, 5, ["4"]), (48, 5, ["4", "6"]), (10, 3, ["2"]), (12, 7, ["6"]), (4, 8, ["4"])],
)
def test_head_count_not_dividing_d_model_raises(d_model, H, nearest):
    with pytest.raises(ValueError) as err:
        MultiHeadAttention(d_model, H)
    msg = str(err.value)
    assert f"h={H}" in msg and f"d_model={d_model}" in msg
    assert "Nearest valid h: " + " or ".join(nearest) in msg


def test_seed_reproducible_and_seeds_differ():
    a = MultiHeadAttention(16, 4, d_context=6, seed=123)
    b = MultiHeadAttention(16, 4, d_context=6, seed=123)
    c = MultiHeadAttention(16, 4, d_context=6, seed=124)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb), name
        if name.startswith("W_"):
            assert not torch.equal(pa, pc), name
    # reproducible through reset_parameters too
    b.reset_parameters(124)
    assert all(torch.equal(p, q) for p, q in zip(b.parameters(), c.parameters(), strict=True))


def test_xavier_bounds_and_zero_biases():
    mha = MultiHeadAttention(16, 4, d_k=3, d_v=5, d_out=7, d_context=9, seed=0, dtype=F64)
    H = 4
    bounds = {
        "W_Q": math.sqrt(6 / (16 + H * 3)),
        "W_K": math.sqrt(6 / (9 + H * 3)),
        "W_V": math.sqrt(6 / (9 + H * 5)),
        "W_O": math.sqrt(6 / (H * 5 + 7)),
    }
    for name, bound in bounds.items():
        W = getattr(mha, name)
        assert W.abs().max() <= bound
        assert W.abs().max() > 0.5 * bound  # really spread over the interval, not all tiny
    for name in ("b_Q", "b_K", "b_V", "b_O"):
        assert torch.count_nonzero(getattr(mha, name)) == 0


def test_forward_input_validation():
    mha = MultiHeadAttention(8, 2, d_context=5, seed=0)
    with pytest.raises(ValueError, match="d_model=8"):
        mha(torch.randn(3, 7))
    with pytest.raises(ValueError, match="d_context=5"):
        mha(torch.randn(3, 8), torch.randn(4, 8))
    with pytest.raises(ValueError, match="empty"):
        mha(torch.randn(0, 8), torch.randn(4, 5))
    with pytest.raises(ValueError, match="empty"):
        mha(torch.randn(3, 8), torch.randn(0, 5))
    with pytest.raises(ValueError):
        mha(torch.randn(2, 3, 8), torch.randn(2, 4, 5))  # forward traces one input


def test_head_mask_zeroes_that_heads_block():
    d_model, H, d_v, d_out = 12, 4, 5, 7
    mha = MultiHeadAttention(d_model, H, d_k=2, d_v=d_v, d_out=d_out, seed=3, dtype=F64)
    with torch.no_grad():
        mha.b_V.copy_(torch.randn(H, d_v, dtype=F64))  # a non-zero bias must be switched off too
        mha.b_O.copy_(torch.randn(d_out, dtype=F64))
    x = torch.randn(6, d_model, dtype=F64, generator=torch.Generator().manual_seed(0))
    full = mha(x)
    for off in range(H):
        mask = torch.ones(H, dtype=F64)
        mask[off] = 0
        t = mha(x, head_mask=mask)
        block = slice(off * d_v, (off + 1) * d_v)
        assert np.all(t.concat[:, block] == 0.0)
        assert np.all(t.head_outputs[off] == 0.0)
        keep = np.ones(H * d_v, dtype=bool)
        keep[block] = False
        assert np.array_equal(t.concat[:, keep], full.concat[:, keep])
        # the weights themselves are untouched: masking acts after attention
        assert np.array_equal(t.weights, full.weights)
        # the output loses exactly that head's contribution
        expected = full.output - full.head_contributions()[off]
        assert max_diff(t.output, expected) <= TOL
    # a boolean mask works as well
    t = mha(x, head_mask=torch.tensor([True, False, True, False]))
    assert np.all(t.concat[:, d_v : 2 * d_v] == 0) and np.all(t.concat[:, 3 * d_v :] == 0)
    assert np.array_equal(t.concat[:, :d_v], full.concat[:, :d_v])


# ----------------------------------------------------------------------------------------------
# attend(): batches and gradients
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_attend_batch_matches_single(causal):
    mha = MultiHeadAttention(10, 2, d_k=4, d_v=3, d_out=6, d_context=5, seed=5, dtype=F64)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 4, 10, generator=gen, dtype=F64)  # two leading batch dims
    c = torch.randn(2, 3, 6, 5, generator=gen, dtype=F64)
    batched = mha.attend(x, c, causal=causal)
    assert batched.queries.shape == (2, 3, 2, 4, 4)
    assert batched.weights.shape == (2, 3, 2, 4, 6)
    assert batched.concat.shape == (2, 3, 4, 6)
    assert batched.output.shape == (2, 3, 4, 6)
    for i in range(2):
        for j in range(3):
            single = mha.attend(x[i, j], c[i, j], causal=causal)
            for name in single._fields:
                assert max_diff(getattr(batched, name)[i, j], getattr(single, name)) <= TOL, name


def test_attend_gradients_flow_to_every_parameter():
    mha = MultiHeadAttention(8, 2, d_k=3, d_v=5, d_out=4, d_context=6, seed=0, dtype=F64)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for b in (mha.b_Q, mha.b_K, mha.b_V, mha.b_O):
            b.copy_(torch.randn(b.shape, generator=gen, dtype=F64))
    x = torch.randn(3, 5, 8, generator=gen, dtype=F64, requires_grad=True)
    c = torch.randn(3, 7, 6, generator=gen, dtype=F64, requires_grad=True)
    target = torch.randn(3, 5, 4, generator=gen, dtype=F64)
    loss = ((mha.attend(x, c, causal=True).output - target) ** 2).mean()
    loss.backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None, name
        assert p.grad.shape == p.shape, name
        assert torch.isfinite(p.grad).all(), name
    # Everything except b_K really changes the loss (adding the same vector to every key
    # shifts each score row by a constant, which softmax ignores, so d loss / d b_K = 0).
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_V", "b_O"):
        assert getattr(mha, name).grad.abs().max() > 1e-8, name
    assert mha.b_K.grad.abs().max() < 1e-12
    assert torch.isfinite(x.grad).all() and torch.isfinite(c.grad).all()


def test_attend_gradcheck():
    """Analytic gradients of attend() agree with finite differences (float64)."""
    mha = MultiHeadAttention(6, 2, d_k=2, d_v=3, d_out=4, seed=1, dtype=F64)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=gen, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda inp: mha.attend(inp, causal=True).output, (x,))


def test_forward_does_not_track_gradients():
    mha = MultiHeadAttention(4, 2, seed=0)
    x = torch.randn(3, 4, requires_grad=True)
    trace = mha(x)
    assert isinstance(trace.output, np.ndarray)
    assert all(p.grad is None for p in mha.parameters())


def test_head_mask_must_have_one_value_per_head():
    mha = MultiHeadAttention(8, 2, seed=0)
    with pytest.raises(ValueError, match="one value per head"):
        mha(torch.randn(3, 8), head_mask=torch.ones(1))


def test_a_trace_does_not_change_when_the_layer_is_trained_afterwards():
    mha = MultiHeadAttention(8, 2, seed=0)
    trace = mha(torch.randn(3, 8))
    W_O, b_O = trace.W_O.copy(), trace.b_O.copy()
    with torch.no_grad():
        mha.W_O.add_(1.0)
        mha.b_O.add_(1.0)
    np.testing.assert_array_equal(trace.W_O, W_O)
    np.testing.assert_array_equal(trace.b_O, b_O)


def test_read_only_trace_refuses_writes_and_keeps_its_values() -> None:
    trace = MultiHeadAttention(16, 2, seed=0)(torch.randn(3, 16))
    before = trace.weights.copy()
    assert trace.read_only() is trace
    with pytest.raises(ValueError, match="read-only"):
        trace.weights[0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        trace.W_O[:] = 0.0
    np.testing.assert_array_equal(trace.weights, before)
