"""Concat -> W_O on the bundled MiniLM (12 heads, W_O 384 x 384 with a few large entries): the W_O panel's colour
scale shows the bulk of the entries (clipped at a stated percentile), and every head's band has its own colour."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest

from mha_viz.config import MHAConfig
from mha_viz.figures import output_path_figure
from mha_viz.figures.common import OUTLIER_PERCENTILE, head_colours, robust_range
from mha_viz.pretrained import load_model
from mha_viz.sources import configurable_trace
from tests.plotly_json import heatmaps, z_matrix


@cache
def minilm_layer0():
    return load_model().trace("The animal didn't cross the street because it was too tired", 0)


def figure_json(trace) -> dict:
    return json.loads(output_path_figure(trace, width=1200).to_json())


def test_minilms_w_o_panel_is_coloured_by_its_bulk_not_its_outliers() -> None:
    fig = figure_json(minilm_layer0())
    W_O = z_matrix(heatmaps(fig)[1])
    axis = fig["layout"]["coloraxis2"]
    limit = axis["cmax"]
    assert axis["cmin"] == -limit
    size = np.abs(W_O)
    assert limit == pytest.approx(np.percentile(size, OUTLIER_PERCENTILE), rel=1e-5)
    assert np.median(size) / limit > 0.15  # the typical entry is not washed out to the middle colour
    assert size.max() > 5 * limit  # ... which the largest entry's scale did (its median was 3 % of it)
    ticks = axis["colorbar"]["ticktext"]
    assert ticks[0].startswith("≤ ") and ticks[-1].startswith("≥ ") and "clipped" in axis["colorbar"]["title"]["text"]


def test_a_scale_without_outliers_is_not_clipped() -> None:
    rng = np.random.default_rng(0)
    normal = robust_range(rng.standard_normal((64, 64)))
    assert normal.clipped == 0 and normal.limit == normal.largest and normal.sentence("W_O") == ""
    spiked = rng.standard_normal((64, 64))
    spiked[0, 0] = 100.0
    clipped = robust_range(spiked)
    assert clipped.limit < 4 and clipped.clipped > 0 and "100" in clipped.sentence("W_O")


@pytest.mark.parametrize("H", [1, 10, 12, 16, 24, 32, 64])
def test_every_head_gets_its_own_colour(H: int) -> None:
    colours = head_colours(H)
    assert len(colours) == H == len(set(colours))


def test_minilms_twelve_head_bands_are_twelve_colours() -> None:
    fig = figure_json(minilm_layer0())
    bands = [s for s in fig["layout"]["shapes"] if s["type"] == "rect" and s["xref"] == "x2"]  # W_O's head bands
    assert len(bands) == 12 and len({b["fillcolor"] for b in bands}) == 12


def test_a_small_layer_keeps_its_full_range() -> None:
    trace = configurable_trace("the cat sat on the mat", MHAConfig(d_model=16, num_heads=4))
    fig = figure_json(trace)
    assert fig["layout"]["coloraxis2"]["cmax"] == pytest.approx(np.abs(trace.W_O).max(), rel=1e-5)
