"""What W_O does (mha_viz.analysis.readout): each head's block of W_O followed to the readout that reads it.

Exact: the heads' terms and the biases add up to the model's own logits. Known answers: on the shipped h=2 prev-first
layer each relation has its own head (bench/RESULTS-training.md), whose token map sends every letter to itself; with
h=1 the one head serves both relations; the bundled induction model's induction heads write the attended token."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from mha_viz import INDUCTION_MODEL, load_model
from mha_viz.analysis import detect_heads, direct_logits, model_readout, trained_readout
from mha_viz.training.precomputed import precomputed_layer
from mha_viz.training.tasks import get_task


def shipped(h: int):
    return precomputed_layer("prev-first", h, 64, 0, 600)


@pytest.fixture(scope="module")
def induction():
    return load_model(INDUCTION_MODEL)


@pytest.mark.parametrize("h", [1, 2, 4])
def test_the_heads_terms_and_the_biases_add_up_to_the_models_logits(h: int) -> None:
    tokens = get_task("prev-first").sample(16, torch.Generator().manual_seed(3)).numpy()  # (16, 10)
    split = direct_logits(shipped(h), tokens)
    assert split.heads.shape == (16, 10, h, 2, 26)
    np.testing.assert_allclose(split.total, split.logits, atol=2e-4)
    assert np.abs(split.logits).max() > 5  # the logits are not trivially small


@pytest.mark.parametrize("h", [1, 2, 4, 8])
def test_the_mean_contributions_and_the_rest_add_up_to_the_mean_logit_of_the_right_answer(h: int) -> None:
    r = trained_readout(shipped(h))
    assert r.contributions.shape == (h, 2) and r.token_maps.shape == (h, 2, 26, 26)
    np.testing.assert_allclose(r.contributions.sum(0) + r.rest, r.logit, atol=1e-4)
    assert (r.logit > 10).all()  # the trained layer is sure of the right answer
    np.testing.assert_allclose(r.token_maps.mean(-1), 0, atol=1e-4)  # rows centred over the answers


def test_with_two_heads_each_relation_is_served_by_its_own_head_which_copies_the_token() -> None:
    layer = shipped(2)
    r = trained_readout(layer)
    attends = tuple((int(layer.scores[:, k].argmax()),) for k in range(2))  # the head that attends to each key
    assert r.serving() == attends and attends[0] != attends[1]
    for k, (h,) in enumerate(attends):
        other = 1 - h
        assert r.contributions[h, k] > 10 and abs(r.contributions[other, k]) < 0.5
        assert r.copying[h, k] == 1.0  # every letter's top answer is the letter itself
        assert r.diagonal[h, k] > 5 * r.diagonal[other, k]
    said = r.sentences()
    assert len(said) == 2
    assert said[0].startswith(f"Head {attends[0][0]} writes the previous token's identity")
    assert said[1].startswith(f"Head {attends[1][0]} writes the first token's identity")
    assert f"+{r.contributions[attends[0][0], 0]:.1f}" in said[0]


def test_with_one_head_the_single_head_serves_both_relations() -> None:
    r = trained_readout(shipped(1))
    assert r.serving() == ((0,), (0,))
    assert (r.contributions > 10).all() and (r.copying == 1.0).all()
    (said,) = r.sentences()
    assert said.startswith("Head 0 serves every relation at once")
    assert f"+{r.contributions[0, 1]:.1f} for 'first'" in said


def test_bad_tokens_are_refused() -> None:
    with pytest.raises(ValueError, match="ids of the task"):
        trained_readout(shipped(2), np.full((2, 10), 26))


def test_the_induction_heads_write_the_attended_tokens_identity_into_the_unembedding(induction) -> None:
    r = model_readout(induction)
    L, H = 2, 4
    assert r.heads == tuple(f"L{l} H{h}" for l in range(L) for h in range(H)) and r.answers == ("next token",)
    np.testing.assert_allclose(r.contributions.sum(0) + r.rest, r.logit, atol=1e-4)
    found = detect_heads(induction)["induction"].reshape(-1) > 0.5  # (L*H,)
    assert found.any()
    copying = r.copying[:, 0]
    assert (copying[found] > 0.9).all()  # the top output of most source tokens is the token itself
    assert r.contributions[found, 0].min() > 5 * max(r.contributions[~found, 0].max(), 0.1)
    assert set(r.serving()[0]) <= set(np.flatnonzero(found).tolist())
    (said,) = r.sentences()
    assert "the attended token's identity into the unembedding" in said


def test_a_model_with_a_large_vocabulary_is_refused() -> None:
    from tests.tiny_causal import tiny_causal

    model = tiny_causal("gpt2")  # the MiniLM tokenizer's 30522 tokens
    with pytest.raises(ValueError, match="token maps"):
        model_readout(model)


def test_the_figures_have_integer_token_axes_one_colour_axis_and_words() -> None:
    from mha_viz.figures.common import describe
    from mha_viz.figures.readout import contributions_heatmap, token_map_figure

    r = trained_readout(shipped(2))
    fig = contributions_heatmap(r.contributions, r.heads, r.answers, title="direct contributions", width=1000)
    (heat,) = fig.data
    assert list(heat.x) == [0, 1] and list(heat.y) == [0, 1] and heat.zmid == 0
    assert list(fig.layout.xaxis.ticktext) == ["previous", "first"] and list(fig.layout.yaxis.ticktext) == [
        "head 0", "head 1"]
    words = describe(fig)
    assert "'head 0' (row 0) × 'previous'" in words and f"{r.contributions[0, 0]:.3g}" in words
    (h,) = r.serving()[0]
    tokens = token_map_figure(r.token_maps[h, 0], r.vocab, title="head map", width=1000)
    (heat,) = tokens.data
    assert np.asarray(heat.z).shape == (26, 26) and list(tokens.layout.xaxis.ticktext) == list("abcdefghijklmnopqrstuvwxyz")
    assert tokens.layout.yaxis.scaleanchor == "x" and heat.colorbar.orientation is None
    narrow = token_map_figure(r.token_maps[h, 0], r.vocab, width=340)
    assert narrow.data[0].colorbar.orientation == "h"  # above the plot: the map keeps the phone's width
    strongest = re.findall(r"source token \(attended\) (\d+)\)? × (?:'\w' \()?answer token (\d+)", describe(tokens))
    assert len(strongest) == 3 and all(s == a for s, a in strongest)  # the words name the diagonal: a copy
    with pytest.raises(ValueError, match="expected"):
        token_map_figure(r.token_maps[h, 0][:5], r.vocab)
