"""The bundled hybrid mha-viz/hybrid-2l (a Gated DeltaNet layer, then an attention layer): offline loading, its
traces checked against the model's own numbers, what it learned (it finds the needles, far beyond its training
length), and that its recipe trains deterministically."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from functools import cache

import numpy as np
import pytest
import torch

import mha_viz
from mha_viz.analysis import mixer_stats
from mha_viz.pretrained import HYBRID_MODEL, PretrainedModel, load_model, loading
from mha_viz.training.recall import HYBRID, POSITIONS, example_text, recall_accuracy, train

pytestmark = pytest.mark.usefixtures("one_thread")


@cache
def bundled_hybrid() -> PretrainedModel:
    return load_model(HYBRID_MODEL)


@pytest.fixture(scope="module")
def model() -> PretrainedModel:
    return bundled_hybrid()


def test_it_loads_offline_as_a_linear_layer_then_an_attention_layer(monkeypatch, model):
    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading, "_load_hub", no_hub)
    m = load_model(HYBRID_MODEL)
    assert m.name == HYBRID_MODEL == mha_viz.HYBRID_MODEL == "mha-viz/hybrid-2l"
    assert (m.architecture, m.num_layers, m.num_heads) == ("qwen3_5_text", {"decoder": 2}, {"decoder": 4})
    assert m.model.config.layer_types == ["linear_attention", "full_attention"]
    assert m.adapter.max_positions() == POSITIONS and m.max_tokens == 512
    assert all(torch.all(p == 0) for block in m.model.model.layers for p in block.mlp.parameters())
    recorded = json.loads((loading.shipped_model_dir(HYBRID_MODEL) / "recipe.json").read_text())
    assert recorded == json.loads(json.dumps(asdict(HYBRID)))


def test_its_traces_equal_the_models_own_numbers(model):
    """Layer 0's mixing matrices times its values give the Gated DeltaNet's own output, and layer 1's weights are
    softmax rows; the trace's self-checks (against the unmodified modules) hold in float32."""
    text = example_text(200, needles=2, seed=5)
    mixer, attention = model.traces(text)
    assert mixer.kind == "linear" and attention.kind == "softmax"
    assert max(mixer.meta["check"].values()) <= 1e-4 and max(attention.meta["check"].values()) <= 1e-5
    np.testing.assert_allclose(attention.weights.sum(-1), 1.0, atol=1e-5)
    assert np.abs(np.triu(mixer.weights, 1)).max() == 0  # causal
    stats = mixer_stats(mixer)
    assert (stats.negative > 0).all()  # the delta rule subtracts what it overwrites: some entries are negative


@pytest.mark.slow
def test_its_recall_holds_far_beyond_its_training_length(model):
    assert recall_accuracy(model, 512, sequences=4) >= 0.875


def test_the_hybrid_recipe_trains_deterministically_with_zero_mlps():
    recipe = replace(HYBRID, steps=2, batch_size=2, seq_len=40, d_model=16, num_heads=2, max_needles=2,
                     longer=((1, 48, 2),))
    first, second = train(recipe).state_dict(), train(recipe).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert all(torch.all(v == 0) for k, v in first.items() if ".mlp." in k)
    assert any("linear_attn" in k for k in first) and any("self_attn" in k for k in first)
    with pytest.raises(ValueError, match="a hybrid"):
        replace(HYBRID, window=16)
