"""The README's sentence about the bundled MiniLM's layer 0 (under its screenshot), checked against the library: the
head detectors' previous-token scores and the mean weight on the previous token of the default sentence."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from mha_viz.analysis import detect_heads, trace_head_stats
from mha_viz.pretrained import load_model
from mha_viz.text import DEFAULT_TEXT

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_says_what_minilms_layer_0_heads_2_and_5_do() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    said = re.search(r"The bundled all-MiniLM-L6-v2, layer 0: head 2 is a previous-token head \(previous-token score "
                     r"([\d.]+) in the head detectors; on the sentence below each row puts ([\d.]+) of its weight on "
                     r"the token before\), while head 5 .*? \(previous-token score ([\d.]+)\)", text)
    assert said, "the README's sentence about MiniLM's layer 0 is gone or reworded: update this test with it"
    assert "attends to the token itself" not in text
    model = load_model()
    previous = detect_heads(model, seed=0)["previous"][0]  # [heads] of layer 0
    assert previous.argmax() == 2 and f"{previous[2]:.2f}" == said[1]
    assert f"{previous[5]:.2f}" == said[3] and previous[5] < 0.5  # head 5 is no previous-token head
    stats = trace_head_stats(model.trace(DEFAULT_TEXT, 0), model.tokenizer.all_special_tokens)
    assert f"{stats.columns()['previous'][2]:.2f}" == said[2]
    same = stats.columns()["same"]
    assert same[2] < 0.1 and np.argmax(stats.columns()["previous"]) == 2  # head 2 does not attend to itself
