"""Every registered attention variant (mha_viz.variants.VARIANTS), at its spec's example: its layer builds and its
trace holds together, its URL fields round-trip, its cost shape and training hooks answer, its controls name real
fields. Parametrised from the registry: a variant added in one file is checked here with no line added
(tests/app/test_variant_recipe_app.py tries it with a toy variant)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.config import MHAConfig
from mha_viz.params import parse_query, to_query
from mha_viz.parts import all_fields, bounds
from mha_viz.sources import configurable_trace
from mha_viz.training.variants import variant_label, variant_shape
from mha_viz.variants import VARIANTS, LayerVariant, describe, variant_layer
from mha_viz.variants_cost import kv_bytes_per_token, parameters

CFG = MHAConfig(16, 4)


def example(kind: str) -> LayerVariant:
    """The variant its spec's example URL names (its own fields parsed as a link's are)."""
    spec = VARIANTS[kind]
    return LayerVariant(kind, **{f.name: f.parse(spec.example[f.name]) for f in spec.fields if f.name in spec.example})


def check_layer(kind: str) -> None:
    """The layer builds with the example's parameters; its trace's output is concat @ W_O^T + b_O, its weights hold
    one row a query and a key column each, and the cost model counts exactly its torch parameters where it prices the
    same layer (its shape is the variant's own)."""
    variant = example(kind)
    layer = variant_layer(CFG, variant, seed=0)
    trace = configurable_trace("the cat sat on the mat", CFG, seed=0, variant=variant)
    assert trace.meta["variant"] == kind
    T, S = trace.weights.shape[1:]
    assert T == S == 6 and trace.output.shape == (T, CFG.d_out)
    b_O = 0 if trace.b_O is None else trace.b_O
    np.testing.assert_allclose(trace.concat @ trace.W_O.T + b_O, trace.output, atol=1e-5)
    assert np.isfinite(trace.weights).all()
    shape = variant.shape(CFG)
    if shape.variant == kind:  # its own family in the cost model: the count is its layer's
        assert sum(parameters(shape).values()) == sum(p.numel() for p in layer.parameters())
    assert kv_bytes_per_token(variant_shape(CFG, variant)) > 0
    assert describe(CFG, variant) and f"h = {CFG.num_heads}" in variant.spec.title(variant.config(CFG), variant)
    assert isinstance(layer.attend(torch.zeros(3, CFG.d_model)).output, torch.Tensor)


def check_url(kind: str) -> None:
    """The example's URL parameters parse without a notice, give the same variant, and serialise back to themselves
    (the page fields an example sets too)."""
    spec = VARIANTS[kind]
    query = {"variant": kind, **spec.example}
    state, notices = parse_query(query)
    assert notices == [] and LayerVariant.of(state) == example(kind)
    assert to_query(state) == ({} if kind == "mha" else query)
    for f in spec.fields:
        assert all_fields()[f.name] is f  # a URL field, a widget key and a ViewState attribute
        assert getattr(parse_query({})[0], f.name) == f.default


def check_controls(kind: str) -> None:
    """Each control sets one of the variant's fields (or is a caption), and its choices are values its field takes."""
    spec = VARIANTS[kind]
    names = {f.name for f in spec.fields}
    values = {"h": CFG.num_heads, **example(kind).params()}
    for c in spec.controls:
        assert c.kind == "caption" or c.name in names, (kind, c.name)
        if c.options is not None:
            field = all_fields()[c.name]
            for option in c.options(values):
                assert field.parse(str(option)) == option, (kind, c.name, option)
        if c.kind in ("slider", "number") and c.bounds is None:
            assert bounds(c.name)


def check_training(kind: str) -> None:
    spec = VARIANTS[kind]
    for variant in spec.training.grid(CFG.num_heads):
        assert variant.kind == kind and variant_label(variant, CFG.num_heads)
    assert variant_label(example(kind), CFG.num_heads)


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_the_layer_builds_and_its_trace_holds_together(kind: str) -> None:
    check_layer(kind)


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_its_url_fields_round_trip(kind: str) -> None:
    check_url(kind)


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_its_controls_set_its_own_fields(kind: str) -> None:
    check_controls(kind)


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_its_training_hooks_name_its_runs(kind: str) -> None:
    check_training(kind)


def test_a_kind_or_a_field_twice_is_refused() -> None:
    from dataclasses import replace

    from mha_viz.variants import register

    with pytest.raises(ValueError, match="already registered"):
        register(VARIANTS["mla"])
    with pytest.raises(ValueError, match="already declared"):
        register(replace(VARIANTS["mla"], kind="mla2", fields=tuple(replace(f) for f in VARIANTS["mla"].fields)))
    assert "mla2" not in VARIANTS  # one field, one owner
    with pytest.raises(ValueError, match="variant must be one of"):
        LayerVariant("nope")
