"""CONTRIBUTING.md's "Add an attention variant" recipe, tried: its toy variant (scaled attention: every score times a
whole-number factor), the guide's one file copied into a folder outside the package, is imported, and the
registry-parametrised checks run on it: the layer builds, its rows sum to 1, concat @ W_O^T + b_O is its output, its
URL fields round-trip, its controls render and move the layer, every view (Shapes & cost and Formulas included) and
every section draw it, and it trains. It is unregistered afterwards: the menus and the URL state are as before."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mha_viz.config import MHAConfig
from mha_viz.parts import all_fields
from mha_viz.sources import configurable_trace
from mha_viz.variants import VARIANTS, LayerVariant, unregister
from tests.app.test_gqa_app import new_app, texts
from tests.app.test_variants_every_view_app import draw_every_section, draw_every_view
from tests.unit.test_variant_registry import check_controls, check_layer, check_training, check_url

ROOT = Path(__file__).resolve().parents[2]


def recipe() -> str:
    """The toy variant file CONTRIBUTING.md's "Add an attention variant" shows: its first Python block."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("### Add an attention variant", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The toy variant's one file, imported (it registers itself); unregistered afterwards."""
    path = Path(tmp_path_factory.mktemp("toy")) / "scaled.py"
    path.write_text(recipe(), encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location("toy_scaled", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["toy_scaled"] = module
    module_spec.loader.exec_module(module)
    yield "scaled"
    unregister("scaled")
    del sys.modules["toy_scaled"]


def test_the_toy_layer_scales_its_scores_and_its_rows_sum_to_1(toy: str) -> None:
    check_layer(toy)
    cfg = MHAConfig(16, 4)
    trace = configurable_trace("the cat sat on the mat", cfg, seed=0, variant=LayerVariant(toy, factor=3))
    np.testing.assert_allclose(trace.weights.sum(-1), 1.0, atol=1e-5)
    plain = configurable_trace("the cat sat on the mat", cfg, seed=0)
    np.testing.assert_allclose(trace.scores, 3 * plain.scores, rtol=1e-4, atol=1e-5)  # the same weights, scaled
    assert trace.scale == pytest.approx(3 / math.sqrt(cfg.d_k))


def test_the_toy_url_controls_and_training_hooks(toy: str) -> None:
    check_url(toy)
    check_controls(toy)
    check_training(toy)


def test_the_toy_trains_and_joins_the_comparison_grid(toy: str) -> None:
    from mha_viz.training import train
    from mha_viz.training.variants import grid_variants, variant_label

    variant = LayerVariant(toy, factor=2)
    run = train("prev-first", 2, 16, 10, seed=0, num_snapshots=1, variant=variant)
    assert run.layer.variant == variant and run.layer.trace().meta["variant"] == toy
    assert variant in grid_variants(2) and variant_label(variant, 2) == "Scaled x2"


def test_the_toy_controls_render_and_move_the_layer(toy: str) -> None:
    at = new_app(variant=toy).run()
    assert not at.exception and not at.error
    assert "Scaled" in at.segmented_control(key="variant").options
    assert "every score times 2" in texts(at)  # the field's default
    at.slider(key="factor").set_value(5).run()
    assert not at.exception and "every score times 5" in texts(at)
    assert at.query_params["factor"] == "5" and at.query_params["variant"] == toy  # a share link holds it


@pytest.mark.slow
def test_every_view_draws_the_toy(toy: str) -> None:
    draw_every_view(toy)  # Shapes & cost: its own row first; Formulas: its own lines


def test_shapes_and_cost_and_formulas_show_the_toy(toy: str) -> None:
    at = new_app(variant=toy, view="Shapes & cost", factor="3").run()
    assert not at.exception and at.table[-1].value.iloc[0, 0] == "the page's layer (Scaled)"
    at = new_app(variant=toy, view="Formulas", factor="3").run()
    assert any(s.value == "Scaled: what the variant computes" for s in at.subheader)
    assert any(r"3 \cdot" in line.body for line in at.latex)


@pytest.mark.slow
def test_every_section_draws_the_toy(toy: str) -> None:
    draw_every_section(toy)


def test_unregistered_the_toy_leaves_no_trace(toy: str) -> None:
    spec = VARIANTS[toy]
    unregister(toy)
    try:
        assert toy not in VARIANTS and "factor" not in all_fields()
        assert list(VARIANTS) == ["mha", "gqa", "mla", "window", "diff", "moh"]
    finally:
        from mha_viz.variants import register

        register(spec)  # the fixture unregisters it at the end
