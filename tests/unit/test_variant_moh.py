"""Mixture-of-heads attention (MoH, Jin et al. 2024) against its published equations, written out here head by head:

    O_t = sum_i g_i head_i(t) W_O^i + b_O
    g_i = alpha_1 softmax(W_s x_t)_i                 i < h_s (shared heads)
    g_i = alpha_2 softmax(W_r x_t)_i                 routed i whose score is in the top k of W_r x_t (softmax over all
                                                     routed scores, not renormalised over the top k)
    g_i = 0                                          otherwise;      [alpha_1, alpha_2] = softmax(W_h x_t)
    h_s = 0: alpha_2 = 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mha_viz.analysis import without_tokens
from mha_viz.attention import MultiHeadAttention, Variations, attend
from mha_viz.config import MHAConfig
from mha_viz.sources import configurable_trace
from mha_viz.trace import AttentionTrace
from mha_viz.variants import LayerVariant, describe, variant_layer
from mha_viz.variants.mixture import MixtureOfHeads, head_load, load_balance_loss

CASES = [(4, 1, 0), (4, 2, 0), (4, 2, 1), (4, 1, 3), (8, 3, 2), (6, 6, 0)]  # (h, moh_k, moh_shared)


def layer(h: int, k: int, shared: int, d_model: int = 24, seed: int = 3) -> MixtureOfHeads:
    m = variant_layer(MHAConfig(d_model, h), LayerVariant("moh", moh_k=k, moh_shared=shared), seed=seed)
    with torch.no_grad():  # non-zero biases, so the reference must add them where the layer does
        for b in (m.b_Q, m.b_K, m.b_V, m.b_O):
            b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(b.numel())) * 0.1)
    return m


def reference(m: MixtureOfHeads, x: torch.Tensor, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's equations, one token and one head at a time: (output (T, d_out), gates (H, T))."""
    H, d = m.config.num_heads, m.config.d_v
    hs, k = m.moh_shared, m.moh_k
    T = x.shape[0]
    gates = torch.zeros(H, T)
    out = torch.zeros(T, m.config.d_out)
    for t in range(T):
        xt = x[t]
        routed = xt @ m.W_r  # (h_r,)
        p_r = torch.exp(routed) / torch.exp(routed).sum()
        if hs:
            p_s = torch.exp(xt @ m.W_s) / torch.exp(xt @ m.W_s).sum()
            a = torch.exp(xt @ m.W_h) / torch.exp(xt @ m.W_h).sum()
            for i in range(hs):
                gates[i, t] = a[0] * p_s[i]
        alpha2 = a[1] if hs else 1.0
        kth = torch.sort(routed, descending=True).values[k - 1]
        for j in range(H - hs):
            if routed[j] >= kth:
                gates[hs + j, t] = alpha2 * p_r[j]
    for i in range(H):
        q = x @ m.W_Q[i] + m.b_Q[i]
        kk = x @ m.W_K[i] + m.b_K[i]
        v = x @ m.W_V[i] + m.b_V[i]
        s = q @ kk.T / math.sqrt(m.config.d_k)
        if causal:
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        head = torch.softmax(s, dim=-1) @ v  # (T, d_v)
        out += gates[i, :, None] * head @ m.W_O[:, i * d:(i + 1) * d].T
    return out + m.b_O, gates


@pytest.mark.parametrize(("h", "k", "shared"), CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_layer_equals_the_papers_equations(h: int, k: int, shared: int, causal: bool) -> None:
    m = layer(h, k, shared)
    x = torch.randn(7, 24, generator=torch.Generator().manual_seed(h * 10 + k))
    trace = m(x, causal=causal)
    with torch.no_grad():
        out, gates = reference(m, x, causal)
    np.testing.assert_allclose(trace.gates, gates.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.output, out.numpy(), atol=1e-5)
    assert np.abs(trace.gates).max() > 0.05  # the gates are not trivially zero


@pytest.mark.parametrize(("h", "k", "shared"), CASES)
def test_each_token_uses_its_shared_heads_and_exactly_k_routed_heads(h: int, k: int, shared: int) -> None:
    m = layer(h, k, shared)
    trace = m(torch.randn(9, 24, generator=torch.Generator().manual_seed(1)))
    g = trace.gates  # (H, T)
    assert ((g[shared:] != 0).sum(0) == k).all()
    assert (g[:shared] > 0).all()
    np.testing.assert_array_equal(trace.meta["picked"], g != 0)
    assert trace.meta["moh_k"] == k and trace.meta["moh_shared"] == shared
    alpha = trace.meta["router_alpha"]  # (2, T): shared vs routed, summing to 1
    np.testing.assert_allclose(alpha.sum(0), 1, atol=1e-6)
    np.testing.assert_allclose(g[:shared].sum(0), alpha[0], atol=1e-6)  # the shared softmax sums to 1
    assert (g[shared:].sum(0) <= alpha[1] + 1e-6).all()  # top-k of a softmax over all routed heads: not renormalised
    np.testing.assert_allclose(head_load(trace.meta["picked"]).sum(), shared + k, atol=1e-9)


def test_all_routed_heads_and_no_shared_ones_weight_every_head_by_a_softmax() -> None:
    m = layer(4, 4, 0)
    x = torch.randn(6, 24, generator=torch.Generator().manual_seed(2))
    trace = m(x)
    with torch.no_grad():
        expected = torch.softmax(x @ m.W_r, dim=-1).T  # (H, T)
    np.testing.assert_allclose(trace.gates, expected.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.gates.sum(0), 1, atol=1e-6)
    mha = MultiHeadAttention(24, 4)
    mha.load_state_dict(m.state_dict(), strict=False)  # the same weights as classic MHA (no router)
    plain = mha.attend(x)  # same maps, ungated heads
    np.testing.assert_allclose(trace.weights, plain.weights.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.head_outputs, (plain.head_outputs * expected[..., None]).detach().numpy(),
                               atol=1e-6)


@pytest.mark.parametrize(("h", "k", "shared"), CASES)
def test_gated_concat_goes_through_w_o_to_the_output(h: int, k: int, shared: int) -> None:
    trace = configurable_trace("the cat sat on the mat because it was warm", MHAConfig(24, h),
                               variant=LayerVariant("moh", moh_k=k, moh_shared=shared))
    errors = trace.check_wo_path()
    assert max(errors.values()) <= trace.rounding_tolerance(), errors
    d = trace.d_v
    unused = trace.gates == 0  # (H, T): the blocks of the concat a token does not use are zero
    for head in range(h):
        block = trace.concat[:, head * d:(head + 1) * d]  # (T, d_v)
        assert (np.abs(block[unused[head]]).max(initial=0) == 0)
        assert (np.abs(block[~unused[head]]).max(axis=-1) > 0).all()
    assert trace.meta["variant"] == "moh" and trace.meta["moh_k"] == k


def test_attend_gates_scale_each_heads_output_and_keep_head_mask_working() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 5, 4, generator=g), torch.randn(3, 5, 4, generator=g), torch.randn(3, 5, 2, generator=g)
    gates = torch.rand(3, 5, generator=g)
    plain = attend(q, k, v, Variations(scale=0.5))
    gated = attend(q, k, v, Variations(scale=0.5, gates=gates), head_mask=torch.tensor([1.0, 0.0, 2.0]))
    torch.testing.assert_close(gated.weights, plain.weights)  # the maps are not gated
    expected = plain.head_outputs * gates[..., None] * torch.tensor([1.0, 0.0, 2.0])[:, None, None]
    torch.testing.assert_close(gated.head_outputs, expected)
    torch.testing.assert_close(gated.concat, expected.transpose(0, 1).flatten(-2))


def test_gradients_reach_the_router_through_the_gate_values_in_a_batch() -> None:
    m = layer(6, 2, 2)  # two shared heads: with one, softmax(W_s x_t) is 1 and W_s gets no gradient
    x = torch.randn(3, 6, 24, generator=torch.Generator().manual_seed(4))  # (B, T, d_model): training's shape
    a = m.attend(x, causal=True)
    assert a.output.shape == (3, 6, 24)
    (a.output.square().sum() + load_balance_loss(m.route(x), m.moh_shared)).backward()
    for W in (m.W_r, m.W_s, m.W_h, m.W_Q, m.W_O):
        assert W.grad is not None and W.grad.abs().max() > 0
    single = m(x[1], causal=True)  # a batch entry equals the layer on that entry alone
    np.testing.assert_allclose(a.output[1].detach().numpy(), single.output, atol=1e-5)


def test_load_balance_loss_is_the_papers_sum_of_load_times_mean_probability() -> None:
    m = layer(6, 2, 2)
    x = torch.randn(2, 5, 24, generator=torch.Generator().manual_seed(5))
    r = m.route(x)
    probs = torch.softmax(x @ m.W_r, dim=-1).reshape(-1, 4)  # (B*T, h_r)
    top = (x @ m.W_r).topk(2, dim=-1).indices.reshape(-1, 2)
    f = torch.stack([(top == i).any(-1).float().mean() for i in range(4)])
    torch.testing.assert_close(load_balance_loss(r, 2), (f * probs.mean(0)).sum())


def test_router_is_seeded_and_the_trace_holds_gates_of_the_right_shape() -> None:
    cfg, v = MHAConfig(24, 4), LayerVariant("moh", moh_k=2, moh_shared=1)
    a, b, c = (variant_layer(cfg, v, seed=s) for s in (0, 0, 1))
    assert torch.equal(a.W_r, b.W_r) and not torch.equal(a.W_r, c.W_r)
    assert not torch.equal(a.W_r, a.W_Q[0, :, :3])  # its own stream, not a copy of W_Q's
    trace = a(torch.randn(5, 24))
    assert trace.gates.shape == (4, 5) and trace.meta["router_scores"].shape == (4, 5)
    with pytest.raises(ValueError, match="gates"):
        AttentionTrace(("a", "b"), ("a", "b"), np.zeros((4, 2, 2)), gates=np.zeros((4, 3)))
    kept = without_tokens(trace, {"0"})  # hiding a token keeps the gates of the others
    assert kept.gates.shape == (4, 4)


def test_invalid_settings_say_why() -> None:
    with pytest.raises(ValueError, match="moh_k = 5 is more than the 4 routed heads"):
        variant_layer(MHAConfig(24, 4), LayerVariant("moh", moh_k=5))
    with pytest.raises(ValueError, match="moh_shared = 4 leaves no head to route"):
        variant_layer(MHAConfig(24, 4), LayerVariant("moh", moh_k=1, moh_shared=4))
    assert "top 2 of heads 1–3" in describe(MHAConfig(24, 4), LayerVariant("moh", moh_k=2, moh_shared=1))


def test_gates_survive_export_and_import() -> None:
    from mha_viz.export import trace_from_json, trace_from_npz, trace_to_json, trace_to_npz

    trace = configurable_trace("the cat sat on the mat", MHAConfig(24, 4), variant=LayerVariant("moh", moh_k=2))
    for back in (trace_from_npz(trace_to_npz(trace)), trace_from_json(trace_to_json(trace))):
        np.testing.assert_array_equal(back.gates, trace.gates)
        np.testing.assert_array_equal(np.asarray(back.meta["picked"]), trace.meta["picked"])


@pytest.mark.parametrize(("width", "upright"), [(564, True), (1000, False)])
def test_the_load_chart_stands_its_head_labels_upright_when_they_do_not_fit_side_by_side(width: int,
                                                                                        upright: bool) -> None:
    from mha_viz.figures.mixture import load_figure

    fig = load_figure(np.full(8, 0.25), 1, k=2, width=width)
    assert fig.layout.xaxis.tickangle == (-90 if upright else 0)  # never Plotly's own slant into the y axis' labels
