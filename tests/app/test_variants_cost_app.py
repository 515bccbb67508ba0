"""Shapes & cost: attention variants beside MHA, for the page's layer and six real models (one a hybrid)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.variants_cost import PRESETS, VARIANTS

APP = str(Path(__file__).resolve().parents[2] / "page.py")
VIEW = "Shapes & cost"


def new_app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["view"] = VIEW
    for key, value in params.items():
        at.query_params[key] = value
    return at


def kv_chart(at: AppTest) -> dict[str, dict]:
    """The KV-cache chart's bars by trace name: {"variant": {label: bytes}, "MHA": {...}}."""
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    fig = next(s for s in specs if "KV cache for" in json.dumps(s["layout"].get("title", {})))
    out = {}
    for trace in fig["data"]:
        x = trace["x"]
        if isinstance(x, dict):  # Plotly's binary form
            import base64

            import numpy as np
            x = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]).tolist()
        out[trace["name"]] = dict(zip(trace["y"], x))
    return out


def layer_row(bars: dict[str, float]) -> float:
    return next(v for k, v in bars.items() if k.startswith("this layer"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_draws_beside_mha_and_the_presets(variant: str) -> None:
    at = new_app(cost_variant=variant).run()
    assert not at.exception and not at.error
    bars = kv_chart(at)
    assert set(PRESETS) < set(bars["variant"]) and set(PRESETS) < set(bars["MHA"])
    # h = 4, d_model = 64, d_k = d_v = 16 at 8192 tokens: MHA caches 4 * (16 + 16) * 2 bytes per token (beside MLA
    # its keys are as wide as MLA's queries and keys: 16 + 4 rotary dimensions)
    assert layer_row(bars["MHA"]) == pytest.approx(8192 * 4 * (36 if variant == "mla" else 32) * 2)
    expected = {"mha": 4 * 32 * 2, "gqa": 1 * 32 * 2, "mla": (16 + 4) * 2, "diff": 2 * 32 * 2, "moh": 4 * 32 * 2}
    ours = layer_row(bars["variant"])
    if variant == "window":
        assert ours == pytest.approx(64 * 1 * 32 * 2)  # the default 64-token window, 1 KV head
    else:
        assert ours == pytest.approx(8192 * expected[variant])
    assert bars["variant"]["Llama-3-8B"] == pytest.approx(2**30)  # 32 layers * 8192 tokens * 4 KiB
    assert bars["variant"]["DeepSeek-V3"] == pytest.approx(61 * 8192 * 1152)


def test_url_round_trip() -> None:
    at = new_app(cost_variant="mla", cost_kv_latent="8", cost_q_latent="32", cost_rope_dim="2",
                 cost_context="1024").run()
    assert not at.exception and not at.error
    assert at.number_input(key="cost_kv_latent").value == 8
    assert layer_row(kv_chart(at)["variant"]) == pytest.approx(1024 * (8 + 2) * 2)
    assert {k: at.query_params[k] for k in ("cost_variant", "cost_kv_latent", "cost_context")} in (
        {"cost_variant": ["mla"], "cost_kv_latent": ["8"], "cost_context": ["1024"]},
        {"cost_variant": "mla", "cost_kv_latent": "8", "cost_context": "1024"})
    at.segmented_control(key="cost_variant").set_value("window").run()
    at.number_input(key="cost_window").set_value(100).run()
    at.radio(key="cost_sinks").set_value("tokens").run()
    assert not at.exception and not at.error
    assert at.query_params["cost_window"] in (["100"], "100") and at.query_params["cost_sinks"] in (["tokens"], "tokens")
    assert layer_row(kv_chart(at)["variant"]) == pytest.approx((100 + 4) * 1 * 32 * 2)  # StreamingLLM: 4 sink tokens


def test_every_kv_heads_and_moh_k_position_draws() -> None:
    at = new_app(h="8", cost_variant="gqa").run()
    assert at.radio(key="cost_kv_heads").options == ["1", "2", "4"]  # divisors of 8 below 8
    for g in (1, 2, 4):
        at.radio(key="cost_kv_heads").set_value(g).run()
        assert not at.exception and not at.error
        assert layer_row(kv_chart(at)["variant"]) == pytest.approx(8192 * g * 16 * 2)
    at.segmented_control(key="cost_variant").set_value("moh").run()
    for k in range(1, 9):
        at.slider(key="cost_moh_k").set_value(k).run()
        assert not at.exception and not at.error


def test_invalid_url_values_give_a_notice() -> None:
    at = new_app(cost_variant="nope", cost_context="1000").run()
    notices = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "cost_variant='nope'" in notices and "cost_context='1000'" in notices
    at = new_app(cost_kv_heads="3").run()  # 3 does not divide h = 4
    assert not at.exception and not at.error
    notice = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "cost_kv_heads='3' is not valid here (kv_heads: one of 1, 2 here); using 2" in notice, notice


def test_an_h_a_variant_cannot_use_is_explained() -> None:
    at = new_app(d_model="48", h="3", cost_variant="diff").run()
    assert not at.exception and not at.error
    assert any("needs an even h" in i.value for i in at.info)
    assert not any(k.startswith("this layer") for k in kv_chart(at)["variant"])  # the presets still draw
    at = new_app(d_model="48", h="1", cost_variant="gqa").run()
    assert any("needs h ≥ 2" in i.value for i in at.info)
