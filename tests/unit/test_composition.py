"""Composition scores between heads (mha_viz.analysis.composition): equal to TransformerLens's
all_composition_scores on the same weights, to the dense [d_model, d_model] products, to a known answer built by
hand, and on the bundled induction model the previous-token head feeds the induction heads' keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mha_viz
from mha_viz.analysis import CompositionScores, composition, composition_scores, detect_heads
from mha_viz.weights import HeadWeights
from tests.tiny_causal import tiny_causal


@pytest.fixture(scope="module")
def induction():
    return mha_viz.load_model(mha_viz.INDUCTION_MODEL)


def hooked_twin(hf_model):
    """A TransformerLens HookedTransformer with hf_model's weights (a GPT2LMHeadModel), processed as
    HookedTransformer.from_pretrained processes them: LayerNorms folded, writers centred, the unembedding centred."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

    c = hf_model.config
    cfg = HookedTransformerConfig(
        d_model=c.n_embd, d_head=c.n_embd // c.n_head, n_heads=c.n_head, d_mlp=c.n_inner or 4 * c.n_embd,
        n_layers=c.n_layer, n_ctx=c.n_positions, eps=c.layer_norm_epsilon, d_vocab=c.vocab_size,
        act_fn=c.activation_function, normalization_type="LN", original_architecture="GPT2LMHeadModel",
        positional_embedding_type="standard", device="cpu", dtype=torch.float32,
    )
    twin = HookedTransformer(cfg)
    twin.load_and_process_state_dict(convert_gpt2_weights(hf_model, cfg), fold_ln=True, center_writing_weights=True,
                                     center_unembed=True, fold_value_biases=True)
    return twin.eval()


def dense_scores(w: HeadWeights, kind: str) -> np.ndarray:
    """The definition, with the [d_model, d_model] products built."""
    L, H = w.num_layers, w.num_heads
    out = np.zeros((L, H, L, H))
    for l1 in range(L):
        for h1 in range(H):
            A = w.W_OV(l1, h1)
            for l2 in range(l1 + 1, L):
                for h2 in range(H):
                    B = {"q": w.W_QK(l2, h2), "k": w.W_QK(l2, h2).T, "v": w.W_OV(l2, h2)}[kind]
                    out[l1, h1, l2, h2] = np.linalg.norm(A @ B) / (np.linalg.norm(A) * np.linalg.norm(B))
    return out


@pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")
@pytest.mark.parametrize("which", ["tiny-gpt2", "induction"])
def test_scores_equal_transformer_lens_on_the_same_weights(which, induction) -> None:
    model = tiny_causal("gpt2") if which == "tiny-gpt2" else induction
    twin = hooked_twin(model.model)
    ids = torch.tensor([[5, 17, 3, 9, 17, 3, 11, 2]]) % model.model.config.vocab_size
    with torch.no_grad():
        theirs = twin(ids)
        ours = model.model(ids).logits
    # center_unembed removes each position's mean logit: compare logits up to it
    np.testing.assert_allclose((theirs - theirs.mean(-1, keepdim=True)).numpy(),
                               (ours - ours.mean(-1, keepdim=True)).numpy(), atol=1e-4)
    for kind in "qkv":
        expected = twin.all_composition_scores(kind.upper()).detach().numpy()
        got = composition_scores(model, kind)
        assert got.shape == expected.shape == (2, model.model.config.n_head, 2, model.model.config.n_head)
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"{kind}-composition")
        assert np.all(got[1] == 0) and got[0, :, 1].min() > 0


@pytest.mark.parametrize("kind", ["q", "k", "v"])
def test_the_factored_form_equals_the_dense_products(kind) -> None:
    w = build_weights(np.random.default_rng(4), L=3, H=3, d=24, d_k=5, d_v=7)
    np.testing.assert_allclose(composition_scores(w, kind), dense_scores(w, kind), atol=1e-6)


def build_weights(rng: np.random.Generator, L: int, H: int, d: int, d_k: int, d_v: int) -> HeadWeights:
    def draw(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return HeadWeights(W_Q=draw(L, H, d, d_k), W_K=draw(L, H, d, d_k), W_V=draw(L, H, d, d_v), W_O=draw(L, H, d_v, d))


def test_a_known_answer_built_by_hand() -> None:
    """d_model 8, one dimension per head. Head (0, 1) writes e_0 -> e_3: W_OV = e_0 e_3^T. Head (1, 0)'s query
    reads e_3 (W_Q = e_3), its key reads e_5: W_QK = e_3 e_5^T, so W_OV W_QK = e_0 e_5^T and the Q-composition score
    is 1 / (1 * 1) = 1. Head (1, 1) reads e_4 (orthogonal to what (0, 1) writes): 0. K-composition of (0, 1) with
    (1, 0) needs e_3 in W_K: 0; with head (1, 2), whose key reads (e_3 + e_4) / sqrt(2) and query e_6:
    ||e_0 e_3^T (e_3 + e_4) e_6^T|| / sqrt(2) = 1 / sqrt(2). V-composition of (0, 1) with (1, 3), whose W_OV is
    (2 e_3 + e_7) e_1^T: ||e_0 (2) e_1^T|| / (1 * sqrt(5)) = 2 / sqrt(5)."""
    L, H, d = 2, 4, 8
    e = np.eye(d, dtype=np.float32)
    W_Q, W_K, W_V = (np.zeros((L, H, d, 1), np.float32) for _ in range(3))
    W_O = np.zeros((L, H, 1, d), np.float32)
    for h in range(H):  # layer 0: head h writes e_0 -> e_{h+2}, reads e_h with its query and key
        W_V[0, h, :, 0], W_O[0, h, 0], W_Q[0, h, :, 0], W_K[0, h, :, 0] = e[h], e[h + 2], e[h], e[h]
    W_V[0, 1, :, 0] = e[0]  # head (0, 1): W_OV = e_0 e_3^T
    W_Q[1, 0, :, 0], W_K[1, 0, :, 0] = e[3], e[5]
    W_Q[1, 1, :, 0], W_K[1, 1, :, 0] = e[4], e[5]
    W_Q[1, 2, :, 0], W_K[1, 2, :, 0] = e[6], (e[3] + e[4]) / np.sqrt(2)
    W_V[1, 3, :, 0], W_O[1, 3, 0] = 2 * e[3] + e[7], e[1]
    for h in range(3):
        W_V[1, h, :, 0], W_O[1, h, 0] = e[7], e[7]
    W_Q[1, 3, :, 0] = W_K[1, 3, :, 0] = e[7]
    w = HeadWeights(W_Q=W_Q, W_K=W_K, W_V=W_V, W_O=W_O)
    q, k, v = (composition_scores(w, kind) for kind in "qkv")
    assert q[0, 1, 1, 0] == pytest.approx(1.0) and q[0, 1, 1, 1] == 0.0
    assert k[0, 1, 1, 0] == 0.0 and k[0, 1, 1, 2] == pytest.approx(1 / np.sqrt(2))
    assert v[0, 1, 1, 3] == pytest.approx(2 / np.sqrt(5)) and v[0, 1, 1, 0] == 0.0
    assert np.all(q[1] == 0) and np.all(q[:, :, 0] == 0)  # no later reader: zero


def test_the_previous_token_head_feeds_the_keys_of_the_induction_heads(induction) -> None:
    detected = detect_heads(induction)
    prev = np.unravel_index(np.argmax(detected["previous"][0]), detected["previous"][0].shape)[0]  # layer 0
    inductive = np.flatnonzero(detected["induction"][1] > 0.5)  # layer 1's induction heads
    assert prev == 2 and len(inductive) == 4
    c = composition(induction, "k")
    block = c.scores[0, :, 1, :]  # [layer-0 head, layer-1 head]
    for h2 in inductive:  # in every induction head's column the previous-token head is highest, far above chance
        others = np.delete(block[:, h2], prev)
        assert block[prev, h2] > others.max() + 0.02, (h2, block[:, h2])
        assert block[prev, h2] > 2 * c.baseline
    assert c.baseline > 0 and c.baseline_std < 0.1 * c.baseline
    assert block[prev].mean() > max(np.delete(block, prev, axis=0).mean(1))  # its row is the highest


def test_the_baseline_is_the_score_of_random_matrices_of_these_shapes() -> None:
    w = build_weights(np.random.default_rng(1), L=2, H=2, d=64, d_k=8, d_v=8)
    c = composition(w, "q", draws=32, seed=3)
    assert isinstance(c, CompositionScores) and c.kind == "q" and c.labels == ("0.0", "0.1", "1.0", "1.1")
    # random weights score like the baseline: within a few of its standard deviations
    assert abs(c.scores[0, :, 1, :].mean() - c.baseline) < 4 * c.baseline_std
    # a wider model, the same head size: random scores are smaller (less chance of overlap)
    wide = composition(build_weights(np.random.default_rng(1), L=2, H=2, d=256, d_k=8, d_v=8), "q", draws=32)
    assert wide.baseline < c.baseline
    assert composition(w, "q", draws=32, seed=3).baseline == c.baseline  # seeded
    grid, rows, cols = c.pairs()
    assert grid.shape == (2, 2) and rows == ("0.0", "0.1") and cols == ("1.0", "1.1")
    np.testing.assert_array_equal(grid, c.scores[0, :, 1, :])


def test_bad_kinds_and_single_layers_say_why() -> None:
    w = build_weights(np.random.default_rng(0), L=1, H=2, d=8, d_k=4, d_v=4)
    with pytest.raises(ValueError, match="two or more attention layers"):
        composition_scores(w, "q")
    with pytest.raises(ValueError, match="kind must be one of q, k, v"):
        composition_scores(build_weights(np.random.default_rng(0), L=2, H=2, d=8, d_k=4, d_v=4), "x")


@pytest.mark.parametrize("width", [340, 1000])
def test_the_heatmap_has_writers_as_rows_readers_as_columns_and_marks_the_baseline(width) -> None:
    from mha_viz.figures.common import describe
    from mha_viz.figures.composition import composition_figure

    w = build_weights(np.random.default_rng(2), L=3, H=2, d=16, d_k=4, d_v=4)
    c = composition(w, "k", draws=8)
    fig = composition_figure(c.scores, c.baseline, "k", title="K-composition", width=width)
    (heatmap,) = fig.data
    z = np.asarray(heatmap.z)
    assert z.shape == (4, 4) and z.dtype == np.float32
    np.testing.assert_allclose(z[:2], c.scores[0, :, 1:, :].reshape(2, 4), rtol=1e-6)  # layer 0 writes to 1 and 2
    np.testing.assert_allclose(z[2:, 2:], c.scores[1, :, 2, :], rtol=1e-6)
    assert np.isnan(z[2:, :2]).all()  # layer 1 cannot write to layer 1
    assert list(fig.layout.yaxis.ticktext) == ["0.0", "0.1", "1.0", "1.1"]
    assert list(fig.layout.xaxis.ticktext) == ["1.0", "1.1", "2.0", "2.1"]
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3]
    assert c.baseline in heatmap.colorbar.tickvals and f"random {c.baseline:.2f}" in heatmap.colorbar.ticktext
    assert (heatmap.colorbar.orientation == "h") == (width < 600)
    if width >= 600:
        assert f"{c.baseline:.3f}" in heatmap.colorbar.title.text
    else:  # a phone's horizontal bar has no room for a title (Plotly draws it on the bar or on the ticks)
        assert not heatmap.colorbar.title.text
    assert "K-composition" in describe(fig)
    with pytest.raises(ValueError, match="2 or more layers"):
        composition_figure(c.scores[:1, :, :1], c.baseline, "k")


@pytest.mark.parametrize("width", [358, 1100])
def test_a_model_with_many_heads_labels_heads_no_closer_than_a_label_needs(width) -> None:
    """MiniLM's 6 x 12 heads: 60 writers and 60 readers. Every labelled head has 17 px or more on both axes."""
    from mha_viz.figures.composition import composition_figure

    rng = np.random.default_rng(0)
    fig = composition_figure(rng.random((6, 12, 6, 12)), 0.05, "k", title="K-composition", width=width)
    side = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b  # the square plot's side
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        gap = (axis.tickvals[1] - axis.tickvals[0]) * side / 60
        assert gap >= 17
