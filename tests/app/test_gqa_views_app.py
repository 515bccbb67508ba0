"""The views of a grouped-query layer in the app: the heads grid framed by K/V group, One head's shared K and V
measured, Concat → W_O unchanged and saying so; every kv_heads position of h = 1 ... 16 draws every layer view."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.config import divisors
from mha_viz.figures.heads import group_style
from tests.app.test_gqa_app import new_app, texts
from tests.renderer_json import drawn_heads, paints_heads, renderer_data

VIEWS = ("Heads", "One head", "Concat → W_O", "Lines", "Analysis")


def group_frames(fig: dict) -> list[dict]:
    return [s for s in fig["layout"].get("shapes", []) if s["type"] == "rect" and s["xref"].endswith(" domain")]


def test_heads_view_frames_the_kv_groups_and_says_so() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="2").run()
    assert not at.exception and not at.error
    meta, _ = renderer_data(at, "heads")
    assert meta["kv_heads"] == [0, 0, 0, 0, 1, 1, 1, 1]  # the renderer frames each head in its K/V head's style
    assert "8 query heads read 2 key/value heads" in texts(at) and "same frame (colour and dash)" in texts(at)
    at.multiselect(key="compare").set_value([6, 2]).run()  # the larger comparison keeps the groups' frames
    (compare,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == "compare_heads"]
    colours = [f["line"]["color"] for f in group_frames(compare)]
    assert colours == [group_style(1)["color"], group_style(0)["color"]] and colours[0] != colours[1]


def test_one_head_measures_the_shared_k_and_v() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="2", view="One head", head="5").run()
    assert not at.exception and not at.error
    said = texts(at)
    assert "head 5 reads key/value head 1, so its K and V below are the same as those of heads 4, 6, 7" in said
    assert "Group of K/V head 1: heads 4, 5, 6, 7." in said
    assert "max |K_5 − K_h| = 0 and max |V_5 − V_h| = 0" in said


def test_concat_says_one_block_per_query_head_and_the_same_w_o() -> None:
    at = new_app(h="8", variant="gqa", kv_heads="1", view="Concat → W_O").run()
    assert not at.exception and not at.error
    said = texts(at)
    assert "one d_v block per query head: h·d_v = 8·8 = 64 wide, not kv_heads·d_v = 8" in said
    assert "W_O is unchanged: d_out × h·d_v = 64 × 64" in said


def _draws(at: AppTest, view: str, h: int, g: int) -> None:
    where = (h, g, view)
    assert not at.exception and not at.error, (where, [e.value for e in at.exception])
    assert paints_heads(at) if view == "Heads" else at.get("plotly_chart"), where
    grouped = g < h  # kv_heads = h is MHA: no groups to show
    if view == "Heads":
        assert len(drawn_heads(at)[1]) == h, where
        frames = renderer_data(at, "heads")[0]["kv_heads"]  # the K/V head each head's frame shows
        assert frames == ([q // (h // g) for q in range(h)] if grouped else None), where
    elif view == "One head":
        assert ("reads key/value head 0" in texts(at)) == grouped, where
        if grouped:
            assert "max |K_0 − K_h| = 0 and max |V_0 − V_h| = 0" in texts(at), where
    elif view == "Concat → W_O":
        assert ("Grouped-query attention leaves this step unchanged" in texts(at)) == grouped, where


@pytest.mark.slow
@pytest.mark.parametrize("h", [1, 2, 4, 8, 16])
def test_every_kv_heads_position_draws_every_layer_view(h: int) -> None:
    at = new_app(h=str(h), d_model="64", variant="gqa").run()
    assert not at.exception and not at.error
    offered = [int(o.split()[0]) for o in at.radio(key="kv_heads").options]
    assert offered == divisors(h)
    for g in offered:
        at.radio(key="kv_heads").set_value(g).run()
        for view in VIEWS:
            at.segmented_control(key="view").set_value(view).run()
            _draws(at, view, h, g)
