"""The variant foundation: LayerVariant's validation, the registry and the configurable source's variant."""

from __future__ import annotations

import pytest

from mha_viz.config import MHAConfig
from mha_viz.params import LAYER_VARIANTS, parse_query
from mha_viz.parts import capable
from mha_viz.sources import ConfigurableSource, configurable_trace
from mha_viz.variants import KINDS, PARAMETERS, LayerVariant, describe, variant_layer


def test_every_kind_is_offered_by_the_app_and_reads_only_its_own_parameters() -> None:
    assert list(KINDS) == list(LAYER_VARIANTS) == ["mha", "gqa", "mla", "window", "diff", "moh"]  # the registry
    v = LayerVariant("window", kv_heads=3, window=7, moh_k=5)
    assert (v.window, v.kv_heads, v.moh_k) == (7, 1, 2)  # kv_heads and moh_k belong to other kinds: defaults
    assert v == LayerVariant("window", window=7)
    assert set(v.params()) == set(PARAMETERS["window"])


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "sparse"}, "variant must be one of"),
    ({"kind": "mla", "rope_dim": 3}, "rope_dim must be even"),
    ({"kind": "mla", "kv_latent": 0}, "kv_latent must be a whole number ≥ 1"),
    ({"kind": "mla", "kv_latent": 257}, "kv_latent must be at most 256"),
    ({"kind": "window", "sinks": "all"}, "sinks must be one of"),
    ({"kind": "window", "window": True}, "window must be a whole number"),
])
def test_invalid_parameters_are_refused_with_the_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LayerVariant(**kwargs)


@pytest.mark.parametrize("variant, h, message", [
    (LayerVariant("gqa", kv_heads=3), 4, "kv_heads = 3 does not divide h = 4"),
    (LayerVariant("diff"), 3, "h must be even"),
    (LayerVariant("moh", moh_shared=4), 4, "must be below h = 4"),
    (LayerVariant("moh", moh_k=3, moh_shared=2), 4, "more than the 2 routed heads"),
])
def test_a_variant_that_cannot_run_with_these_dimensions_says_why(variant: LayerVariant, h: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        variant_layer(MHAConfig(12, h), variant)


def test_gqa_through_the_registry_is_the_grouped_layer() -> None:
    layer = variant_layer(MHAConfig(64, 8), LayerVariant("gqa", kv_heads=2), seed=0)
    assert layer.config.kv_heads == 2 and layer.W_K.shape[0] == 2
    assert "2 key/value heads" in describe(MHAConfig(64, 8), LayerVariant("gqa", kv_heads=2))
    assert "Multi-query" in describe(MHAConfig(64, 8), LayerVariant("gqa", kv_heads=1))


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_registered_variant_traces_text_with_its_kind_in_meta(kind: str) -> None:
    cfg = MHAConfig(32, 4)
    trace = configurable_trace("the cat sat on the mat", cfg, variant=LayerVariant(kind), causal=True)
    assert trace.meta["variant"] == kind
    assert trace.weights.shape[1:] == (6, 6)
    source = ConfigurableSource("the cat sat", cfg, variant=LayerVariant(kind))
    flags = {"mla": "latent", "window": "windowed", "diff": "differential", "moh": "routed"}  # what the views need
    assert [f for f in flags.values() if capable(source, f)] == ([flags[kind]] if kind in flags else [])


def test_variant_parameters_round_trip_through_the_url() -> None:
    state, notices = parse_query({"variant": "mla", "kv_latent": "8", "rope_dim": "6", "q_latent": "4"})
    assert not notices and (state.variant, state.kv_latent, state.rope_dim, state.q_latent) == ("mla", 8, 6, 4)
    state, notices = parse_query({"variant": "window", "window": "0", "rope_dim": "3", "sinks": "many"})
    assert {n.split("=")[0].split()[-1] for n in notices} >= {"window", "rope_dim", "sinks"}
    assert (state.window, state.rope_dim, state.sinks) == (4, 4, "logit")


@pytest.mark.parametrize("variant", [
    LayerVariant("mha"), LayerVariant("gqa", kv_heads=2), LayerVariant("gqa", kv_heads=1), LayerVariant("mla"),
    LayerVariant("mla", q_latent=8, rope_dim=0), LayerVariant("window", sinks="logit"), LayerVariant("window", sinks="tokens"),
    LayerVariant("diff"), LayerVariant("moh"), LayerVariant("moh", moh_k=1, moh_shared=1),
], ids=lambda v: f"{v.kind}-{'-'.join(map(str, v.params().values()))}")
def test_shapes_and_cost_prices_exactly_the_parameters_the_layer_has(variant: LayerVariant) -> None:
    from mha_viz.variants_cost import parameters

    cfg = MHAConfig(64, 4)
    layer = variant_layer(cfg, variant, seed=0)
    assert sum(p.numel() for p in layer.parameters()) == sum(parameters(variant.shape(cfg)).values())
