"""The configurable layer's MoH variant in the app: every position of moh_shared and moh_k draws the heads and the
Router (MoH) view; the sliders keep each other valid; a link with moh_k above the routed heads is explained."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.app.test_gqa_app import new_app, texts, url
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import drawn_heads, paints_heads

ROUTER = "Router (MoH)"


def array(value: list | dict) -> np.ndarray:
    """A 1-D Plotly array: a list, or the typed-array encoding {"dtype", "bdata"}."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"])).astype(float)
    return np.asarray(value, dtype=float)


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def check_router(at, h: int, k: int, shared: int) -> None:
    """The router chart: h head rows, k rings a token; the load bars: shared heads at 100%, routed ones summing to k;
    the gated concat: grey (NaN) blocks where a head is unused, as many as the router's zero gates."""
    assert not at.exception and not at.error, (h, k, shared)
    router, load, concat = charts(at)[:3]
    gates = z_matrix(heatmaps(router)[0])  # (H, T)
    T = gates.shape[1]
    assert gates.shape[0] == h
    rings = next(t for t in router["data"] if t["type"] == "scatter")
    assert len(array(rings["x"])) == k * T
    assert ((gates[shared:] > 0).sum(0) == k).all() and (gates[:shared] > 0).all()
    ticks = router["layout"]["yaxis"]["ticktext"]
    assert [t.endswith("shared") for t in ticks] == [i < shared for i in range(h)]
    bars = array(load["data"][0]["y"])
    np.testing.assert_allclose(bars[:shared], 1.0)
    np.testing.assert_allclose(bars[shared:].sum(), k, atol=1e-5)
    blocks = np.isnan(z_matrix(heatmaps(concat)[0]))  # (T, H*d_v)
    d_v = blocks.shape[1] // h
    np.testing.assert_array_equal(blocks[:, ::d_v], (gates == 0).T)


def test_every_shared_and_k_position_at_h4_draws_the_router() -> None:
    at = new_app(h="4", variant="moh", view=ROUTER).run()
    assert not at.exception and not at.error
    for shared in range(4):
        at.slider(key="moh_shared").set_value(shared).run()
        routed = 4 - shared
        for k in range(1, routed + 1):
            slider = at.slider(key="moh_k")
            assert slider.disabled == (routed == 1)  # one routed head: k is 1, nothing to choose
            if not slider.disabled:
                slider.set_value(k).run()
            assert at.slider(key="moh_k").value == k
            check_router(at, 4, k, shared)
            assert url(at, "moh_k") in (None, str(k)) and url(at, "variant") == "moh"
        assert f"top {routed} of" in texts(at)  # the caption names the routed heads a token picks from


@pytest.mark.parametrize(("h", "k", "shared"), [(8, 1, 0), (8, 3, 2), (8, 1, 7), (16, 4, 0), (16, 2, 4)])
def test_larger_layers_draw_the_router_and_the_heads(h: int, k: int, shared: int) -> None:
    at = new_app(h=str(h), variant="moh", moh_k=str(k), moh_shared=str(shared), view=ROUTER).run()
    check_router(at, h, k, shared)
    at.segmented_control(key="view").set_value("Heads").run()
    assert not at.exception and not at.error
    assert len(drawn_heads(at)[1]) == h


def test_raising_shared_heads_clamps_k_and_lowering_h_clamps_both() -> None:
    at = new_app(h="8", variant="moh", moh_k="6", moh_shared="2", view=ROUTER).run()
    check_router(at, 8, 6, 2)
    at.slider(key="moh_shared").set_value(5).run()
    assert at.slider(key="moh_k").value == 3
    check_router(at, 8, 3, 5)
    at.select_slider(key="h").set_value(4).run()
    assert at.slider(key="moh_shared").value <= 3
    shared = at.slider(key="moh_shared").value
    check_router(at, 4, at.slider(key="moh_k").value, shared)


def test_link_with_k_above_the_routed_heads_is_explained() -> None:
    at = new_app(h="4", variant="moh", moh_k="9").run()
    assert not at.exception
    assert any("moh_k = 9 is more than the 4 routed heads" in e.value for e in at.error)
    assert not paints_heads(at)
    at.button(key="fit_moh").click().run()  # the sidebar offers to fit them: k becomes the 4 routed heads
    assert not at.exception and not at.error
    assert at.slider(key="moh_k").value == 4 and url(at, "moh_k") == "4"
    assert len(drawn_heads(at)[1]) == 4


def test_link_with_shared_heads_not_below_h_is_explained() -> None:
    at = new_app(h="4", variant="moh", moh_shared="6", moh_k="1").run()
    assert not at.exception
    assert any("moh_shared = 6 leaves no head to route" in e.value for e in at.error)


@pytest.mark.parametrize("view", ["Heads", "One head", "Concat → W_O"])
def test_the_layer_views_draw_a_moh_layer(view: str) -> None:
    at = new_app(h="4", variant="moh", moh_k="2", moh_shared="1", view=view).run()
    assert not at.exception and not at.error
    assert paints_heads(at) if view == "Heads" else at.get("plotly_chart")
    assert "picks each token's top 2 of heads 1–3" in texts(at)
    if view == "Concat → W_O":
        assert "equal ✓" in texts(at) or any("equal ✓" in str(m.value) for m in at.markdown)


def test_router_view_is_offered_only_for_moh() -> None:
    at = new_app(h="4", variant="moh").run()
    assert ROUTER in at.segmented_control(key="view").options
    at.segmented_control(key="variant").set_value("mha").run()
    assert not at.exception and ROUTER not in at.segmented_control(key="view").options
