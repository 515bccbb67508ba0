"""How the figures and head statistics show the traced variants: differential attention's signed weights on a scale
centred at 0, a gpt-oss head's sink mass in its statistics, GQA groups and sliding windows in the overview."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoModel, AutoTokenizer

from mha_viz.analysis import trace_head_stats
from mha_viz.figures import head_steps_figure, heads_figure, overview_figure
from mha_viz.figures.analysis import head_stats_figure
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import random_model
from tests.unit.test_families import FAMILIES

TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    return {name: PretrainedModel(random_model(AutoModel, FAMILIES[name][1]()), tokenizer, name=f"tiny-{name}")
            for name in ("gpt_oss", "diffllama")}


def test_differential_weights_are_drawn_signed_around_zero(models):
    trace = models["diffllama"].trace(TEXT, 1)
    assert trace.weights.min() < 0  # the case this is about: map1 - lambda * map2 goes negative
    for axis in (heads_figure(trace).layout.coloraxis, head_steps_figure(trace, 0).layout.coloraxis3):
        assert axis.cmin < 0 and axis.cmin == -axis.cmax
        assert axis.cmax >= np.abs(trace.weights[0]).max() - 1e-6
    titles = [a.text for a in head_steps_figure(trace, 0).layout.annotations]
    assert f"weights = map₁ − λ·map₂, λ = {trace.lambdas[0]:.3f}  [{len(trace.query_tokens)}×{len(trace.key_tokens)}]" in titles
    signed = np.stack([models["diffllama"].trace(TEXT, layer).weights for layer in range(2)])  # what the app draws
    thumbnails = overview_figure(signed).layout.coloraxis
    assert thumbnails.cmin < 0 and thumbnails.cmin == -thumbnails.cmax


def test_softmax_weights_stay_on_zero_to_one(models):
    trace = models["gpt_oss"].trace(TEXT, 1)
    axis = heads_figure(trace).layout.coloraxis
    assert axis.cmin == 0 and axis.colorscale != heads_figure(models["diffllama"].trace(TEXT, 1)).layout.coloraxis.colorscale
    steps = head_steps_figure(trace, 0).layout.coloraxis3
    assert (steps.cmin, steps.cmax) == (0, 1)
    assert overview_figure(models["gpt_oss"].attentions(TEXT)).layout.coloraxis.cmin == 0


def test_sink_column_is_the_mean_share_each_row_leaves_to_the_sink(models):
    trace = models["gpt_oss"].trace(TEXT, 0)
    stats = trace_head_stats(trace)
    expected = (1.0 - trace.weights.astype(np.float64).sum(-1)).mean(-1)  # (H,)
    assert trace.sinks is not None and expected.min() > 0
    np.testing.assert_allclose(stats.columns()["sink"], expected, atol=1e-6)
    assert "sink" in head_stats_figure(stats).layout.xaxis.ticktext
    plain = trace_head_stats(models["diffllama"].trace(TEXT, 0))
    assert plain.sink is None and "sink" not in plain.columns()


def test_overview_labels_kv_groups_and_windowed_layers(models):
    m = models["gpt_oss"]
    traces = [m.trace(TEXT, layer) for layer in range(2)]
    assert traces[0].kv_heads == (0, 0, 1, 1)
    fig = overview_figure(m.attentions(TEXT), kv_heads=traces[0].kv_heads, windows=[t.meta.get("window") for t in traces])
    labels = [a.text for a in fig.layout.annotations]
    assert "L0 (window 4)" in labels and "L1" in labels  # layer 1 attends to every earlier token
    assert [f"H{h}<br>KV{g}" for h, g in enumerate((0, 0, 1, 1))] == [t for t in labels if t.startswith("H")]
    between = (fig.layout.xaxis2.domain[1] + fig.layout.xaxis3.domain[0]) / 2  # between heads 1 and 2
    assert [s.x0 for s in fig.layout.shapes] == [pytest.approx(between)]
    with pytest.raises(ValueError, match="K/V head numbers"):
        overview_figure(m.attentions(TEXT), kv_heads=(0, 1))
