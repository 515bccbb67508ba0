"""The bundled long-context model mha-viz/recall-16k: offline loading, what it learned (it finds a needle
16,384 tokens back, through a previous-token head in layer 0 and retrieval heads in layer 1), its long trace at 16k
tokens, and its training data and determinism (integrity: tests/unit/test_shipped_models.py)."""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import cache

import numpy as np
import pytest
import torch

from mha_viz.analysis import detect_heads
from mha_viz.pretrained import RECALL_MODEL, PretrainedModel, load_model, loading, recall_model_dir
from mha_viz.training.induction import VOCABULARY
from mha_viz.training.recall import (
    KEY_IDS,
    POSITIONS,
    Recipe,
    example_text,
    recall_accuracy,
    sample,
    sample_batch,
    train,
)

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = "cat red sky dog blue sea cat"  # "cat" again: a retrieval head in layer 1 reads "red", what followed it


@cache
def bundled_recall() -> PretrainedModel:
    return load_model(RECALL_MODEL)


@pytest.fixture(scope="module")
def model() -> PretrainedModel:
    return bundled_recall()


def test_it_loads_offline_with_16k_positions_and_zero_mlps(monkeypatch, model):
    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading, "_load_hub", no_hub)
    m = load_model(RECALL_MODEL)
    assert m.name == RECALL_MODEL == "mha-viz/recall-16k"
    assert (m.architecture, m.kind, m.num_layers, m.num_heads) == ("smollm3", "decoder", {"decoder": 2}, {"decoder": 4})
    assert m.adapter.max_positions() == POSITIONS == 16384 and m.model.config._attn_implementation == "eager"
    assert m.max_tokens == 512  # traced in full up to 512 tokens (the tokenizer's model_max_length); longer: long
    assert m.tokenizer.get_vocab() == {word: i for i, word in enumerate(VOCABULARY)}
    assert all(torch.all(p == 0) for block in m.model.model.layers for p in block.mlp.parameters())
    recorded = json.loads((recall_model_dir() / "recipe.json").read_text())
    assert recorded == json.loads(json.dumps(asdict(Recipe())))  # the default recipe (JSON has lists, not tuples)


def test_each_sequence_hides_distinct_needles_in_a_haystack_without_keys_and_asks_for_them_at_the_end():
    tokens, predictable = sample(300, 5, torch.Generator().manual_seed(0))
    asked = predictable.nonzero()[:, 0]
    assert tokens[0] == 0 and len(asked) == 5 and asked.tolist() == list(range(291, 300, 2))
    keys = tokens[asked - 1]
    assert len(set(keys.tolist())) == 5 and torch.isin(keys, KEY_IDS).all()
    haystack = tokens[1:290]
    for key, value in zip(keys.tolist(), tokens[asked].tolist(), strict=True):
        (where,) = (haystack == key).nonzero()[:, 0].tolist()  # written once
        assert haystack[where + 1] == value
    assert int(torch.isin(haystack, KEY_IDS).sum()) == 5  # no other key anywhere
    batch, marks = sample_batch(Recipe(batch_size=3, seq_len=200), torch.Generator().manual_seed(1))
    assert batch.shape == marks.shape == (3, 200) and marks.sum(1).min() > 1  # queries, and a copied stretch


def test_training_is_deterministic_and_keeps_the_mlps_at_zero():
    recipe = Recipe(steps=2, batch_size=2, seq_len=40, d_model=16, num_heads=2, max_needles=2, longer=((1, 48, 2),))
    first, second = train(recipe).state_dict(), train(recipe).state_dict()
    other = train(Recipe(**{**asdict(recipe), "seed": 1})).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])
    assert all(torch.all(v == 0) for k, v in first.items() if ".mlp." in k)


def test_a_windowed_rotary_layer_then_a_layer_without_positions(model):
    first, second = model.traces(TEXT)
    assert first.meta["window"] == 16 and "window" not in second.meta  # layer 0 sees 16 tokens, layer 1 all of them
    assert model.adapter.site("decoder", 0).attention.use_rope and not model.adapter.site("decoder", 1).attention.use_rope
    for t in (first, second):
        assert max(t.meta["check"].values()) <= 1e-5


def test_a_previous_token_head_in_layer_0_and_retrieval_heads_in_layer_1(model):
    scores = detect_heads(model)
    assert scores["previous"][0].max() >= 0.8  # head 2
    assert (scores["induction"][1] >= 0.8).sum() >= 3 and scores["induction"][0].max() < 0.1


@pytest.mark.slow
def test_it_finds_the_needles_16k_tokens_back(model):
    assert recall_accuracy(model, 16384, sequences=2) >= 0.875  # 8 queries; measured 1.0 (README)
    assert recall_accuracy(model, 1024, sequences=4) >= 0.875


@pytest.mark.slow
def test_its_long_trace_at_16k_tokens_shows_the_retrieval_heads_reading_each_needle(model):
    text = example_text(16384, 4, seed=3)
    long = model.long_trace(text)
    assert long.num_tokens == 16384 and long.nbytes < 100 * 2**20
    ids = np.array(long.ids)
    for query in range(16384 - 8, 16384, 2):  # the four queries' keys at the end
        (needle,) = np.nonzero(ids[1 : 16384 - 8] == ids[query])[0] + 1
        reading = [h for h in range(4) if long.row(1, h, query)[needle + 1] > 0.5]  # the needle's value
        assert len(reading) >= 2 and int(long.row(1, reading[0], query).argmax()) == needle + 1
        assert 16384 - 8 - needle > 2000  # written thousands of tokens back
    first = long.stats().first  # [layers, heads]: the mean weight on the first token: no sink in this model
    assert first.shape == (2, 4) and first.max() < 0.01
