"""A failed self-check in the app: the bundled MiniLM with its adapter reading layer 2's scale wrong (twice BERT's)
shows an error with the measured difference and the tolerance on layer 2, and none on layer 0."""

from __future__ import annotations

import pytest

from mha_viz.pretrained.bert import BertAdapter
from tests.app.test_app_pretrained import pretrained_app

TEXT = "a self-check that fails on one layer"  # a text of its own: no other test's cached traces


@pytest.fixture
def wrong_layer_2(monkeypatch) -> None:
    right = BertAdapter.scale

    def scale(self, site):
        return 2 * right(self, site) if site.attention is self.site("encoder", 2).attention else right(self, site)

    monkeypatch.setattr(BertAdapter, "scale", scale)


@pytest.mark.filterwarnings("ignore::mha_viz.TraceCheckWarning")
def test_the_failing_layer_shows_an_error_with_its_difference(wrong_layer_2) -> None:
    at = pretrained_app(text=TEXT, layer="2")
    assert not at.exception
    (error,) = [e.value.replace("\\", "") for e in at.error]  # markdown escapes out
    assert error.startswith("Self-check failed for sentence-transformers/all-MiniLM-L6-v2, encoder layer 2")
    assert "weights vs output_attentions: max |difference|" in error and "> tolerance 0.0001" in error
    at.session_state["layer"] = 0  # what the layer buttons' callback sets
    at.run()
    assert not at.exception and not at.error  # layer 0 is the model's own
