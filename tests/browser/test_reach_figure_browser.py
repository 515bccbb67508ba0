"""The visibility X-ray of a model with a planted bug, drawn for real (kaleido driving Debian's Chromium), as a
researcher with their own model gets it in a notebook: a tiny Mistral whose second layer's sliding window lets one
key too many through is flagged at that layer, and its picture shows the extra pairs in the "reached, declared hidden"
colour, where the unpatched model's shows none. With --update-assets it is the README's picture
(assets/layer-reach-bug.png)."""

from __future__ import annotations

import numpy as np
import pytest
import transformers as tf
from PIL import Image
from transformers import AutoModelForCausalLM, AutoTokenizer

from harness.browser import CHROMIUM, require_tools
from mha_viz.analysis import visibility
from mha_viz.figures.reach import COLOURS, reach_figure
from mha_viz.paper import save_figure
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import random_model
from tests.unit.test_visibility import SMALL, on_mask, wider

require_tools({CHROMIUM: "chromium"})
pytest.importorskip("kaleido")

T = 24


@pytest.fixture(scope="module")
def mistral() -> PretrainedModel:
    config = tf.MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=4)
    return PretrainedModel(random_model(AutoModelForCausalLM, config),
                           AutoTokenizer.from_pretrained(bundled_model_dir()), name="tiny Mistral, window 4")


def picture(mistral: PretrainedModel, path, planted: bool) -> tuple[np.ndarray, str]:
    """The layer-1 reach picture's pixels (RGB) and its verdict, with the bug planted or not."""
    site = mistral.adapter.site("decoder", 1).attention
    handle = site.register_forward_pre_hook(on_mask(wider), with_kwargs=True) if planted else None
    try:
        report = visibility(mistral, T)
    finally:
        if handle is not None:
            handle.remove()
    reach = report.layers[1]
    fig = reach_figure(reach.measured, reach.declared, [str(i) for i in range(T)], width=900,
                       title=f"{mistral.name}, layer 1: {reach.verdict}").update_layout(width=900)  # as drawn
    save_figure(fig, path, preset=None, dpi=144)
    return np.asarray(Image.open(path).convert("RGB")).astype(int), reach.verdict


def painted(pixels: np.ndarray, colour: str) -> int:
    """How many pixels are within a few levels of colour (#rrggbb)."""
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - rgb).max(-1) <= 6).sum())


def test_a_planted_window_bug_is_drawn_where_it_is(mistral, tmp_path, assets) -> None:
    clean, verdict = picture(mistral, tmp_path / "clean.png", planted=False)
    assert verdict == "as declared"
    bug, verdict = picture(mistral, assets / "layer-reach-bug.png", planted=True)
    assert verdict.startswith("query 4 sees key 0, against the declared causal, window 4 (20 pairs reached")
    # the colour bar shows every colour in both pictures: the pairs are what one has more of than the other
    reached = int(((np.arange(T)[:, None] - np.arange(T)) % T < 4).sum())  # the clean picture's dark cells
    cell = (painted(clean, COLOURS[1]) - painted(clean, COLOURS[2])) / reached  # one cell (the bar's bands are alike)
    extra = painted(bug, COLOURS[2]) - painted(clean, COLOURS[2])
    assert 0.8 * 20 * cell < extra < 1.2 * 20 * cell, (extra, cell)  # 20 cells: one key too far back from query 4 on
    # no pair missed, the declared ones all reached (a longer title makes the bar's bands a little longer)
    assert abs(painted(bug, COLOURS[3]) - painted(clean, COLOURS[3])) < cell / 2
    assert abs(painted(bug, COLOURS[1]) - painted(clean, COLOURS[1])) < cell / 2
