"""Training every attention variant (mha_viz.training with a LayerVariant), the head-diversity regulariser of
Li et al. 2018 (mha_viz.training.diversity) and the variant grid (mha_viz.training.variants)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.attention import MultiHeadAttention
from mha_viz.config import MHAConfig
from mha_viz.training import TrainedLayer, relation_scores, train
from mha_viz.training.diversity import head_similarity, map_overlap, output_similarity
from mha_viz.training.model import TinyAttentionModel
from mha_viz.training.precomputed import layer_from_npz, layer_to_npz, trained_layer
from mha_viz.training.variants import (
    VariantRow,
    grid_variants,
    rows_from_json,
    rows_to_json,
    train_variant_grid,
    variant_label,
    variant_shape,
)
from mha_viz.variants import LayerVariant
from mha_viz.variants_cost import kv_bytes_per_token

# --- the regulariser against hand-written formulas ------------------------------------------------


def test_output_similarity_is_the_mean_pairwise_cosine_of_head_outputs() -> None:
    g = torch.Generator().manual_seed(0)
    o = torch.randn(2, 3, 4, 5, generator=g)  # (B, H, T, d_v)
    pairs = [(0, 1), (0, 2), (1, 2)]
    expected = np.mean([
        float(o[b, i, t] @ o[b, j, t] / (o[b, i, t].norm() * o[b, j, t].norm()))
        for b in range(2) for t in range(4) for i, j in pairs
    ])
    assert float(output_similarity(o)) == pytest.approx(expected, rel=1e-5)


def test_map_overlap_is_the_mean_pairwise_sum_of_products_of_attention_maps() -> None:
    g = torch.Generator().manual_seed(1)
    A = torch.softmax(torch.randn(3, 4, 5, generator=g), -1)  # (H, T, S)
    expected = np.mean([float((A[i, t] * A[j, t]).sum()) for t in range(4) for i, j in [(0, 1), (0, 2), (1, 2)]])
    assert float(map_overlap(A)) == pytest.approx(expected, rel=1e-5)


def test_identical_heads_are_maximally_similar_and_one_head_has_no_pair() -> None:
    o = torch.randn(1, 4, 3).expand(3, 4, 3)  # three copies of one head
    assert float(output_similarity(o)) == pytest.approx(1.0)
    one_hot = torch.eye(4)[None].expand(2, 4, 4)  # two heads, each query on its own key
    assert float(map_overlap(one_hot)) == pytest.approx(1.0)
    assert float(output_similarity(torch.randn(1, 4, 3))) == 0.0
    with pytest.raises(ValueError, match="diversity kind"):
        head_similarity(MultiHeadAttention(8, 2, seed=0).attend(torch.randn(3, 8)), "values")


# --- training with a variant, unchanged by default -------------------------------------------------


def test_the_default_variant_builds_the_layer_training_always_built() -> None:
    model = TinyAttentionModel(26, 10, 32, 4, 2, seed=7)
    before = MultiHeadAttention(32, 4, seed=7)  # what TinyAttentionModel built before variants
    assert {k: v.tolist() for k, v in model.attention.state_dict().items()} == {
        k: v.tolist() for k, v in before.state_dict().items()}


def test_diversity_zero_and_the_default_variant_leave_the_run_unchanged() -> None:
    plain = train("prev-first", 2, 16, 30, seed=1, num_snapshots=2)
    same = train("prev-first", 2, 16, 30, seed=1, num_snapshots=2, variant=LayerVariant(), diversity=0.0)
    assert plain.train_loss.tobytes() == same.train_loss.tobytes()
    assert all(plain.final_state[k].tobytes() == same.final_state[k].tobytes() for k in plain.final_state)
    pushed = train("prev-first", 2, 16, 30, seed=1, num_snapshots=2, diversity=0.5)
    assert pushed.train_loss[1:].tobytes() != plain.train_loss[1:].tobytes()  # the penalty changes the gradient


def test_a_positive_diversity_weight_makes_trained_heads_less_alike() -> None:
    for kind in ("outputs", "maps"):
        base = train("prev-2back-first", 4, 32, 150, seed=0, num_snapshots=1, diversity_kind=kind)
        diverse = train("prev-2back-first", 4, 32, 150, seed=0, num_snapshots=1, diversity=2.0, diversity_kind=kind)
        assert diverse.final.similarity[kind] < base.final.similarity[kind] - 0.05, kind


@pytest.mark.parametrize(("h", "kv_heads"), [(4, 1), (4, 2), (8, 2), (8, 4)])
def test_grouped_query_layers_train_and_share_their_key_value_heads(h: int, kv_heads: int) -> None:
    run = train("prev-first", h, 32, 40, seed=0, num_snapshots=1, variant=LayerVariant("gqa", kv_heads=kv_heads))
    assert run.final_state["attention.W_K"].shape[0] == kv_heads
    trace = run.final.trace
    assert trace.kv_heads == tuple(q // (h // kv_heads) for q in range(h))
    assert np.allclose(trace.keys[0], trace.keys[h // kv_heads - 1])  # a group's query heads read the same keys
    assert run.final.scores.shape == (h, 2)
    assert run.train_loss[-1] < run.train_loss[0]


def test_a_trained_gqa_layer_round_trips_and_rebuilds_its_trace_and_head_weights() -> None:
    variant = LayerVariant("gqa", kv_heads=2)
    layer = train("prev-first", 4, 16, 20, seed=2, num_snapshots=1, variant=variant, diversity=0.1).layer
    again = layer_from_npz(layer_to_npz(layer))
    assert (again.variant, again.diversity, again.diversity_kind) == (variant, 0.1, "outputs")
    assert np.array_equal(again.trace().weights, layer.trace().weights)
    assert layer.trace().meta["variant"] == "gqa"
    w = layer.head_weights()
    assert w.W_K.shape == (1, 4, 16, 4) and np.array_equal(w.W_K[0, 0], w.W_K[0, 1])  # repeated per query head
    assert trained_layer("prev-first", 4, 16, 2, 20, variant=variant, diversity=0.1).state["attention.W_K"].shape[0] == 2


def test_bad_variant_and_diversity_say_why() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        train("prev-first", 4, 16, 5, variant=LayerVariant("gqa", kv_heads=3))
    with pytest.raises(ValueError, match="diversity must be"):
        train("prev-first", 2, 16, 5, diversity=-1.0)
    with pytest.raises(ValueError, match="diversity_kind"):
        train("prev-first", 2, 16, 5, diversity_kind="keys")
    mla = TrainedLayer("prev-first", 2, 16, 0, 1, ("previous", "first"), 0.0, np.zeros(2), np.zeros((2, 2)), {},
                       LayerVariant("mla"))
    with pytest.raises(ValueError, match="only MHA and GQA"):
        mla.head_weights()


def test_relation_scores_of_signed_weights_are_the_net_mass() -> None:
    """Differential attention's weights are one map minus λ times another, h/2 heads: a score is the net mass."""
    w = np.zeros((1, 3, 3))  # one differential head, 3 queries
    w[0, 2] = [0.9, -0.3, 0.4]
    masks = np.zeros((2, 3, 3), dtype=bool)
    masks[0, 2, 1] = True  # 'previous' of query 2 is key 1
    masks[1, 2, 0] = True  # 'first' is key 0
    assert relation_scores(w, masks).tolist() == [[-0.3, 0.9]]


# --- the variant grid -------------------------------------------------------------------------------


def test_kv_bytes_per_token_shrink_with_shared_key_value_heads() -> None:
    cfg = MHAConfig(32, 4)
    sizes = {g: kv_bytes_per_token(variant_shape(cfg, LayerVariant("gqa", kv_heads=g))) for g in (4, 2, 1)}
    assert sizes == {4: 4 * 2 * 8 * 2, 2: 2 * 2 * 8 * 2, 1: 2 * 8 * 2}  # g (d_k + d_v) bytes, bf16
    assert kv_bytes_per_token(variant_shape(cfg, LayerVariant())) == sizes[4]
    assert [variant_label(v, 4) for v in grid_variants(4)][:3] == ["MHA", "GQA kv=2", "MQA"]


def test_the_grid_trains_each_variant_over_seeds_and_round_trips_as_json() -> None:
    rows = train_variant_grid("prev-first", 2, 16, 15, seeds=(0, 1), diversities=(0.0, 0.5))
    assert [(r.label, r.diversity) for r in rows] == [("MHA", 0.0), ("MHA", 0.5), ("MQA", 0.0)]
    assert all(len(r.accuracy) == len(r.redundancy) == len(r.similarity) == 2 for r in rows)
    assert rows[0].kv_bytes_per_token == 2 * rows[2].kv_bytes_per_token
    again = rows_from_json(rows_to_json(rows))
    assert [r.accuracy for r in again] == [r.accuracy for r in rows] and isinstance(again[0], VariantRow)
    assert again[2].variant == LayerVariant("gqa", kv_heads=1)


def test_a_newly_registered_variant_trains_and_joins_the_grid_with_no_change_here(monkeypatch) -> None:
    """A variant helper registers its layer in mha_viz.variants.LAYERS; training, tracing and the grid then use it."""
    from mha_viz import variants

    built = []

    def build(cfg, variant, *, seed=None, dtype=torch.float32):
        built.append(variant)
        return MultiHeadAttention(cfg.d_model, cfg.num_heads, seed=seed, dtype=dtype)  # stands in for the real layer

    monkeypatch.setitem(variants.LAYERS, "window", build)
    window = LayerVariant("window", window=2)
    layer = train("prev-first", 2, 16, 10, seed=0, num_snapshots=1, variant=window).layer
    assert built[-1] == window and layer.variant == window
    assert layer.trace().meta["variant"] == "window" and layer.trace().meta["window"] == 2
    assert "Window w=3 (logit sinks)" in [variant_label(v, 2) for v in grid_variants(2)]  # the grid offers it
    assert kv_bytes_per_token(variant_shape(MHAConfig(16, 2), window)) == 2 * 2 * 8 * 2  # window caches full K/V heads


def test_a_variant_with_a_penalty_trains_the_same_in_the_worker_process() -> None:
    from mha_viz.training.isolated import train_isolated

    options = {"variant": LayerVariant("gqa", kv_heads=1), "diversity": 0.2, "diversity_kind": "maps"}
    here = train("prev-first", 2, 16, 10, 0, num_snapshots=1, **options)
    there = train_isolated("prev-first", 2, 16, 10, 0, **options)
    assert (there.variant, there.diversity, there.diversity_kind) == (options["variant"], 0.2, "maps")
    assert there.final_state["attention.W_K"].shape[0] == 1
    assert there.train_loss.tobytes() == here.train_loss.tobytes()
