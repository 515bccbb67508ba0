"""Grouped-query and multi-query attention in the configurable layer (MultiHeadAttention(kv_heads=G)).

Checked against torch's own grouped-query kernel, scaled_dot_product_attention(enable_gqa=True), on the same
projections; MHA (G = H) against the layer as it is without kv_heads; invalid G refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_viz import MultiHeadAttention
from mha_viz.config import MHAConfig, divisors, nearest_divisor
from mha_viz.cost import layer_cost
from mha_viz.sources import configurable_trace

F64 = torch.float64
TOL = 1e-10


def _random_biases(mha: MultiHeadAttention, seed: int) -> None:
    """Non-zero biases, so that a bias repeated to the wrong head would show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for b in (mha.b_Q, mha.b_K, mha.b_V, mha.b_O):
            b.copy_(torch.randn(b.shape, generator=gen, dtype=b.dtype))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("H, G", [(8, 2), (8, 1), (6, 3), (4, 4), (12, 4)])
def test_gqa_equals_torch_sdpa_with_enable_gqa(H: int, G: int, causal: bool) -> None:
    torch.manual_seed(H * 10 + G)
    mha = MultiHeadAttention(48, H, kv_heads=G, seed=H + G, dtype=F64)
    _random_biases(mha, H + G)
    x = torch.randn(7, 48, dtype=F64)
    t = mha(x, causal=causal)
    # The same projections, K and V on G heads only, then torch's grouped-query attention.
    with torch.no_grad():
        q = mha._project(x, mha.W_Q, mha.b_Q)  # (H, T, d_k)
        k = mha._project(x, mha.W_K, mha.b_K)  # (G, T, d_k)
        v = mha._project(x, mha.W_V, mha.b_V)  # (G, T, d_v)
        ref = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal, enable_gqa=True)[0]
        out = ref.transpose(0, 1).flatten(1) @ mha.W_O.T + mha.b_O  # (T, d_out)
    assert k.shape[0] == v.shape[0] == G
    assert np.abs(t.head_outputs - ref.numpy()).max() < TOL  # (H, T, d_v)
    assert np.abs(t.output - out.numpy()).max() < TOL
    # The trace holds keys and values per query head: query head h reads K/V head h // (H / G).
    group = H // G
    assert t.keys.shape[0] == t.values.shape[0] == H
    for h in range(H):
        assert np.array_equal(t.keys[h], k[h // group].numpy())
        assert np.array_equal(t.values[h], v[h // group].numpy())
        assert np.array_equal(t.W_K[h], mha.W_K[h // group].detach().numpy())
        assert np.array_equal(t.W_V[h], mha.W_V[h // group].detach().numpy())
        assert np.array_equal(t.b_V[h], mha.b_V[h // group].detach().numpy())
    assert t.kv_heads == (None if G == H else tuple(h // group for h in range(H)))


def test_gqa_cross_attention_equals_torch_sdpa() -> None:
    mha = MultiHeadAttention(32, 8, d_context=24, kv_heads=2, seed=3, dtype=F64)
    _random_biases(mha, 3)
    x, c = torch.randn(5, 32, dtype=F64), torch.randn(9, 24, dtype=F64)
    t = mha(x, c)
    with torch.no_grad():
        q = mha._project(x, mha.W_Q, mha.b_Q)
        k, v = mha._project(c, mha.W_K, mha.b_K), mha._project(c, mha.W_V, mha.b_V)
        ref = F.scaled_dot_product_attention(q[None], k[None], v[None], enable_gqa=True)[0]
    assert np.abs(t.head_outputs - ref.numpy()).max() < TOL


def test_mqa_keys_and_values_are_the_same_for_every_head() -> None:
    t = MultiHeadAttention(64, 8, kv_heads=1, seed=0)(torch.randn(6, 64))
    assert t.kv_heads == (0,) * 8
    for h in range(1, 8):
        assert np.array_equal(t.keys[h], t.keys[0]) and np.array_equal(t.values[h], t.values[0])
    assert not np.array_equal(t.queries[1], t.queries[0])  # queries stay per head
    assert not np.allclose(t.weights[1], t.weights[0])  # so do the maps


def test_groups_share_keys_and_groups_differ() -> None:
    t = MultiHeadAttention(64, 8, kv_heads=2, seed=0)(torch.randn(6, 64))
    assert t.kv_heads == (0, 0, 0, 0, 1, 1, 1, 1)
    assert all(np.array_equal(t.keys[h], t.keys[0]) for h in range(4))
    assert all(np.array_equal(t.keys[h], t.keys[4]) for h in range(4, 8))
    assert not np.allclose(t.keys[0], t.keys[4])


@pytest.mark.parametrize("causal", [False, True])
def test_kv_heads_equal_to_h_is_todays_mha_bit_for_bit(causal: bool) -> None:
    x = torch.randn(7, 64)
    a = MultiHeadAttention(64, 4, seed=5)(x, causal=causal)
    b = MultiHeadAttention(64, 4, kv_heads=4, seed=5)(x, causal=causal)
    for name in ("queries", "keys", "values", "scores", "weights", "head_outputs", "concat", "output", "W_K", "W_V"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.kv_heads is b.kv_heads is None


@pytest.mark.parametrize("G", [0, 3, 5, 16, -2])
def test_kv_heads_not_dividing_h_raises(G: int) -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        MultiHeadAttention(64, 8, kv_heads=G)
    with pytest.raises(ValueError, match="kv_heads"):
        MHAConfig(64, 8, kv_heads=G)


def test_invalid_kv_heads_message_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="Valid kv_heads: 1, 2, 4, 8"):
        MHAConfig(64, 8, kv_heads=3)


def test_divisors_and_nearest_divisor() -> None:
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert nearest_divisor(8, 3) == 4 and nearest_divisor(8, 5) == 4 and nearest_divisor(8, 7) == 8
    assert nearest_divisor(12, 5) == 6 and nearest_divisor(8, 99) == 8


@pytest.mark.parametrize("H, G", [(8, 1), (8, 2), (8, 8), (6, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_cost_counts_match_module_parameters(H: int, G: int, bias: bool) -> None:
    cfg = MHAConfig(48, H, kv_heads=G, bias=bias)
    mha = MultiHeadAttention(48, H, kv_heads=G, bias=bias)
    cost = layer_cost(cfg, 5)
    assert cost.params == sum(p.numel() for p in mha.parameters())
    assert cost.weights["W_K"] == G * 48 * (48 // H)
    assert cost.flops["K = X W_K"] == 2 * 5 * 48 * G * (48 // H)


def test_configurable_trace_passes_kv_heads() -> None:
    t = configurable_trace("the cat sat on the mat", MHAConfig(64, 8, kv_heads=2), seed=1, causal=True)
    assert t.kv_heads == (0, 0, 0, 0, 1, 1, 1, 1)
    assert np.array_equal(t.keys[3], t.keys[0]) and not np.allclose(t.keys[4], t.keys[0])


def test_long_trace_of_a_gqa_layer_equals_the_full_trace() -> None:
    from mha_viz.long import long_trace

    mha = MultiHeadAttention(32, 8, kv_heads=2, seed=4)
    x = torch.randn(40, 32)
    full, long = mha(x, causal=True), long_trace(mha, x, causal=True, query_tokens=[str(i) for i in range(40)])
    assert long.kv_heads == full.kv_heads == (0, 0, 0, 0, 1, 1, 1, 1)
    assert np.array_equal(long.keys, full.keys) and np.allclose(long.output, full.output, atol=1e-6)
    assert np.allclose(long.scores(slice(0, 40), slice(0, 40)), full.scores, atol=1e-5)


def test_formulas_name_the_kv_head_each_query_head_reads() -> None:
    from mha_viz.formulas import formulas

    gqa = " ".join(formulas(MHAConfig(64, 8, kv_heads=2), 5))
    assert r"Q_h K_{g(h)}^\top" in gqa and r"g(h) = \lfloor h / 4 \rfloor \in \{0, 1\}" in gqa
    assert "4\\, d_{model}^2" not in gqa  # W_K and W_V are smaller: no longer 4 d_model^2 weights
    mha = " ".join(formulas(MHAConfig(64, 8), 5))
    assert r"Q_h K_h^\top" in mha and "g(h)" not in mha
