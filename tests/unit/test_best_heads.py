"""The most informative head of Circuits, W_O at work and Composition, from the library: the head that copies most,
the largest direct contribution, the strongest composition pair (and what a reader reads most)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import mha_viz
from mha_viz.analysis import copying_scores
from mha_viz.analysis.circuits import CopyingScores
from mha_viz.analysis.composition import composition
from mha_viz.analysis.readout import model_readout


@pytest.fixture(scope="module")
def induction():
    return mha_viz.load_model(mha_viz.INDUCTION_MODEL)


def test_on_induction_2l_the_picks_are_an_induction_head_and_the_previous_token_pair(induction) -> None:
    c = copying_scores(induction.head_weights())
    assert c.most_copying() == (1, 1) and c.scores[1, 1] == np.nanmax(c.scores)
    r = model_readout(induction)
    assert r.strongest() == (4, 0) and r.heads[4] == "L1 H0" and r.contributions[4, 0] == r.contributions.max()
    k = composition(induction, "k")
    assert k.strongest_pair() == ((0, 2), (1, 0))  # the previous-token head into an induction head's keys
    for head in range(4):  # every induction head's keys read the previous-token head most
        assert k.strongest_writer(1, head) == (0, 2)
    assert k.strongest_writer(0, 1) is None


def test_ties_and_missing_values_are_broken_as_documented() -> None:
    scores = np.array([[0.5, 1.0], [1.0, np.nan]])
    positivity = np.array([[0.1, 0.2], [0.9, np.nan]])
    c = CopyingScores(scores, positivity, np.zeros((2, 2, 1), complex), "", "", "")
    assert c.most_copying() == (1, 0)  # two heads at 1.0: the higher positivity wins; NaN never
    with pytest.raises(ValueError, match="nonzero"):
        CopyingScores(np.full((1, 2), np.nan), np.full((1, 2), np.nan), np.zeros((1, 2, 1), complex), "", "",
                      "").most_copying()


def test_the_strongest_pair_never_reads_from_its_own_or_a_later_layer(induction) -> None:
    k = composition(induction, "k")
    boosted = k.scores.copy()
    boosted[1, 0, 1, 3] = boosted[1, 2, 0, 1] = 10.0  # same layer, and a "reader" before its writer: not pairs
    assert replace(k, scores=boosted).strongest_pair() == ((0, 2), (1, 0))
