"""The sliding-window variant with sinks: equal to transformers' GptOssAttention, and its masks written out."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from mha_viz.analysis.reach import reach, reach_back, reach_counts, window_visibility
from mha_viz.config import MHAConfig
from mha_viz.sources import configurable_trace
from mha_viz.variants import SINK_TOKENS, LayerVariant, describe, variant_layer
from mha_viz.variants.window import WindowAttention

D, H, T = 16, 4, 9


def layer(window: int, sinks: str, seed: int = 3, bias: bool = True) -> WindowAttention:
    m = variant_layer(MHAConfig(D, H, bias=bias), LayerVariant("window", window=window, sinks=sinks), seed=seed)
    assert isinstance(m, WindowAttention)
    with torch.no_grad():  # nonzero biases, so that the test reads them too
        gen = torch.Generator().manual_seed(seed + 10)
        for b in (m.b_Q, m.b_K, m.b_V, m.b_O):
            if b is not None:
                b.copy_(torch.randn(b.shape, generator=gen) * 0.3)
    return m


def inputs(n: int = T, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, D, generator=torch.Generator().manual_seed(seed))


def gpt_oss(ours: WindowAttention, window: int, layer_type: str):
    """transformers' GptOssAttention (eager) with our weights, its mask built by transformers' masking utils."""
    import transformers as tf
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    cfg = tf.GptOssConfig(vocab_size=10, hidden_size=D, num_attention_heads=H, num_key_value_heads=H, head_dim=D // H,
                          sliding_window=window, layer_types=["sliding_attention", "full_attention"],
                          num_hidden_layers=2, attention_bias=True, num_local_experts=2, num_experts_per_tok=1,
                          intermediate_size=8)
    cfg._attn_implementation = "eager"
    ref = GptOssAttention(cfg, layer_idx=["sliding_attention", "full_attention"].index(layer_type)).eval()
    d = D // H
    with torch.no_grad():
        for proj, W, b in ((ref.q_proj, ours.W_Q, ours.b_Q), (ref.k_proj, ours.W_K, ours.b_K),
                           (ref.v_proj, ours.W_V, ours.b_V)):
            proj.weight.copy_(W.transpose(1, 2).reshape(H * d, D))  # rows h*d:(h+1)*d are head h's
            proj.bias.copy_(b.reshape(H * d))
        ref.o_proj.weight.copy_(ours.W_O)
        ref.o_proj.bias.copy_(ours.b_O)
        ref.sinks.copy_(ours.sinks)
    make = create_sliding_window_causal_mask if layer_type == "sliding_attention" else create_causal_mask
    cache = "cache" if "cache" in inspect.signature(make).parameters else "past_key_values"  # before transformers 5.24

    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[0]
        mask = make(config=cfg, inputs_embeds=x[None], attention_mask=None, position_ids=torch.arange(n)[None],
                    **{cache: None})
        identity = (torch.ones(1, n, d // 2), torch.zeros(1, n, d // 2))  # rotary by angle 0: no positions
        with torch.no_grad():
            out, weights = ref(x[None], position_embeddings=identity, attention_mask=mask)
        return out[0], weights[0]

    return run


@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_sliding_layer_with_sink_logits_equals_gpt_oss(window: int) -> None:
    ours, x = layer(window, "logit"), inputs()
    out, weights = gpt_oss(ours, window, "sliding_attention")(x)
    trace = ours(x, causal=True)
    np.testing.assert_allclose(trace.weights, weights.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.output, out.numpy(), atol=1e-5)
    np.testing.assert_allclose(trace.sinks, ours.sinks.detach().numpy())
    assert trace.meta["window"] == window and trace.meta["sink_tokens"] == 0
    assert (trace.sink_mass > 0).all()  # every row gives some mass to its sink


def test_full_layer_equals_gpt_oss_when_the_window_covers_the_input() -> None:
    ours, x = layer(T, "logit"), inputs()
    out, weights = gpt_oss(ours, 2, "full_attention")(x)  # a full-attention layer ignores sliding_window
    trace = ours(x, causal=True)
    np.testing.assert_allclose(trace.weights, weights.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.output, out.numpy(), atol=1e-5)


def test_sink_mass_is_softmax_of_the_sink_beside_the_visible_scores() -> None:
    ours, x = layer(3, "logit"), inputs()
    trace = ours(x, causal=True)
    sink = trace.sinks[:, None]  # (H, 1)
    visible = np.isfinite(trace.scores)  # (H, T, S)
    top = np.maximum(np.where(visible, trace.scores, -np.inf).max(-1), sink)  # (H, T)
    denominator = np.where(visible, np.exp(trace.scores - top[..., None]), 0).sum(-1) + np.exp(sink - top)  # (H, T)
    np.testing.assert_allclose(trace.sink_mass, np.exp(sink - top) / denominator, atol=1e-6)
    np.testing.assert_allclose(trace.sink_mass, 1 - trace.weights.sum(-1), atol=1e-7)
    assert trace.sink_mass.min() > 1e-3 and trace.weights.sum(-1).max() < 0.999


@pytest.mark.parametrize("causal", [False, True])
def test_rows_without_sinks_sum_to_one_and_stay_in_the_window(causal: bool) -> None:
    trace = layer(3, "none")(inputs(), causal=causal)
    assert trace.sinks is None and trace.sink_mass is None
    np.testing.assert_allclose(trace.weights.sum(-1), 1, atol=1e-6)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    hidden = (np.abs(i - j) >= 3) | ((j > i) if causal else False)
    assert (trace.weights[:, hidden] == 0).all() and (trace.weights[:, ~hidden] > 0).all()


def test_sink_tokens_keep_the_first_four_keys_visible() -> None:
    assert SINK_TOKENS == 4
    expected = np.array([  # window 2, causal, T = 7: the diagonal, the one before it, and keys 0-3 up to i
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 0, 1, 1],
    ], dtype=bool)
    trace = layer(2, "tokens")(inputs(7), causal=True)
    assert ((trace.weights > 0) == expected).all(axis=(1, 2)).all()
    np.testing.assert_allclose(trace.weights.sum(-1), 1, atol=1e-6)
    assert trace.sinks is None and trace.meta["sink_tokens"] == 4
    bidirectional = layer(2, "tokens")(inputs(7), causal=False).weights[0] > 0
    assert bidirectional[0].tolist() == [1, 1, 1, 1, 0, 0, 0] and bidirectional[6].tolist() == [1, 1, 1, 1, 0, 1, 1]


def test_window_one_causal_sees_only_itself() -> None:
    for sinks in ("none", "tokens"):
        trace = layer(1, sinks)(inputs(), causal=True)
        expected = np.eye(T) if sinks == "none" else None
        if expected is not None:
            np.testing.assert_allclose(trace.weights, np.broadcast_to(expected, trace.weights.shape), atol=1e-7)
            np.testing.assert_allclose(trace.head_outputs, trace.values, atol=1e-6)  # each head copies its own value
    logit = layer(1, "logit")(inputs(), causal=True)  # the one key shares its row with the sink
    off = ~np.eye(T, dtype=bool)
    assert (logit.weights[:, off] == 0).all()
    np.testing.assert_allclose(np.einsum("hii->hi", logit.weights), 1 - logit.sink_mass, atol=1e-7)


def test_the_math_is_the_window_not_plain_attention() -> None:
    x = inputs()
    windowed = layer(2, "none")(x).weights
    full = layer(T, "none")(x).weights  # a window as long as the input is plain multi-head attention
    plain = variant_layer(MHAConfig(D, H), LayerVariant("mha"), seed=3)
    with torch.no_grad():
        for name in ("b_Q", "b_K", "b_V", "b_O"):
            getattr(plain, name).copy_(getattr(layer(T, "none"), name))
    np.testing.assert_allclose(full, plain(x).weights, atol=1e-6)
    assert np.abs(windowed - full).max() > 0.05


def test_attend_is_differentiable_and_batched() -> None:
    m = layer(3, "logit")
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(1))
    t = m.attend(x, causal=True)
    t.output.sum().backward()
    assert m.sinks.grad is not None and m.sinks.grad.abs().sum() > 0
    assert t.weights.shape == (2, H, 5, 5)


def test_cross_attention_past_the_context_attends_to_nothing() -> None:
    m = layer(2, "none")
    trace = m(inputs(6), inputs(2, seed=1))
    assert not np.isnan(trace.weights).any() and not np.isnan(trace.output).any()
    assert (trace.weights[:, 3:] == 0).all() and (trace.head_outputs[:, 3:] == 0).all()  # query 3 is 2 past key 1


def test_seeded_sinks_and_trace_meta() -> None:
    v = LayerVariant("window", window=4, sinks="logit")
    a, b = (configurable_trace("a b c d e f", MHAConfig(D, H), seed=5, variant=v) for _ in range(2))
    np.testing.assert_array_equal(a.sinks, b.sinks)
    c = configurable_trace("a b c d e f", MHAConfig(D, H), seed=6, variant=v)
    assert not np.array_equal(a.sinks, c.sinks)
    assert a.meta["variant"] == "window" and a.meta["window"] == 4 and a.meta["sinks"] == "logit"
    assert "fewer than 4 positions" in describe(MHAConfig(D, H), v) and "sink logit" in describe(MHAConfig(D, H), v)


def _explicit_reach(T: int, window: int, layers: int, causal: bool, sink_tokens: int) -> np.ndarray:
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    V = (np.abs(i - j) < window) | (j < sink_tokens)
    if causal:
        V &= j <= i
    R = np.eye(T, dtype=bool)
    for _ in range(layers):
        R = (V.astype(int) @ R.astype(int)) > 0
    return R


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sink_tokens", [0, 4])
@pytest.mark.parametrize("window", [1, 2, 3, 6])
def test_reach_is_the_boolean_power_of_one_layer(window: int, sink_tokens: int, causal: bool) -> None:
    for L in (1, 2, 3, 7):
        got = reach(20, window, L, causal=causal, sink_tokens=sink_tokens)
        np.testing.assert_array_equal(got, _explicit_reach(20, window, L, causal, sink_tokens))
    np.testing.assert_array_equal(window_visibility(20, window, causal=causal, sink_tokens=sink_tokens),
                                  _explicit_reach(20, window, 1, causal, sink_tokens))


def test_causal_reach_grows_by_window_minus_one_a_layer() -> None:
    T, w = 30, 3
    for L in range(1, 6):
        R = reach(T, w, L, causal=True)
        back = reach_back(w, L)
        assert back == L * (w - 1)
        assert R[T - 1, T - 1 - back] and not R[T - 1, T - 2 - back]  # exactly `back` tokens back
        assert R[T - 1].sum() == back + 1
    counts = reach_counts(T, w, range(1, 4), causal=True)
    assert counts.shape == (3, T) and counts[:, -1].tolist() == [3, 5, 7]
    assert reach(T, 1, 5, causal=True).sum() == T  # window 1: only itself, at any depth
    assert reach(T, 2, 2, causal=True, sink_tokens=4)[T - 1, 0]  # the sinks are always in reach
    with pytest.raises(ValueError):
        reach(T, 2, 0)


def test_figures_draw_the_band_sink_mass_and_reach_on_token_axes() -> None:
    from mha_viz.figures.window import band_figure, reach_back_figure, reach_figure, sink_mass_figure

    tokens = ("a", "b", "a", "c", "d", "e")
    in_window = window_visibility(6, 2, causal=True)
    kept = window_visibility(6, 2, causal=True, sink_tokens=4) & ~in_window
    band = band_figure(in_window, kept, tokens, tokens, width=500)
    z = np.asarray(band.data[0].z)
    assert (z == 1).sum() == in_window.sum() and (z == 2).sum() == kept.sum() == 1 + 2 + 3 + 4 and z[5, 0] == 2
    assert list(band.layout.xaxis.tickvals) == list(range(6)) and list(band.layout.yaxis.ticktext) == list(tokens)
    mass = sink_mass_figure(np.full((3, 6), 0.25), tokens, title="sink mass")
    assert np.asarray(mass.data[0].z).shape == (3, 6) and list(mass.layout.yaxis.tickvals) == [0, 1, 2]
    R = reach(6, 2, 3, causal=True)
    np.testing.assert_array_equal(np.asarray(reach_figure(R, tokens, 3).data[0].z), R.astype(np.float32))
    line = reach_back_figure(range(1, 5), np.array([1, 2, 3, 4]), window=2, chosen=3)
    assert list(line.data[1].y) == [3]
    with pytest.raises(ValueError):
        sink_mass_figure(np.zeros((3, 5)), tokens, title="x")
    with pytest.raises(ValueError):
        band_figure(in_window, kept[:5], tokens, tokens)


def test_the_band_legend_names_only_the_kinds_it_shows() -> None:
    from mha_viz.figures.window import band_figure

    tokens = ("a", "b", "c", "d")
    in_window = window_visibility(4, 2, causal=True)
    kept = window_visibility(4, 2, causal=True, sink_tokens=1) & ~in_window

    def legend(fig) -> list[str]:
        return [t.name for t in fig.data if t.type == "scatter"]

    assert legend(band_figure(in_window, np.zeros_like(in_window), tokens, tokens)) == ["in the window"]
    assert legend(band_figure(in_window, kept, tokens, tokens)) == ["in the window", "sink token (kept)"]
