"""Circuits, W_O at work and Composition open on their most informative head (the library's choice: the highest
copying score, the largest direct contribution, the reader of the strongest pair) on the bundled induction model,
unless the link names a head or one was picked; a head picked in one section stays open in the next."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

import mha_viz
from mha_viz.analysis import copying_scores
from mha_viz.analysis.composition import composition
from mha_viz.analysis.readout import model_readout
from mha_viz.params import CAUSAL_EXAMPLE
from tests.app.test_app import new_app

pytestmark = pytest.mark.usefixtures("one_thread")
INDUCTION = {"mode": "Pretrained", "model": mha_viz.INDUCTION_MODEL, "text": CAUSAL_EXAMPLE, "view": "Analysis"}


@pytest.fixture(scope="module")
def best() -> dict[str, tuple[int, int]]:
    """What the library picks on the induction model, for each section."""
    model = mha_viz.load_model(mha_viz.INDUCTION_MODEL)
    row = model_readout(model).strongest()[0]
    picked = {"Circuits": copying_scores(model.head_weights()).most_copying(),
              "W_O at work": divmod(row, 4),
              "Composition": composition(model, "k").strongest_pair()[1]}
    assert all(p != (0, 0) for p in picked.values())  # L0H0 is no section's best head
    return picked


def title(at: AppTest, key: str) -> str:
    (spec,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == key]
    return spec["layout"]["title"]["text"]


def opened(at: AppTest) -> tuple[int, int]:
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    return int(at.session_state["layer"]), int(at.session_state["head"])


@pytest.mark.parametrize("section", ["Circuits", "W_O at work", "Composition"])
def test_a_section_opens_on_its_best_head(section: str, best: dict) -> None:
    at = new_app(**INDUCTION, section=section).run()
    layer, head = best[section]
    assert opened(at) == (layer, head)
    url = {k: at.query_params[k] for k in ("layer", "head") if k in at.query_params}
    assert url == {"layer": str(layer), "head": str(head)}  # named even at 0: the link reopens this head
    if section == "Circuits":
        assert title(at, "circuits_table").startswith(f"Layer {layer}, head {head}: ")
    elif section == "W_O at work":
        assert title(at, "analysis_wo_token_map").startswith(f"L{layer} H{head}'s token map")
    else:
        assert any(c.value.startswith(f"Open head {layer}.{head}: it reads most, through its keys, the output of "
                                      "head 0.2 (the outlined cell)") for c in at.caption)
        (mark,) = [s for s in json.loads(next(c.proto.spec for c in at.get("plotly_chart")
                                              if c.key == "analysis_composition"))["layout"]["shapes"]
                   if s.get("name") == "open pair"]
        assert (mark["x0"] + 0.5, mark["y0"] + 0.5) == (head, 2)  # column: reader 1.head; row: writer 0.2


@pytest.mark.parametrize("section", ["Circuits", "W_O at work", "Composition"])
def test_a_link_that_names_a_head_keeps_it(section: str) -> None:
    at = new_app(**INDUCTION, section=section, layer="0", head="0").run()
    assert opened(at) == (0, 0)
    at = new_app(**INDUCTION, section=section, layer="1", head="3").run()
    assert opened(at) == (1, 3)


def test_a_picked_head_stays_open_in_the_next_section(best: dict) -> None:
    at = new_app(**INDUCTION, section="Circuits").run()
    assert opened(at) == best["Circuits"]
    at.selectbox(key="_open_head_circuits").set_value((0, 3)).run()
    assert opened(at) == (0, 3)
    at.button_group(key="section").set_value("W_O at work").run()
    assert opened(at) == (0, 3) and title(at, "analysis_wo_token_map").startswith("L0 H3's token map")
    at.button_group(key="section").set_value("Circuits").run()  # a section opens on its best head once
    assert opened(at) == (0, 3)


def test_an_untouched_head_follows_each_sections_best(best: dict) -> None:
    at = new_app(**INDUCTION, section="Circuits").run()
    assert opened(at) == best["Circuits"]
    at.button_group(key="section").set_value("Composition").run()
    assert opened(at) == best["Composition"]


def test_a_link_copied_after_picking_l0h0_reopens_l0h0() -> None:
    """L0H0 is the fields' default, which links leave out: once a section opened on its best head, the link names
    the head anyway, or whoever opens it would get the best head again, not the one shown."""
    at = new_app(**INDUCTION, section="Circuits").run()
    at.selectbox(key="_open_head_circuits").set_value((0, 0)).run()
    assert opened(at) == (0, 0)
    link = {k: at.query_params[k] for k in at.query_params}
    assert (link["layer"], link["head"]) == ("0", "0")
    assert opened(new_app(**link).run()) == (0, 0)
