"""HeadWeights (mha_viz.weights): every head's W_Q, W_K, W_V, W_O with the norms folded in, checked against what the
models compute: the folded weights applied to the raw residual stream, divided by the norm's scale s, give the
model's own projections; head blocks of W_O add up to the output projection; the folded unembedding gives the
logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.config import MHAConfig
from mha_viz.pretrained.norms import norm_affine
from mha_viz.sources import ConfigurableSource, ModelSource, configurable_trace
from mha_viz.weights import HeadWeights, from_trace, head_weights
from tests.tiny_causal import NAMES, tiny_causal


@pytest.fixture(scope="module", params=NAMES)
def model(request):
    return tiny_causal(request.param)


def scale_of(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """s of norm(x) = gamma * centre(x) / s + beta, per row of x (T, d)."""
    kind, _, _, eps = norm_affine(norm, x.shape[-1])
    if kind == "LayerNorm":
        return torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def test_folded_projections_read_the_raw_stream_as_the_model_reads_it_through_its_norm(model) -> None:
    w = model.head_weights()
    adapter = model.adapter
    torch.manual_seed(0)
    x = torch.randn(6, w.d_model, dtype=torch.float64)  # (T, d_model): any residual stream
    for layer in range(w.num_layers):
        site, norm = adapter.site("decoder", layer), adapter.pre_norm("decoder", layer)
        normed = norm.double()(x).float()  # what the projections read
        q, k, v = (p.reshape(6, n, -1).transpose(0, 1) for p, n in zip(
            adapter.qkv_columns(site, site.q(normed)) if site.fused else (site.q(normed), site.k(normed), site.v(normed)),
            (site.num_heads, site.num_kv_heads, site.num_kv_heads), strict=True))  # (n, T, d)
        norm.float()
        s = scale_of(norm, x).numpy()  # (T, 1)
        kv = list(site.kv_heads)
        for name, ours, theirs in (("Q", w.W_Q, q), ("K", w.W_K, k[kv]), ("V", w.W_V, v[kv])):
            bias = getattr(w, f"b_{name}")[layer][:, None]  # (H, 1, d)
            folded = np.einsum("td,hde->hte", x.numpy(), ours[layer]) / s + bias  # (H, T, d)
            np.testing.assert_allclose(folded, theirs.detach().numpy(), atol=2e-4, err_msg=f"layer {layer} W_{name}")


def test_head_blocks_of_W_O_add_up_to_the_output_projection_up_to_its_mean(model) -> None:
    w = model.head_weights()
    torch.manual_seed(1)
    for layer in range(w.num_layers):
        site = model.adapter.site("decoder", layer)
        concat = torch.randn(5, w.num_heads * w.W_O.shape[2])  # (T, H*d_v)
        out = site.out(concat).detach().numpy()  # (T, d_model)
        z = concat.numpy().reshape(5, w.num_heads, -1)  # (T, H, d_v)
        ours = np.einsum("thv,hvd->td", z, w.W_O[layer]) + w.b_O[layer]
        if w.norm == "LayerNorm":  # W_O centred: only the part a LayerNorm reads is kept
            out = out - out.mean(-1, keepdims=True)
            ours = ours - ours.mean(-1, keepdims=True)
        np.testing.assert_allclose(ours, out, atol=1e-4)


def test_the_folded_unembedding_gives_the_logits(model) -> None:
    w = model.head_weights()
    _, final = model.adapter.residual_stream()
    torch.manual_seed(2)
    x = torch.randn(4, w.d_model)
    logits = model.model.get_output_embeddings()(final(x)).detach().numpy()  # (T, V)
    ours = x.numpy() @ w.W_U / scale_of(final, x).numpy() + (0 if w.b_U is None else w.b_U)
    np.testing.assert_allclose(ours, logits, atol=2e-4)
    assert w.W_E.shape == (len(w.vocab), w.d_model) and w.vocab[102] == "[SEP]"


def test_grouped_query_heads_read_their_shared_key_and_value_head() -> None:
    w = tiny_causal("llama").head_weights()  # 4 query heads, 2 K/V heads
    np.testing.assert_array_equal(w.W_K[:, 0], w.W_K[:, 1])
    np.testing.assert_array_equal(w.W_V[:, 2], w.W_V[:, 3])
    assert not np.array_equal(w.W_K[:, 1], w.W_K[:, 2])


def test_qk_and_ov_products_have_rank_at_most_the_head_dimension(model) -> None:
    w = model.head_weights()
    d_head = w.W_Q.shape[-1]
    assert np.linalg.matrix_rank(w.W_QK(1, 2)) <= d_head < w.d_model
    np.testing.assert_allclose(w.W_OV(0, 3), w.W_V[0, 3].astype(np.float64) @ w.W_O[0, 3], rtol=1e-6)


def test_a_trace_and_a_trained_layer_give_their_own_weights() -> None:
    trace = configurable_trace("the cat sat on the mat", MHAConfig(d_model=16, num_heads=4), seed=3)
    w = from_trace(trace)
    z = trace.head_outputs  # (H, T, d_v)
    np.testing.assert_allclose(np.einsum("htv,hvd->htd", z, w.W_O[0]), trace.head_contributions(), atol=1e-5)
    assert head_weights(ConfigurableSource("the cat sat on the mat", MHAConfig(d_model=16, num_heads=4), seed=3)).W_Q.shape == (1, 4, 16, 4)

    from mha_viz.training.precomputed import precomputed_layer

    layer = precomputed_layer("prev-first", 2, 64, 0, 600)
    t, lw = layer.trace(), layer.head_weights()
    np.testing.assert_allclose(np.einsum("htv,hvd->htd", t.head_outputs, lw.W_O[0]), t.head_contributions(), atol=1e-5)
    assert lw.vocab[:3] == ("a", "b", "c") and lw.W_U is None
    from mha_viz.sources import TrainedSource

    sw = head_weights(TrainedSource(layer, ""))  # the source of the trained layers: its embeddings kept
    np.testing.assert_array_equal(sw.W_E, lw.W_E)
    assert sw.vocab == lw.vocab


def test_what_has_no_head_weights_says_why() -> None:
    with pytest.raises(TypeError, match="no head weights"):
        head_weights(object())
    with pytest.raises(ValueError, match="shape"):
        HeadWeights(W_Q=np.zeros((1, 2, 8, 4)), W_K=np.zeros((1, 2, 8, 4)), W_V=np.zeros((1, 2, 8, 4)),
                    W_O=np.zeros((1, 2, 4, 9)))
    with pytest.raises(ValueError, match="cross-attention"):
        from_trace(configurable_trace("a b", MHAConfig(d_model=8, num_heads=2), context="c d e"))
    with pytest.raises(ValueError, match="part must be one of"):
        head_weights(ModelSource(tiny_causal("gpt2"), "a b", "cross"))


def test_folding_a_few_columns_at_a_time_equals_folding_all_at_once(monkeypatch) -> None:
    """fold_reader works FOLD_COLUMNS columns at a time (an unembedding is never copied whole in float64)."""
    from mha_viz import weights

    rng = np.random.default_rng(0)
    W, b = rng.normal(size=(2, 8, 11)), rng.normal(size=(2, 11))
    gamma, beta = rng.normal(size=8), rng.normal(size=8)
    whole = weights.fold_reader(W, b, gamma, beta, True)
    monkeypatch.setattr(weights, "FOLD_COLUMNS", 3)
    for ours, expected in zip(weights.fold_reader(W, b, gamma, beta, True), whole, strict=True):
        np.testing.assert_allclose(ours, expected, rtol=1e-6)
    folded = gamma[:, None] * W
    np.testing.assert_allclose(whole[0], folded - folded.mean(axis=-2, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(whole[1], b + np.einsum("d,hdn->hn", beta, W), rtol=1e-5)
