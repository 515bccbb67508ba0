"""Parameter and FLOP counts against arithmetic and against the real module."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_viz import MHAConfig, MultiHeadAttention, full_width_head, layer_cost

STANDARD = [(64, 1), (64, 8), (512, 8), (48, 6), (12, 4), (7, 7), (30, 5), (1, 1)]


@pytest.mark.parametrize("d_model,H", STANDARD)
def test_standard_layer_has_4_d_model_squared_weights(d_model, H):
    cfg = MHAConfig(d_model, H)
    cost = layer_cost(cfg, T=5)
    assert cost.weight_count == 4 * d_model**2
    # each of W_Q, W_K, W_V, W_O is d_model x d_model in total, whatever H is
    assert cost.weights == {name: d_model**2 for name in ("W_Q", "W_K", "W_V", "W_O")}
    assert cost.bias_count == 4 * d_model
    assert cost.params == 4 * d_model**2 + 4 * d_model
    no_bias = layer_cost(MHAConfig(d_model, H, bias=False), T=5)
    assert no_bias.bias_count == 0 and no_bias.biases == {}
    assert no_bias.params == 4 * d_model**2


@pytest.mark.parametrize("d_model,H", STANDARD)
def test_full_width_head_costs_the_same(d_model, H):
    cfg = MHAConfig(d_model, H)
    one = full_width_head(cfg)
    assert one.num_heads == 1
    assert one.d_k == one.d_v == d_model == H * cfg.d_k
    assert (one.d_out, one.d_context, one.bias) == (cfg.d_out, cfg.d_context, cfg.bias)
    assert layer_cost(one, 9).weight_count == layer_cost(cfg, 9).weight_count == 4 * d_model**2
    assert layer_cost(one, 9).params == layer_cost(cfg, 9).params
    # the projections cost the same; only the score computation is split differently
    a, b = layer_cost(cfg, 9).flops, layer_cost(one, 9).flops
    for name in ("Q = X W_Q", "K = X W_K", "V = X W_V", "Q K^T", "weights @ V", "concat @ W_O^T"):
        assert a[name] == b[name], name
    # softmax runs over H score matrices instead of one
    assert a["softmax"] == H * b["softmax"]


@pytest.mark.parametrize("d_model,H", STANDARD)
@pytest.mark.parametrize("bias", [True, False])
def test_standard_counts_match_torch_module(d_model, H, bias):
    m = nn.MultiheadAttention(d_model, H, bias=bias)
    assert layer_cost(MHAConfig(d_model, H, bias=bias), 3).params == sum(p.numel() for p in m.parameters())


GENERAL = [
    dict(d_model=10, num_heads=4, d_k=3, d_v=6, d_out=11),
    dict(d_model=8, num_heads=2, d_k=7, d_v=3, d_out=5, d_context=6),
    dict(d_model=16, num_heads=5, d_k=2, d_v=9, d_out=4, d_context=13),
    dict(d_model=6, num_heads=3),
    dict(d_model=6, num_heads=3, d_context=2),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kw", GENERAL)
def test_counts_match_module_parameters(kw, bias):
    mha = MultiHeadAttention(**kw, bias=bias)
    cost = layer_cost(mha.config, T=4, S=6)
    params = dict(mha.named_parameters())
    assert cost.params == sum(p.numel() for p in mha.parameters())
    assert cost.weights == {name: params[name].numel() for name in ("W_Q", "W_K", "W_V", "W_O")}
    assert cost.biases == ({name: params[name].numel() for name in ("b_Q", "b_K", "b_V", "b_O")} if bias else {})


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 20), st.integers(1, 8), st.integers(1, 20), st.integers(1, 20),
    st.integers(1, 20), st.integers(1, 20), st.booleans(),
)
def test_counts_match_module_parameters_property(d_model, H, d_k, d_v, d_out, d_context, bias):
    mha = MultiHeadAttention(d_model, H, d_k=d_k, d_v=d_v, d_out=d_out, d_context=d_context, bias=bias)
    assert layer_cost(mha.config, 3).params == sum(p.numel() for p in mha.parameters())


def test_flops_by_arithmetic():
    # d_model=8, H=2 -> d_k=d_v=4; T=3, S=5 (cross, d_context=6). A multiply-add is 2 FLOPs.
    cfg = MHAConfig(8, 2, d_context=6)
    f = layer_cost(cfg, T=3, S=5).flops
    assert f["Q = X W_Q"] == 2 * 3 * 8 * 8  # (3 x 8) @ (8 x 8)
    assert f["K = C W_K"] == 2 * 5 * 6 * 8  # (5 x 6) @ (6 x 8)
    assert f["V = C W_V"] == 2 * 5 * 6 * 8
    assert f["Q K^T"] == 2 * (2 * 3 * 5 * 4)  # per head (3 x 4) @ (4 x 5)
    assert f["weights @ V"] == 2 * (2 * 3 * 5 * 4)  # per head (3 x 5) @ (5 x 4)
    assert f["softmax"] == 5 * 2 * 3 * 5  # 5 per score, 2 * 3 * 5 scores
    assert f["concat @ W_O^T"] == 2 * 3 * 8 * 8  # (3 x 8) @ (8 x 8)
    assert layer_cost(cfg, 3, 5).total_flops == sum(f.values())


def test_scores_flops_scale_with_T_times_S():
    cfg = MHAConfig(12, 3, d_k=5, d_v=7, d_out=9, d_context=4)
    base = layer_cost(cfg, T=4, S=6).flops
    for a, b in [(2, 1), (1, 3), (5, 7)]:
        f = layer_cost(cfg, T=4 * a, S=6 * b).flops
        for name in ("Q K^T", "softmax", "weights @ V"):
            assert f[name] == a * b * base[name], name
        # projections are linear in the side they read
        assert f["Q = X W_Q"] == a * base["Q = X W_Q"]
        assert f["K = C W_K"] == b * base["K = C W_K"]
        assert f["V = C W_V"] == b * base["V = C W_V"]
        assert f["concat @ W_O^T"] == a * base["concat @ W_O^T"]


def test_self_attention_default_S_equals_T():
    cfg = MHAConfig(16, 4)
    assert layer_cost(cfg, 7) == layer_cost(cfg, 7, 7)


def test_flops_match_operation_shapes():
    """Count multiply-adds from the actual trace shapes of a run and compare."""
    mha = MultiHeadAttention(10, 2, d_k=3, d_v=4, d_out=6, d_context=5, seed=0)
    T, S = 4, 7
    t = mha(torch.randn(T, 10), torch.randn(S, 5))
    d_k = t.d_k
    f = layer_cost(mha.config, T, S).flops
    assert f["Q K^T"] == 2 * t.scores.size * d_k  # each score is a d_k-long dot product
    assert f["weights @ V"] == 2 * t.head_outputs.size * S  # each output entry sums S terms
    assert f["concat @ W_O^T"] == 2 * t.output.size * t.concat.shape[1]
    assert f["Q = X W_Q"] == 2 * t.queries.size * 10
    assert f["K = C W_K"] == 2 * t.keys.size * 5
    assert f["V = C W_V"] == 2 * t.values.size * 5
    assert f["softmax"] == 5 * t.weights.size


def test_flop_rows_name_the_key_input_as_the_formulas_do():
    """X is the query-side input; the key/value side is X in self-attention and C in cross-attention."""
    cfg = MHAConfig(8, 2)
    assert {"Q = X W_Q", "K = X W_K", "V = X W_V"} <= set(layer_cost(cfg, 4).flops)
    assert {"Q = X W_Q", "K = C W_K", "V = C W_V"} <= set(layer_cost(cfg, 4, 4, cross=True).flops)
    assert "K = C W_K" in layer_cost(cfg, 4, 6).flops  # another length: another sequence
