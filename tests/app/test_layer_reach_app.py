"""Analysis -> Layer reach (AppTest): on induction-2l and MiniLM every layer's probed reach is its declared one, in
the table and in the picture (causal on the decoder, both ways on the encoder), through either kernel, from the
control or a link; a link's unknown kernel gets a notice; a configurable layer says why not."""

from __future__ import annotations

import pytest

from mha_viz.params import CAUSAL_EXAMPLE
from mha_viz.pretrained import INDUCTION_MODEL
from tests.app.test_app import new_app, z_matrix
from tests.app.test_generate_app import chart

pytestmark = pytest.mark.usefixtures("one_thread")


INDUCTION = {"model": INDUCTION_MODEL, "text": CAUSAL_EXAMPLE, "layer": "1"}


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("params, rule", [(INDUCTION, "causal"), ({}, "both ways")])
def test_every_layer_is_as_declared_and_drawn(params, rule, kernel) -> None:
    at = new_app(mode="Pretrained", view="Analysis", section="Layer reach", reach_kernel=kernel, **params).run()
    assert not at.exception and not at.error and not at.warning
    assert at.radio(key="reach_kernel").value == kernel
    table = at.dataframe[0].value
    assert set(table["declared"]) == {rule} and set(table["verdict"]) == {"as declared"}
    assert set(table["probed"]) == {f"{kernel} kernel, per head"}
    z = z_matrix(chart(at, "analysis_reach")["data"][0])  # 0: not reached, 1: reached, both as declared
    T = z.shape[0]
    expected = [[int(j <= i or rule == "both ways") for j in range(T)] for i in range(T)]
    assert z.tolist() == expected


def test_a_configurable_layer_says_why_not() -> None:
    at = new_app(view="Analysis", section="Layer reach").run()
    assert not at.exception and any("needs a model to probe" in i.value for i in at.info)


def test_the_kernel_control_reprobes_and_a_bad_link_gets_a_notice() -> None:
    at = new_app(mode="Pretrained", view="Analysis", section="Layer reach", **INDUCTION).run()
    assert set(at.dataframe[0].value["probed"]) == {"sdpa kernel, per head"}  # transformers' default
    at.radio(key="reach_kernel").set_value("eager").run()
    assert not at.exception and set(at.dataframe[0].value["probed"]) == {"eager kernel, per head"}
    at = new_app(mode="Pretrained", view="Analysis", section="Layer reach", reach_kernel="flash", **INDUCTION).run()
    assert not at.exception and any("URL parameter reach_kernel" in w.value.replace("\\_", "_") for w in at.warning)
    assert at.radio(key="reach_kernel").value == "sdpa"


def test_left_padding_is_probed_and_hidden_from_every_query() -> None:
    at = new_app(mode="Pretrained", view="Analysis", section="Layer reach", reach_padding="3", **INDUCTION).run()
    assert not at.exception and not at.warning and at.number_input(key="reach_padding").value == 3
    table = at.dataframe[0].value
    assert set(table["verdict"]) == {"as declared"}
    assert set(table["declared"]) == {"causal, the first 3 positions padding"}
    z = z_matrix(chart(at, "analysis_reach")["data"][0])
    assert not z[3:, :3].any() and z[3:, 3:].tolist() == [[int(j <= i) for j in range(3, len(z))]
                                                          for i in range(3, len(z))]
    at = new_app(mode="Pretrained", view="Analysis", section="Layer reach", reach_padding="62", **INDUCTION).run()
    assert any("URL parameter reach_padding" in w.value.replace("\\_", "_") for w in at.warning)  # 17 tokens here
    assert at.number_input(key="reach_padding").value == len(z) - 2


def test_one_head_is_drawn_on_its_own() -> None:
    """The toggle draws the chosen head's reach, checked against the library's for that head (padding rows, not
    compared, as declared); the layer's picture is the union of its heads'."""
    from mha_viz.analysis import visibility
    from mha_viz.pretrained import load_model

    at = new_app(mode="Pretrained", view="Analysis", section="Layer reach", reach_padding="2", **INDUCTION).run()
    layer_z = z_matrix(chart(at, "analysis_reach")["data"][0])
    at.toggle(key="reach_one_head").set_value(True).run()
    at.selectbox(key="head").set_value(2).run()
    assert not at.exception and not at.warning
    figure = chart(at, "analysis_reach")
    assert "Layer 1, head 2: as declared" in figure["layout"]["title"]["text"]
    T = len(layer_z)
    head = visibility(load_model(INDUCTION_MODEL), T, padding=2).layers[1].heads[2]
    z = z_matrix(figure["data"][0])
    assert (z[2:] == head[2:]).all() and (z[:2] == layer_z[:2]).all()
    assert at.selectbox(key="head").options == [f"head {h}" for h in range(4)]  # none differs from the layer
