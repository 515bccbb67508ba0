"""Differential attention (variant "diff"): equal to transformers' DiffLlamaAttention with the same weights, its
trace's properties, and the common-mode measure that says what the subtraction cancels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import DiffLlamaConfig
from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention

from mha_viz.analysis.differential import common_mode, first_token_demo
from mha_viz.config import MHAConfig
from mha_viz.sources import configurable_trace
from mha_viz.variants import LayerVariant, describe, variant_layer
from mha_viz.variants.differential import DifferentialAttention, lambda_init

DIFF = LayerVariant("diff")


def reference(layer: DifferentialAttention) -> DiffLlamaAttention:
    """DiffLlamaAttention (eager, layer 0) with the layer's weights copied in."""
    cfg = layer.config
    config = DiffLlamaConfig(hidden_size=cfg.d_model, num_attention_heads=cfg.num_heads,
                             num_key_value_heads=cfg.num_heads, head_dim=cfg.d_k, attention_bias=cfg.bias,
                             intermediate_size=16, num_hidden_layers=1, vocab_size=16)
    config._attn_implementation = "eager"
    ref = DiffLlamaAttention(config, layer_idx=0).eval()
    H, d = cfg.num_heads, cfg.d_k
    with torch.no_grad():
        for proj, W, b in ((ref.q_proj, layer.W_Q, layer.b_Q), (ref.k_proj, layer.W_K, layer.b_K),
                           (ref.v_proj, layer.W_V, layer.b_V)):
            proj.weight.copy_(W.transpose(1, 2).reshape(H * d, cfg.d_model))  # row h*d + i: W[h][:, i]
            proj.bias.copy_(b.reshape(-1))
        ref.o_proj.weight.copy_(layer.W_O)
        ref.o_proj.bias.copy_(layer.b_O)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            getattr(ref, name).copy_(getattr(layer, name))
    return ref


def run_reference(ref: DiffLlamaAttention, x: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Its output (T, d_model) and its softmax maps (H, T, T), rotary neutralised (cos = 1, sin = 0)."""
    T = x.shape[0]
    d = ref.head_dim
    identity = (torch.ones(1, T, d), torch.zeros(1, T, d))
    mask = torch.zeros(1, 1, T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    with torch.no_grad():
        out, maps = ref(x[None], identity, attention_mask=mask if causal else None)
    return out[0], maps[0]


@pytest.fixture(scope="module")
def layer() -> DifferentialAttention:
    layer = variant_layer(MHAConfig(32, 4), DIFF, seed=3)
    with torch.no_grad():  # non-zero biases and a lambda away from lambda_init: every term counts
        for b in (layer.b_Q, layer.b_K, layer.b_V, layer.b_O):
            b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(b.numel())) * 0.3)
        layer.lambda_q1.mul_(4.0)
        layer.lambda_k1.mul_(4.0)
    return layer


@pytest.mark.parametrize("causal", [False, True])
def test_equal_to_diffllama_attention(layer: DifferentialAttention, causal: bool) -> None:
    x = torch.randn(7, 32, generator=torch.Generator().manual_seed(1))
    out, maps = run_reference(reference(layer), x, causal)
    trace = layer(x, causal=causal)
    assert np.allclose(trace.output, out.numpy(), atol=1e-5)
    assert np.allclose(trace.maps.reshape(4, 7, 7), maps.numpy(), atol=1e-6)  # heads i and i + h/2: maps[0], maps[1]
    with torch.no_grad():
        lam = (reference(layer).lambda_init + math.exp(float(layer.lambda_q1 @ layer.lambda_k1))
               - math.exp(float(layer.lambda_q2 @ layer.lambda_k2)))
    assert np.allclose(trace.lambdas, lam) and abs(lam - 0.2) > 0.01


def test_differs_from_diffllama_when_the_math_changes(layer: DifferentialAttention) -> None:
    """The comparison above can fail: the wrong lambda sign, or no head norm, gives another output."""
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(2))
    out, _ = run_reference(reference(layer), x, False)
    with torch.no_grad():
        a = layer.attend(x)
        assert np.allclose(a.output.numpy(), out.numpy(), atol=1e-5)
        first, second = a.scores.softmax(-1).chunk(2, dim=-3)  # (2, 5, 5) each
        values = torch.cat(layer.project_kv(x)[1].chunk(2, dim=-3), dim=-1)  # (2, 5, 2 d_v)
        lam = layer.lambda_full()
        for heads in (layer.head_norm((first + lam * second) @ values),  # + lambda instead of -
                      (first - lam * second) @ values):  # no head norm
            changed = heads.transpose(0, 1).reshape(5, -1) @ layer.W_O.T + layer.b_O
            assert not np.allclose(changed.numpy(), out.numpy(), atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_trace_properties(causal: bool) -> None:
    trace = configurable_trace("the cat sat on the mat today", MHAConfig(64, 8), variant=DIFF, causal=causal)
    n, T, S = trace.weights.shape
    assert (n, T, S) == (4, 7, 7) and trace.maps.shape == trace.map_scores.shape == (2, 4, 7, 7)
    lam = trace.lambdas[:, None, None]
    assert np.allclose(trace.weights, trace.maps[0] - lam * trace.maps[1], atol=1e-6)
    assert np.allclose(trace.weights.sum(-1), 1 - trace.lambdas[:, None], atol=1e-5)  # rows sum to 1 - lambda
    assert (trace.weights < 0).any()  # signed
    assert np.allclose(trace.output, trace.concat @ trace.W_O.T + trace.b_O, atol=1e-5)
    assert trace.values.shape == (4, 7, 16) and trace.head_outputs.shape == (4, 7, 16) and trace.concat.shape == (7, 64)
    assert np.allclose(trace.concat, np.concatenate(list(trace.head_outputs), axis=-1))
    assert np.allclose(trace.scores, trace.map_scores[0]) and trace.queries.shape == (4, 7, 8)
    # the norm: (1 - lambda_init) RMSNorm(weights @ values), so each head's output row has RMS 1 - 0.2
    mixed = trace.weights @ trace.values  # (4, T, 16)
    rms = np.sqrt((trace.head_outputs ** 2).mean(-1))
    assert np.allclose(rms, 0.8, atol=1e-3) and not np.allclose(mixed, trace.head_outputs, atol=1e-3)
    if causal:
        assert np.allclose(np.triu(trace.maps[0, 0], 1), 0)
    assert trace.meta["variant"] == "diff"


@pytest.mark.parametrize("causal", [False, True])
def test_the_map_trace_is_each_map_a_softmax_head_as_diffllamas_query_heads(layer: DifferentialAttention,
                                                                            causal: bool) -> None:
    """map_trace: the h maps, head i + h/2 differential head i's second map, are DiffLlamaAttention's own softmax
    maps of query heads i and i + h/2, each row summing to 1; its scores are the trace's map_scores."""
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(5))
    maps = layer.map_trace(x, causal=causal)
    trace = layer(x, causal=causal)
    _, own = run_reference(reference(layer), x, causal)
    assert maps.weights.shape == (4, 6, 6) and maps.maps is None and maps.values is None
    np.testing.assert_allclose(maps.weights, own.numpy(), atol=1e-6)
    np.testing.assert_allclose(maps.weights.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(maps.scores, trace.map_scores.reshape(4, 6, 6))
    np.testing.assert_array_equal(maps.queries[:2], trace.queries)
    np.testing.assert_allclose(maps.weights[:2] - trace.lambdas[0] * maps.weights[2:], trace.weights, atol=1e-6)


def test_lambda_init_and_seeded_lambda_vectors() -> None:
    assert lambda_init(0) == pytest.approx(0.2) and lambda_init(10) == pytest.approx(0.8 - 0.6 * math.exp(-3))
    a, b = (variant_layer(MHAConfig(64, 4), DIFF, seed=5) for _ in range(2))
    c = variant_layer(MHAConfig(64, 4), DIFF, seed=6)
    assert torch.equal(a.lambda_q1, b.lambda_q1) and not torch.equal(a.lambda_q1, c.lambda_q1)
    assert a.lambda_q1.shape == (16,) and 0.02 < a.lambda_q1.detach().std().item() < 0.3
    assert a.lambda_full().item() == pytest.approx(0.2, abs=0.1)


def test_odd_heads_and_head_mask() -> None:
    with pytest.raises(ValueError, match="h must be even"):
        variant_layer(MHAConfig(63, 3), DIFF)
    with pytest.raises(ValueError, match="h must be even"):
        describe(MHAConfig(63, 3), DIFF)
    layer = variant_layer(MHAConfig(64, 4), DIFF, seed=0)
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0))
    masked = layer(x, head_mask=torch.tensor([1.0, 0.0]))
    assert np.allclose(masked.concat[:, 32:], 0) and not np.allclose(masked.concat[:, :32], 0)
    assert "2 differential heads" in describe(MHAConfig(64, 4), DIFF)


def test_attend_is_differentiable_with_batches() -> None:
    layer = variant_layer(MHAConfig(32, 4), DIFF, seed=0)
    x = torch.randn(3, 5, 32, requires_grad=True)
    out = layer.attend(x, causal=True)
    assert out.output.shape == (3, 5, 32) and out.weights.shape == (3, 2, 5, 5)
    out.output.sum().backward()
    assert layer.lambda_q1.grad is not None and layer.lambda_q1.grad.abs().sum() > 0


def test_the_difference_cancels_the_shared_first_token() -> None:
    trace = first_token_demo(tokens=6, lam=0.8, sink=0.8)
    m1, m2 = trace.maps[:, 0]
    assert m1[:, 0] == pytest.approx(0.8, abs=1e-4) and m2[:, 0] == pytest.approx(1.0, abs=1e-4)
    assert trace.weights[0, :, 0] == pytest.approx(0.0, abs=1e-4)  # the shared first token is gone
    assert trace.weights[0, :, -1] == pytest.approx(0.2, abs=1e-4)  # the signal stays
    cm = common_mode(trace)
    assert cm.common[0] == pytest.approx(0.8, abs=1e-4) and cm.kept[0] == pytest.approx(0.2, abs=1e-4)
    assert cm.common_keys[0, 0] == pytest.approx(0.8, abs=1e-4) and cm.common_keys[0, -1] == pytest.approx(0, abs=1e-6)
    smaller = common_mode(first_token_demo(tokens=6, lam=0.4, sink=0.8))  # lambda below the shared mass: some stays
    assert smaller.common[0] == pytest.approx(0.4, abs=1e-4) and smaller.weight_keys[0, 0] == pytest.approx(0.4, abs=1e-4)


def test_common_mode_identities_on_random_layers() -> None:
    trace = configurable_trace("a b c d e f g h", MHAConfig(64, 8), variant=DIFF, causal=True, seed=4)
    cm = common_mode(trace)
    m1, m2 = trace.maps
    expected = np.minimum(m1, trace.lambdas[:, None, None] * m2).sum(-1).mean(-1)
    assert np.allclose(cm.common, expected) and (cm.common > 0).all()
    assert np.allclose(cm.kept, 1 - cm.common, atol=1e-5)
    assert np.allclose(cm.negative, cm.lambdas - cm.common, atol=1e-5)
    assert np.allclose(cm.weight_keys.sum(-1), 1 - cm.lambdas, atol=1e-5)
    with pytest.raises(ValueError, match="not differential"):
        common_mode(configurable_trace("a b c", MHAConfig(64, 8)))


def test_figures_draw_the_maps_signed_and_the_common_mode() -> None:
    from mha_viz.figures.differential import cancelled_keys_figure, common_mode_figure, two_maps_figure

    trace = first_token_demo(tokens=5)
    fig = two_maps_figure(trace, 0)
    first, scaled, diff = (np.asarray(t.z) for t in fig.data)
    assert np.allclose(first, trace.maps[0, 0]) and np.allclose(scaled, 0.8 * trace.maps[1, 0], atol=1e-6)
    assert np.allclose(diff, first - scaled, atol=1e-6) and np.allclose(diff[:, 0], 0, atol=1e-4)
    axis = fig.layout.coloraxis
    assert axis.cmin == -axis.cmax and axis.cmax == pytest.approx(np.abs(fig.data[0].z).max())
    assert axis.colorscale != heads_colours()
    cm = common_mode(trace)
    bars = common_mode_figure(cm).data
    assert np.allclose(bars[0].y, cm.common) and np.allclose(bars[1].y, cm.kept) and np.allclose(bars[2].y, -cm.negative)
    keys = cancelled_keys_figure(cm, 0, trace.key_tokens).data
    assert np.allclose(keys[1].y, cm.common_keys[0]) and list(keys[0].x) == list(range(5))
    with pytest.raises(ValueError, match="no head 1"):
        two_maps_figure(trace, 1)
    with pytest.raises(ValueError, match="not differential"):
        two_maps_figure(configurable_trace("a b c", MHAConfig(64, 8)), 0)


@pytest.mark.parametrize("width", [358, 564])
def test_a_narrow_common_mode_chart_keeps_room_for_its_wrapped_legend(width: int) -> None:
    from mha_viz.figures.common import lines_px
    from mha_viz.figures.differential import common_mode_figure

    fig = common_mode_figure(common_mode(first_token_demo(tokens=5)), width=width)
    rows = 3 if width < 400 else 2  # "cancelled: both maps on the same keys" alone takes ~300 px of a row
    assert fig.layout.margin.t - lines_px(fig.layout.title.text) >= 28 * rows


def heads_colours() -> tuple:
    """The colour scale of ordinary (softmax, unsigned) heatmaps."""
    from mha_viz.figures import heads_figure

    return heads_figure(configurable_trace("a b c", MHAConfig(64, 8))).layout.coloraxis.colorscale
