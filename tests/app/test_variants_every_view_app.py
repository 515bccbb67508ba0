"""Every attention variant in every view and analysis section the configurable menu offers for it: drawn without an
exception or an error, with the variant's caption on the page and, in Formulas, its own lines."""

from __future__ import annotations

import pytest

import mha_viz.params  # noqa: F401 - registers the views and sections the menus list
from mha_viz.config import MHAConfig
from mha_viz.parts import SECTIONS, VIEWS
from mha_viz.sources import ConfigurableSource
from mha_viz.variants import LayerVariant, describe
from tests.app.test_gqa_app import new_app, texts

VARIANTS = {  # URL parameters of each kind, away from the defaults where it has parameters
    "mha": {},
    "gqa": {"kv_heads": "2"},
    "mla": {"kv_latent": "8", "rope_dim": "6", "q_latent": "4"},
    "window": {"window": "3", "sinks": "tokens", "causal": "true"},
    "diff": {},
    "moh": {"moh_k": "1", "moh_shared": "1"},
}


def variant(kind: str) -> LayerVariant:
    params = {k: int(v) if v.isdigit() else v for k, v in VARIANTS[kind].items() if k != "causal"}
    return LayerVariant(kind, **params)


def offered(kind: str) -> tuple[str, ...]:
    return VIEWS.menu("Configurable", ConfigurableSource("a b", MHAConfig(64, 4), variant=variant(kind)))


def test_each_variant_view_is_offered_for_its_variant_only() -> None:
    own = {"mla": "Latent (MLA)", "window": "Window & sinks", "diff": "Two maps", "moh": "Router (MoH)"}
    for kind in VARIANTS:
        menu = offered(kind)
        assert [v for v in own.values() if v in menu] == ([own[kind]] if kind in own else []), kind


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(VARIANTS))
def test_every_offered_view_draws_the_variant_without_an_error(kind: str) -> None:
    caption = describe(MHAConfig(64, 4), variant(kind))
    for view in offered(kind):
        at = new_app(variant=kind, view=view, **VARIANTS[kind]).run()
        assert not at.exception and not at.error, (kind, view)
        assert caption in texts(at), (kind, view)
        if view == "Formulas" and kind not in ("mha", "gqa"):
            assert any("what the variant computes" in s.value for s in at.subheader), kind
        if view == "Shapes & cost" and kind not in ("mha", "gqa"):
            assert any("layer's parameters" in s.value for s in at.subheader), kind
            assert at.table[-1].value.iloc[0, 0].startswith("the page's layer"), kind  # the variants table's first row
        if view in ("Heads", "Lines", "One head", "Concat → W_O"):
            assert at.get("plotly_chart"), (kind, view)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mla", "window", "diff", "moh"])
def test_every_analysis_section_takes_the_variant_or_says_why_not(kind: str) -> None:
    for section in SECTIONS.menu("Configurable", ConfigurableSource("a b", MHAConfig(64, 4), variant=variant(kind))):
        at = new_app(variant=kind, view="Analysis", section=section, **VARIANTS[kind]).run()
        assert not at.exception and not at.error, (kind, section)
