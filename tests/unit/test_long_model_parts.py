"""What the app's long view of a pretrained model stands on: the layers x heads statistics figure, the source's
long input (cut to long_tokens, the closing special token kept), and the shared cache counting a long trace's bytes."""

from __future__ import annotations

import numpy as np
import pytest
import transformers as tf
from transformers import AutoTokenizer

from mha_viz.cache import ByteBudgetCache, sizeof
from mha_viz.figures.long_stats import long_stats_figure
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.pretrained.long import LongStats
from mha_viz.sources import ModelSource
from tests.plotly_json import z_matrix
from tests.tiny_causal import random_causal_lm

TEXT = " ".join(["the cat sat on the mat ."] * 150)  # 1052 tokens with [CLS] and [SEP]


@pytest.fixture(scope="module")
def model() -> PretrainedModel:
    config = tf.LlamaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=64, max_position_embeddings=2048)
    return PretrainedModel(random_causal_lm(config), AutoTokenizer.from_pretrained(bundled_model_dir()), name="llama")


def test_the_statistics_figure_is_layers_by_heads_with_every_statistic_on_hover() -> None:
    rng = np.random.default_rng(0)
    stats = LongStats(*(rng.random((3, 5)) for _ in range(4)), layers=(2, 5, 7))
    fig = long_stats_figure(stats, "entropy", tokens=16384)
    heat = fig.data[0]
    np.testing.assert_allclose(z_matrix(heat.to_plotly_json()), stats.entropy, rtol=1e-6)
    assert list(fig.layout.yaxis.ticktext) == ["2", "5", "7"] and heat.z.dtype == np.float32
    assert all(name in heat.hovertemplate for name in ("distance", "entropy", "first token", "sink"))
    np.testing.assert_allclose(heat.customdata[1, 2], [5, stats.distance[1, 2], stats.entropy[1, 2],
                                                       stats.first[1, 2], stats.sink[1, 2]], rtol=1e-6)
    assert "16,384 tokens" in fig.layout.title.text and "3 layers × 5 heads" in fig.layout.title.text
    with pytest.raises(ValueError, match="stat must be one of"):
        long_stats_figure(stats, "mass")
    with pytest.raises(ValueError, match="same"):
        long_stats_figure({"distance": np.ones((2, 3)), "entropy": np.ones((2, 4))})


def test_the_sources_long_input_is_cut_to_long_tokens_keeping_the_closing_token(model) -> None:
    whole = ModelSource(model, TEXT, model.parts[0])
    ids = whole.long_ids()
    assert len(ids) == 1052 and whole.long_limit() == 2048 and whole.is_long()  # model.max_tokens: 512
    cut = ModelSource(model, TEXT, model.parts[0], long_tokens=700)
    assert cut.long_ids() == (*ids[:699], ids[-1]) and cut.long_limit() == 700 and cut.is_long()
    assert not ModelSource(model, TEXT, model.parts[0], long_tokens=512).is_long()  # no more than the window
    assert not ModelSource(model, "the cat sat", model.parts[0]).is_long()


def test_the_shared_cache_counts_a_long_traces_bytes(model) -> None:
    long = ModelSource(model, TEXT, model.parts[0], long_tokens=600).long_trace()
    assert long.nbytes > 600 * 2 * 4 * 32  # Q alone: 600 tokens x 2 layers x 4 heads x d 8 x 4 bytes
    assert long.nbytes <= sizeof(long) <= long.nbytes + sum(map(len, long.tokens)) + 64  # and its token strings
    cache = ByteBudgetCache(long.nbytes - 1)
    cache.get("long", lambda: long)
    assert "long" not in cache  # larger than the whole cache: used once, not kept
