"""The bundled long-context model mha-viz/recall-16k in the app (AppTest): its sidebar button opens Heads on a
2,048-token haystack (a long trace; the other views read its first 512 tokens), and every view and every analysis
section then draws or says why, never an exception."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.parts import SECTIONS, VIEWS
from mha_viz.pretrained import RECALL_MODEL
from mha_viz.ui.pretrained import RECALL_EXAMPLE
from tests.app.test_app_families import APP


def opened_by_button(key: str) -> AppTest:
    """The Pretrained page after a click on a bundled model's sidebar button (key: pick_<name>)."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["mode"] = "Pretrained"
    at.run()
    at.button(key=key).click().run()
    return at


def assert_every_view_and_section_draws_or_says_why(at: AppTest) -> None:
    for view in VIEWS.menu("Pretrained"):
        if view not in at.button_group(key="view").options:
            continue
        at.button_group(key="view").set_value(view).run()
        assert not at.exception and not at.error, view
    at.button_group(key="view").set_value("Analysis").run()
    for section in SECTIONS.menu("Pretrained"):
        at.button_group(key="section").set_value(section).run()
        assert not at.exception and not at.error, section


@pytest.fixture(scope="module")
def opened() -> AppTest:
    return opened_by_button("pick_recall-16k")


def test_its_button_opens_heads_on_a_long_haystack(opened: AppTest) -> None:
    at = opened
    assert not at.exception and not at.error
    assert at.text_input(key="model").value == RECALL_MODEL and at.text_area(key="text").value == RECALL_EXAMPLE
    assert at.button_group(key="view").value == "Heads"
    assert any("A long text: 2048 tokens" in i.value for i in at.info)


@pytest.mark.slow
def test_every_view_and_section_draws_or_says_why(opened: AppTest) -> None:
    assert_every_view_and_section_draws_or_says_why(opened)
