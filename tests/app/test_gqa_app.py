"""The configurable layer's Variant control: MHA or GQA with kv_heads, from the sidebar and from links."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.renderer_json import drawn_heads, paints_heads, renderer_data

APP = str(Path(__file__).resolve().parents[2] / "page.py")


def new_app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    return at


def titles(fig: dict) -> list[str]:
    """A Plotly figure's annotation texts (its panels' titles)."""
    return [a["text"] for a in fig["layout"].get("annotations", [])]


def url(at: AppTest, name: str) -> str | None:
    value = at.query_params.get(name)
    return value[-1] if isinstance(value, list) else value


def texts(at: AppTest) -> str:
    kinds = ("caption", "error", "warning", "info", "markdown")
    return " ".join(e.value for kind in kinds for e in getattr(at, kind)).replace("\\", "")  # notices: Markdown escaped


@pytest.mark.parametrize("h", [4, 8])
def test_every_kv_heads_position_draws_heads_labelled_with_their_kv_head(h: int) -> None:
    at = new_app(h=str(h)).run()
    at.segmented_control(key="variant").set_value("gqa").run()
    radio = at.radio(key="kv_heads")
    offered = [int(o.split()[0]) for o in radio.options]
    assert offered == [g for g in range(1, h + 1) if h % g == 0]
    assert radio.options[0] == "1 (MQA)" and radio.options[-1] == f"{h} (= MHA)"
    for g in offered:
        at.radio(key="kv_heads").set_value(g).run()
        assert not at.exception and not at.error, g
        labels, weights = drawn_heads(at)
        assert len(weights) == h
        group = h // g
        for head in range(h):
            label = f"head {head} (K/V head {head // group})"
            assert any(label in t for t in labels) == (g < h), (g, head)
        # the frames: each head's K/V head, which the renderer frames heads by
        assert renderer_data(at, "heads")[0]["kv_heads"] == ([head // group for head in range(h)] if g < h else None)
        assert url(at, "variant") == "gqa" and url(at, "kv_heads") == (None if g == 1 else str(g))


def test_mqa_link_round_trip_and_concat_says_it_is_unchanged() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="2", view="Concat → W_O").run()
    assert not at.exception and not at.error
    assert at.segmented_control(key="variant").value == "gqa" and at.radio(key="kv_heads").value == 2
    assert url(at, "variant") == "gqa" and url(at, "kv_heads") == "2" and url(at, "h") == "8"
    assert "heads 0–3 read K/V head 0; heads 4–7 read K/V head 1" in texts(at)
    assert "Grouped-query attention leaves this step unchanged" in texts(at)
    at.segmented_control(key="variant").set_value("mha").run()  # back to MHA: no K/V labels, variant out of the URL
    assert not at.exception and url(at, "variant") is None
    assert "Grouped-query attention leaves this step unchanged" not in texts(at)


def test_shapes_and_cost_count_the_kv_heads() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="2", view="Shapes & cost").run()
    assert not at.exception and not at.error
    shapes = at.table[0].value
    row = shapes[shapes["tensor"] == "W_Q, W_K, W_V"]["shape"].iloc[0]
    assert row == "8 × (64 × 8), 2 × (64 × 8), 2 × (64 × 8)"
    counts = at.table[1].value
    weights = counts[counts["count"] == "weights"].iloc[0, 1]
    assert weights == f"{64 * 64 * 2 + 2 * 2 * 64 * 8:,}"  # W_Q, W_O full; W_K, W_V for 2 of 8 heads


def test_changing_h_keeps_kv_heads_valid_and_says_so() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="8").run()
    at.select_slider(key="h").set_value(4).run()
    assert not at.exception and not at.error
    assert at.radio(key="kv_heads").value == 4
    assert "kv_heads = 8 does not divide h = 4, so kv_heads is now 4" in texts(at)


def test_link_with_kv_heads_not_dividing_h_explains_and_offers_the_nearest() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="3").run()
    assert not at.exception
    assert any("kv_heads = 3 does not divide h = 8" in e.value for e in at.error)
    assert not paints_heads(at)
    at.button(key="use_kv_4").click().run()
    assert not at.exception and not at.error
    assert len(drawn_heads(at)[1]) == 8 and url(at, "kv_heads") == "4"


@pytest.mark.parametrize("params, name", [({"variant": "sparse"}, "variant"), ({"variant": "GQA!"}, "variant"),
                                          ({"variant": "gqa", "kv_heads": "0"}, "kv_heads"),
                                          ({"variant": "gqa", "kv_heads": "x"}, "kv_heads")])
def test_invalid_variant_values_fall_back_with_a_notice(params: dict[str, str], name: str) -> None:
    at = new_app(**params).run()
    assert not at.exception and not at.error
    assert f"URL parameter {name}=" in texts(at)
    assert len(drawn_heads(at)[1]) == 4  # the default layer is drawn


@pytest.mark.parametrize("view", ["Lines", "One head", "Analysis", "Formulas"])
def test_other_views_draw_a_gqa_layer(view: str) -> None:
    at = new_app(h="8", variant="gqa", kv_heads="2", view=view).run()
    assert not at.exception and not at.error and not at.warning  # the link is taken as it is: no notice
    assert at.get("plotly_chart") or at.latex
    assert "heads 0–3 read K/V head 0; heads 4–7 read K/V head 1" in texts(at)
    if view == "One head":
        assert "head 0 reads key/value head 0, so its K and V below are the same as those of heads 1, 2, 3" in texts(at)
