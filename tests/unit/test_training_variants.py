"""Training every attention variant (mha_viz.training with a LayerVariant), the head-diversity regulariser of
Li et al. 2018 (mha_viz.training.diversity) and the variant grid (mha_viz.training.variants)."""

from __future__ import annotations

import itertools

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
    with pytest.raises(ValueError, match="only MHA, GQA, Window and MoH"):
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
    rows = train_variant_grid("prev-first", 2, 16, 15, seeds=(0, 1), diversities=(0.0, 0.5),
                              variants=[LayerVariant(), LayerVariant("gqa", kv_heads=1)])
    assert [(r.label, r.diversity) for r in rows] == [("MHA", 0.0), ("MHA", 0.5), ("MQA", 0.0)]
    assert all(len(r.accuracy) == len(r.redundancy) == len(r.similarity) == 2 for r in rows)
    assert rows[0].kv_bytes_per_token == 2 * rows[2].kv_bytes_per_token
    again = rows_from_json(rows_to_json(rows))
    assert [r.accuracy for r in again] == [r.accuracy for r in rows] and isinstance(again[0], VariantRow)
    assert again[2].variant == LayerVariant("gqa", kv_heads=1)


def test_a_newly_registered_variant_trains_and_joins_the_grid_with_no_change_here(monkeypatch) -> None:
    """A variant's spec (mha_viz.variants.VARIANTS) names its layer builder; training, tracing and the grid use it."""
    from dataclasses import replace

    from mha_viz import variants

    built = []

    def build(cfg, variant, *, seed=None, dtype=torch.float32):
        built.append(variant)
        return MultiHeadAttention(cfg.d_model, cfg.num_heads, seed=seed, dtype=dtype)  # stands in for the real layer

    monkeypatch.setitem(variants.VARIANTS, "window", replace(variants.VARIANTS["window"], build=build))
    window = LayerVariant("window", window=2)
    layer = train("prev-first", 2, 16, 10, seed=0, num_snapshots=1, variant=window).layer
    assert built[-1] == window and layer.variant == window
    assert layer.trace().meta["variant"] == "window" and layer.trace().meta["window"] == 2
    assert "Window w=2 (logit sinks)" in [variant_label(v, 2) for v in grid_variants(2)]  # the grid offers it
    assert kv_bytes_per_token(variant_shape(MHAConfig(16, 2), window)) == 2 * 2 * 8 * 2  # window caches full K/V heads


def test_a_variant_with_a_penalty_trains_the_same_in_the_worker_process() -> None:
    from mha_viz.training.isolated import train_isolated

    options = {"variant": LayerVariant("gqa", kv_heads=1), "diversity": 0.2, "diversity_kind": "maps"}
    here = train("prev-first", 2, 16, 10, 0, num_snapshots=1, **options)
    there = train_isolated("prev-first", 2, 16, 10, 0, **options)
    assert (there.variant, there.diversity, there.diversity_kind) == (options["variant"], 0.2, "maps")
    assert there.final_state["attention.W_K"].shape[0] == 1
    assert there.train_loss.tobytes() == here.train_loss.tobytes()


# --- MLA, window, diff and MoH train through the same protocol ------------------------------------------------------

TRAINED_VARIANTS = [LayerVariant("mla", kv_latent=4), LayerVariant("mla", kv_latent=16),
                    LayerVariant("window", window=2, sinks="logit"), LayerVariant("diff"),
                    LayerVariant("moh", moh_k=1), LayerVariant("moh", moh_k=2, moh_shared=1)]


@pytest.mark.parametrize("variant", TRAINED_VARIANTS, ids=lambda v: f"{v.kind}-{'-'.join(map(str, v.params().values()))}")
def test_every_variant_learns_traces_and_round_trips(variant: LayerVariant) -> None:
    run = train("prev-first", 4, 16, 60, seed=0, num_snapshots=1, variant=variant)
    assert run.train_loss[-10:].mean() < run.train_loss[:10].mean() - 0.05  # it learns
    assert run.final.loss < run.snapshots[0].loss
    heads = 2 if variant.kind == "diff" else 4  # differential attention: h/2 signed heads
    trace = run.final.trace
    assert trace.weights.shape == (heads, 10, 10) and run.final.scores.shape == (heads, 2)
    layer = layer_from_npz(layer_to_npz(run.layer))
    assert layer.variant == variant and np.array_equal(layer.trace().weights, trace.weights)
    assert layer.trace().meta["variant"] == variant.kind
    assert np.isfinite(run.final.similarity["outputs"])


def test_a_trained_mla_trace_keeps_its_latent_and_a_window_trace_its_band() -> None:
    mla = train("prev-first", 4, 16, 5, seed=0, num_snapshots=1, variant=LayerVariant("mla", kv_latent=8)).layer
    latent = mla.trace().meta["kv_latent"]
    assert isinstance(latent, np.ndarray) and latent.shape == (10, 8)  # the latent itself, not the parameter
    window = train("prev-first", 4, 16, 5, seed=0, num_snapshots=1,
                   variant=LayerVariant("window", window=2, sinks="logit")).layer.trace()
    assert window.meta["window"] == 2 and window.sinks.shape == (4,)
    T = window.weights.shape[1]
    far = np.tril(np.ones((T, T), dtype=bool), -2)  # keys two or more back: outside the band
    assert np.abs(window.weights[:, far]).max() == 0


def test_head_weights_of_mla_and_diff_say_what_is_unavailable_window_and_moh_give_them() -> None:
    for variant, why in ((LayerVariant("mla"), "up-projected from one latent"), (LayerVariant("diff"), "two softmax")):
        layer = train("prev-first", 4, 16, 2, seed=0, num_snapshots=1, variant=variant).layer
        with pytest.raises(ValueError, match=why):
            layer.head_weights()
    for variant in (LayerVariant("window", window=2), LayerVariant("moh", moh_k=1)):
        layer = train("prev-first", 4, 16, 2, seed=0, num_snapshots=1, variant=variant).layer
        assert layer.head_weights().W_K.shape == (1, 4, 16, 4)


def test_a_diff_layer_has_no_redundancy_as_its_weights_are_signed() -> None:
    rows = train_variant_grid("prev-first", 4, 16, 10, seeds=(0,), variants=[LayerVariant("diff"), LayerVariant()])
    assert np.isnan(rows[0].redundancy_mean) and np.isfinite(rows[1].redundancy_mean)


def test_the_default_grid_holds_every_variant() -> None:
    labels = [variant_label(v, 4) for v in grid_variants(4)]
    assert labels == ["MHA", "GQA kv=2", "MQA", "MLA c=4", "MLA c=8", "MLA c=16", "Window w=2 (logit sinks)",
                      "Window w=4 (logit sinks)", "Diff", "MoH k=1", "MoH k=2", "MoH k=1+1 shared", "MoH k=2+1 shared"]


@pytest.mark.parametrize("shared", [0, 1])
def test_moh_trains_its_router_and_each_token_uses_exactly_k_routed_heads(shared: int) -> None:
    variant = LayerVariant("moh", moh_k=1, moh_shared=shared)
    run = train("prev-first", 4, 16, 60, seed=0, num_snapshots=1, variant=variant)
    before, after = run.snapshots[0].trace, run.final.trace
    assert not np.allclose(before.gates, after.gates, atol=1e-3)  # the router learned
    state0 = TinyAttentionModel(26, 10, 16, 4, 2, seed=0, variant=variant).attention.W_r.detach().numpy()
    assert not np.allclose(run.final_state["attention.W_r"], state0)
    for trace in (before, after):
        picked = trace.meta["picked"]  # (H, T)
        assert (picked[shared:].sum(0) == 1).all() and picked[:shared].all()
        assert (trace.gates[shared:][~picked[shared:]] == 0).all()


def test_moh_training_adds_the_load_balance_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    from mha_viz.training import trainer

    variant = LayerVariant("moh", moh_k=1)
    with_balance = train("prev-first", 4, 16, 5, seed=0, num_snapshots=1, variant=variant)
    monkeypatch.setattr(trainer, "MOH_BALANCE", 0.0)
    without = train("prev-first", 4, 16, 5, seed=0, num_snapshots=1, variant=variant)
    assert with_balance.train_loss[0] > without.train_loss[0]  # L_b > 0 adds to the first step's loss
    assert trainer.MOH_BALANCE == 0.0 and 0 < (with_balance.train_loss[0] - without.train_loss[0]) < 0.05


def test_the_bench_keeps_the_hand_written_reading_when_it_rewrites_its_results(tmp_path) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "bench" / "bench_variants_training.py"
    spec = importlib.util.spec_from_file_location("bench_variants_training", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = tmp_path / "RESULTS.md"
    results.write_text(f"# old\n{bench.READING[0]}\nMLA c=8 beats MQA.\n{bench.READING[1]}\n## Output\nold numbers\n")
    assert bench.hand_written_reading(results) == "MLA c=8 beats MQA."
    results.write_text("# no markers\n")
    assert "No reading yet" in bench.hand_written_reading(results)
    assert bench.READING[0] in (Path(__file__).parents[2] / "bench" / "RESULTS-variants-training.md").read_text()


def test_the_accuracy_vs_cache_figure_labels_every_variant_once_without_overlapping_labels() -> None:
    from mha_viz.figures.training import accuracy_vs_cache_figure
    from mha_viz.training.variants import precomputed_variant_grid

    rows = precomputed_variant_grid()
    fig = accuracy_vs_cache_figure(rows, "MLA c=8")
    labels = next(t for t in fig.data if t.name == "labels")
    lines = [line.strip("\u2003") for text in labels.text for line in text.split("<br>")]
    assert len(lines) == len(rows)  # one line per point
    for size in set(labels.x):
        ys = sorted(float(y) for x, y in zip(labels.x, labels.y) if x == size)
        assert all(b - a >= 0.035 for a, b in itertools.pairwise(ys))  # labels of one column stay apart
    assert {t.name for t in fig.data} >= {"MHA", "GQA / MQA", "MLA", "window", "Diff", "MoH", "this layer's variant"}
    ringed = next(t for t in fig.data if t.name == "this layer's variant")
    assert list(ringed.text) == ["MLA c=8"]


def test_the_accuracy_axis_holds_every_label_block_so_none_runs_into_the_tick_labels() -> None:
    from mha_viz.figures.training import LABEL_LINE_PX, PLOT_PX, accuracy_vs_cache_figure
    from mha_viz.training.variants import precomputed_variant_grid

    fig = accuracy_vs_cache_figure(precomputed_variant_grid())
    lo, hi = fig.layout.yaxis.range
    line = (hi - lo) * LABEL_LINE_PX / PLOT_PX
    labels = next(t for t in fig.data if t.name == "labels")
    for y, text in zip(labels.y, labels.text):
        half = (text.count("<br>") + 1) * line / 2
        assert lo <= y - half and y + half <= hi, text  # the block of names stays inside the plotting area
    assert all(0 <= v <= 1 for v in fig.layout.yaxis.tickvals)


def test_label_blocks_of_one_column_never_overlap_at_the_axis_scale() -> None:
    from mha_viz.figures.training import LABEL_LINE_PX, PLOT_PX, accuracy_vs_cache_figure
    from mha_viz.training.variants import precomputed_variant_grid

    fig = accuracy_vs_cache_figure(precomputed_variant_grid())
    lo, hi = fig.layout.yaxis.range
    line = (hi - lo) * LABEL_LINE_PX / PLOT_PX
    labels = next(t for t in fig.data if t.name == "labels")
    for size in set(labels.x):
        blocks = sorted((float(y), (t.count("<br>") + 1) * line / 2) for x, y, t in zip(labels.x, labels.y, labels.text)
                        if x == size)
        for (y0, h0), (y1, h1) in itertools.pairwise(blocks):
            assert y1 - h1 >= y0 + h0 - 1e-9, size  # the upper block starts above where the lower one ends
