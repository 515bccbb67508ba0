"""Every registered attention variant (mha_viz.variants.VARIANTS) in every view and analysis section the configurable
menu offers for it: drawn without an exception or an error, with the variant's caption on the page and, in Formulas,
its own lines. Each variant is drawn at its spec's example (URL parameters away from its defaults), so a variant added
in one file is in these tests with no line here (tests/app/test_variant_recipe_app.py tries it with a toy one)."""

from __future__ import annotations

import pytest

import mha_viz.params  # noqa: F401 - registers the views and sections the menus list
from mha_viz.config import MHAConfig
from mha_viz.formulas import variant_formulas
from mha_viz.parts import SECTIONS, VIEWS
from mha_viz.sources import ConfigurableSource, configurable_trace
from mha_viz.text import DEFAULT_TEXT
from mha_viz.variants import VARIANTS, LayerVariant, describe
from tests.app.test_gqa_app import new_app, texts
from tests.renderer_json import assert_draws_trace

CFG = MHAConfig(64, 4)  # the page's default d_model and h
FLAGS_VIEWS = ("Latent (MLA)", "Window & sinks", "Two maps", "Router (MoH)")  # the built-in variants' own views


def example(kind: str) -> LayerVariant:
    """The variant its spec's example URL names (its own fields parsed as a link's are)."""
    spec = VARIANTS[kind]
    return LayerVariant(kind, **{f.name: f.parse(spec.example[f.name]) for f in spec.fields if f.name in spec.example})


def offered(kind: str) -> tuple[str, ...]:
    return VIEWS.menu("Configurable", ConfigurableSource("a b", CFG, variant=example(kind)))


def draw_every_view(kind: str) -> None:
    """Every view the menu offers for the variant draws it, with its caption, its formulas and its Shapes & cost row."""
    variant = example(kind)
    caption = describe(CFG, variant)
    own_lines = variant_formulas(kind, variant.config(CFG), 2, **variant.params())
    for view in offered(kind):
        at = new_app(variant=kind, view=view, **VARIANTS[kind].example).run()
        assert not at.exception and not at.error, (kind, view)
        assert caption in texts(at), (kind, view)
        if view == "Formulas" and own_lines:
            assert any("what the variant computes" in s.value for s in at.subheader), kind
        if view == "Shapes & cost" and variant.shape(CFG).variant not in ("mha", "gqa"):
            assert any("layer's parameters" in s.value for s in at.subheader), kind
        if view == "Shapes & cost" and kind != "mha":
            assert at.table[-1].value.iloc[0, 0].startswith("the page's layer"), kind  # the variants table's first row
        if view == "Heads":
            causal = VARIANTS[kind].example.get("causal") == "true"  # a page field the example link may set
            assert_draws_trace(at, configurable_trace(DEFAULT_TEXT, CFG, causal=causal, variant=variant))  # the library's
        elif view in ("Lines", "One head", "Concat → W_O"):
            assert at.get("plotly_chart"), (kind, view)


def draw_every_section(kind: str) -> None:
    for section in SECTIONS.menu("Configurable", ConfigurableSource("a b", CFG, variant=example(kind))):
        at = new_app(variant=kind, view="Analysis", section=section, **VARIANTS[kind].example).run()
        assert not at.exception and not at.error, (kind, section)


def test_each_variant_view_is_offered_for_its_variant_only() -> None:
    flags = {spec.flag for spec in VARIANTS.values() if spec.flag}
    assert {name for name in VIEWS if set(VIEWS.part(name).needs) & flags} == set(FLAGS_VIEWS)
    for kind, spec in VARIANTS.items():
        own = [v for v in offered(kind) if set(VIEWS.part(v).needs) & flags]
        assert own == [v for v in VIEWS if spec.flag and spec.flag in VIEWS.part(v).needs], kind
    assert [v for v in FLAGS_VIEWS if v in offered("mha")] == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(VARIANTS))
def test_every_offered_view_draws_the_variant_without_an_error(kind: str) -> None:
    draw_every_view(kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [k for k in VARIANTS if k != "mha"])  # mha: every section's own tests
def test_every_analysis_section_takes_the_variant_or_says_why_not(kind: str) -> None:
    draw_every_section(kind)
