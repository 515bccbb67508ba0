"""The Circuits analysis section in the whole app: offered on every mode's sources with weights, drawn, kept in the
URL; on the bundled induction model the copying scores put the induction heads (every head of layer 1) on top."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.pretrained import INDUCTION_MODEL
from tests.app.test_analysis_app import chart
from tests.app.test_app import heatmaps, new_app, z_matrix

INDUCTION = {"mode": "Pretrained", "model": INDUCTION_MODEL, "view": "Analysis", "section": "Circuits"}


def drawn(at: AppTest) -> AppTest:
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert at.segmented_control(key="section").value == "Circuits"
    return at


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    {},  # the configurable layer, random weights: no embeddings
    {"weights": "trained"},  # the configurable layer trained on a task (a shipped layer)
    {"mode": "Train"},  # Train mode's trained layer
    {"mode": "Pretrained"},  # the bundled MiniLM: an encoder, a large vocabulary
], ids=["configurable", "trained weights", "train", "minilm"])
def test_circuits_are_offered_and_drawn_on_every_mode(params: dict) -> None:
    at = drawn(new_app(view="Analysis", section="Circuits", **params).run())
    assert "Circuits" in at.segmented_control(key="section").options
    copying = z_matrix(heatmaps(chart(at, "circuits_copying"))[0])
    assert np.all((copying >= 0) & (copying <= 1))
    assert chart(at, "circuits_sv")["data"][0]["type"] == "bar"
    assert any("Norms:" in c.value for c in at.caption)
    if not params:
        assert any("no token embeddings" in i.value for i in at.info)
        assert not [c for c in at.get("plotly_chart") if c.key == "circuits_table"]
        return
    table = chart(at, "circuits_table")
    if params.get("mode") == "Pretrained":  # 30522 tokens: 32 sampled rows, each with its top 10, said so
        assert z_matrix(heatmaps(table)[0]).shape == (32, 10)
        assert any("32 of 30522 tokens drawn" in c.value and "seed 0" in c.value for c in at.caption)
        assert any("W_E W_OV W_E^T" in c.value or "no unembedding" in c.value for c in at.caption)
    else:
        vocab = z_matrix(heatmaps(table)[0]).shape
        assert vocab[0] == vocab[1] > 2  # the task's whole vocabulary


def test_on_the_induction_model_the_induction_heads_copy_most_and_the_url_keeps_the_circuit() -> None:
    at = drawn(new_app(**INDUCTION, layer="1", head="2").run())
    scores = z_matrix(heatmaps(chart(at, "circuits_copying"))[0])  # [layers, heads]
    assert scores.shape == (2, 4) and scores[1].min() > 0.9 and scores[1].min() > scores[0].max()
    table = chart(at, "circuits_table")
    assert "Layer 1, head 2: OV circuit W_E W_OV W_U" in table["layout"]["title"]["text"]
    ov = z_matrix(heatmaps(table)[0])
    assert ov.shape == (169, 169) and (np.argmax(ov, axis=1) == np.arange(169)).mean() > 0.95  # it copies
    at.radio(key="circuit").set_value("QK positions").run()
    drawn(at)
    assert at.query_params["circuit"] in ("QK positions", ["QK positions"])
    assert "QK positions circuit W_pos W_QK W_pos^T" in chart(at, "circuits_table")["layout"]["title"]["text"]
    again = drawn(new_app(**INDUCTION, layer="0", head="2", circuit="QK positions").run())
    assert again.radio(key="circuit").value == "QK positions"
    pos = z_matrix(heatmaps(chart(again, "circuits_table"))[0])  # layer 0, head 2: the previous-token head
    assert np.isnan(pos[3, 4]) and (np.nanargmax(pos[1:], axis=1) == np.arange(127)).mean() > 0.95


def test_the_positional_caption_says_where_the_previous_token_heads_rows_peak() -> None:
    """Layer 0, head 2 of induction-2l: its rows peak one position back (126 of the 127 rows that have one), and the
    caption says so, not only how few peak at their own position."""
    at = drawn(new_app(**INDUCTION, layer="0", head="2", circuit="QK positions").run())
    said = [c.value for c in at.caption if "rows peak most often" in c.value]
    assert len(said) == 1, [c.value for c in at.caption]
    assert "the previous position (key − query = -1): 99.2% of the 127 rows that have one" in said[0]
    assert "0.8% of the rows peak at their own position" in said[0]
