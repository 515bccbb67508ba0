"""The bundled long-context model mha-viz/recall-16k in the app (AppTest): its sidebar button opens Heads on a
2,048-token haystack (a long trace; the other views read its first 512 tokens), and every view and every analysis
section then draws or says why, never an exception; Generate writes after the whole haystack."""

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


def test_generate_writes_after_the_whole_haystack(opened: AppTest) -> None:
    """Generate reads all 2,048 tokens (the prompt goes into the KV cache in chunks): each key has its column in the
    step's row, the row is the library's own generation's, and the views that cannot draw [2048, 2048] say why."""
    import mha_viz
    from tests.app.test_generate_app import chart
    from tests.plotly_json import z_matrix

    at = opened
    at.button_group(key="view").set_value("Generate").run()
    assert not at.exception and not at.error and not at.warning
    assert any("Generate writes after all of them" in i.value for i in at.info)
    assert not any("This view draws the window" in c.value for c in at.caption)
    assert any(m.value.startswith("*(… 1,928 earlier tokens of the prompt)*") for m in at.markdown)
    rows = z_matrix(chart(at, "gen_attention")["data"][0])  # (layers * heads, keys)
    g = mha_viz.load_model(RECALL_MODEL).generate(RECALL_EXAMPLE, 8, max_length=16384)
    assert rows.shape == (8, 2048) and len(g.prompt_ids) == 2048
    assert abs(rows - g.steps[0].attentions.reshape(8, -1)).max() < 1e-6
    assert any("whole pattern is drawn here for texts of up to 512 tokens" in i.value for i in at.info)
    at.button(key="step_next").click().run()
    assert not at.exception and z_matrix(chart(at, "gen_attention")["data"][0]).shape == (8, 2049)
