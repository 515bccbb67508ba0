"""The configurable layer as multi-head latent attention (variant=mla): every position of its controls draws the heads
and the Latent (MLA) view; One head, Concat → W_O and cross-attention work."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.app.test_gqa_app import new_app, texts, url
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import drawn_heads

H, D_K = 4, 16  # the page's default h and d_model = 64


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def checked_gaps(at) -> list[float]:
    """The numbers the view prints after "within": rebuilt K/V and absorbed scores against the traced ones."""
    return [float(x) for x in re.findall(r"within (\d\.\de[-+]\d+)", texts(at))]


@pytest.mark.parametrize("kv_latent,q_latent,rope_dim", [(1, 0, 0), (16, 0, 2), (256, 8, 32), (16, 8, 0), (1, 8, 32),
                                                         (256, 0, 2)])
def test_every_latent_position_draws_heads_and_the_latent_view(kv_latent: int, q_latent: int, rope_dim: int) -> None:
    at = new_app(variant="mla", kv_latent=str(kv_latent), q_latent=str(q_latent), rope_dim=str(rope_dim)).run()
    assert not at.exception and not at.error
    assert len(drawn_heads(at)[1]) == H
    assert f"{kv_latent} + {rope_dim} = " in texts(at)  # the caption: what the cache holds per token
    at.segmented_control(key="view").set_value("Latent (MLA)").run()
    assert not at.exception and not at.error
    latent, up, kv, cache = charts(at)
    T = z_matrix(heatmaps(latent)[0]).shape[0]
    assert z_matrix(heatmaps(latent)[0]).shape == (T, kv_latent)
    assert len(heatmaps(latent)) == (2 if rope_dim else 1)
    if rope_dim:
        assert z_matrix(heatmaps(latent)[1]).shape == (T, rope_dim)
    assert [z_matrix(m).shape for m in heatmaps(up)] == [(kv_latent, D_K), (kv_latent, D_K)]
    assert [z_matrix(m).shape for m in heatmaps(kv)] == [(T, rope_dim + D_K), (T, D_K)]
    assert [t["type"] for t in cache["data"]] == ["bar", "bar"]
    gaps = checked_gaps(at)
    assert len(gaps) == 2 and max(gaps) < 1e-4  # K, V rebuilt from the latent; the absorbed W_UK's scores
    assert f"= **{kv_latent + rope_dim} numbers**" in " ".join(m.value for m in at.markdown)
    assert url(at, "view") == "Latent (MLA)" and url(at, "variant") == "mla"


def test_sidebar_controls_change_the_latent_and_the_head_picker_the_up_projections() -> None:
    at = new_app(variant="mla", view="Latent (MLA)").run()
    at.number_input(key="kv_latent").set_value(5).run()
    assert not at.exception and not at.error
    assert z_matrix(heatmaps(charts(at)[0])[0]).shape[1] == 5
    first = z_matrix(heatmaps(charts(at)[1])[0])
    at.selectbox(key="head").set_value(3).run()
    assert not at.exception and url(at, "head") == "3" and url(at, "kv_latent") == "5"
    assert any("W_UK[3]" in a["text"] for a in charts(at)[1]["layout"]["annotations"])
    assert not np.allclose(z_matrix(heatmaps(charts(at)[1])[0]), first)  # another head's W_UK


@pytest.mark.parametrize("view", ["One head", "Concat → W_O"])
def test_one_head_and_concat_draw(view: str) -> None:
    at = new_app(variant="mla", kv_latent="8", q_latent="8", rope_dim="4", view=view).run()
    assert not at.exception and not at.error
    assert at.get("plotly_chart")
    assert ("there is no W_K or W_V; K and V below are rebuilt from the cached latent" in texts(at)) == (view == "One head")


def test_cross_attention_caches_the_second_sentence() -> None:
    at = new_app(variant="mla", kv_latent="8", rope_dim="4", cross="true", text="one two three",
                 context="a b c d e", view="Latent (MLA)").run()
    assert not at.exception and not at.error
    latent, _, kv, _ = charts(at)
    assert z_matrix(heatmaps(latent)[0]).shape == (5, 8) and z_matrix(heatmaps(latent)[1]).shape == (5, 4)
    assert z_matrix(heatmaps(kv)[0]).shape == (5, 4 + D_K)
    assert max(checked_gaps(at)) < 1e-4
    at.segmented_control(key="view").set_value("Heads").run()
    assert not at.exception and drawn_heads(at)[1].shape == (H, 3, 5)  # 3 queries, 5 keys


def test_a_real_deepseek_model_offers_the_latent_view(tmp_path_factory: pytest.TempPathFactory) -> None:
    from transformers import AutoModel

    from tests.app.test_app_families import CONFIGS, app_with
    from tests.tiny_causal import saved_random_models

    folders = saved_random_models({name: CONFIGS[name][0] for name in ("deepseek_v3", "bloom")}, AutoModel,
                                  tmp_path_factory)
    at = app_with(folders["deepseek_v3"], "Heads")
    assert "Latent (MLA)" in at.button_group(key="view").options
    at.button_group(key="view").set_value("Latent (MLA)").run()
    assert not at.exception and not at.error
    latent, kv, cache = charts(at)  # no W_UK/W_UV figure: the real trace has kv_b_proj, not W_UK in meta
    S = z_matrix(heatmaps(latent)[0]).shape[0]
    assert [z_matrix(m).shape for m in heatmaps(latent)] == [(S, 8), (S, 4)]  # kv_lora_rank 8, qk_rope_head_dim 4
    assert [z_matrix(m).shape for m in heatmaps(kv)] == [(S, 4 + 6), (S, 5)]
    assert [t["type"] for t in cache["data"]] == ["bar", "bar"]
    assert "= **12 numbers**" in " ".join(m.value for m in at.markdown)
    other = app_with(folders["bloom"], "Heads")  # a model without latent attention: the view is not offered
    assert "Latent (MLA)" not in other.button_group(key="view").options
