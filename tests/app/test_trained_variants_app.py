"""Trained weights of every attention variant in the app: the variant's controls and a diversity penalty train the
layer they name, and the shipped grid draws accuracy against KV cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mha_viz.training.variants import precomputed_variant_grid
from mha_viz.variants import VARIANTS
from tests.app.test_app import heatmaps, new_app, z_matrix
from tests.renderer_json import drawn_heads

pytestmark = pytest.mark.usefixtures("one_thread")


def quality_chart(at) -> dict:
    charts = [c for c in at.get("plotly_chart") if c.key == "variants_quality"]
    assert len(charts) == 1
    return json.loads(charts[0].proto.spec)


def test_the_shipped_grid_holds_every_variant_and_the_diversity_penalty_over_seeds() -> None:
    from mha_viz.training.variants import grid_variants, variant_label

    rows = precomputed_variant_grid()
    labels = {(r.label, r.diversity) for r in rows}
    assert {(variant_label(v, 4), 0.0) for v in grid_variants(4)} <= labels  # MHA ... MLA, window, diff, MoH
    assert {r.kind for r in rows} == set(VARIANTS)  # every registered variant's training grid
    assert any(label == "MHA" and d > 0 for label, d in labels)
    assert all(len(r.seeds) >= 3 and len(r.accuracy) == len(r.seeds) for r in rows)
    sizes = {r.label: r.kv_bytes_per_token for r in rows}
    assert sizes["MHA"] == 2 * sizes["GQA kv=2"] == 4 * sizes["MQA"]


@pytest.mark.parametrize("kv_heads", ["1", "2", "4"])
def test_trained_gqa_layers_draw_their_heads_and_the_accuracy_against_kv_cache(kv_heads: str) -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="20", variant="gqa", kv_heads=kv_heads).run()
    assert not at.exception and not at.error
    labels, weights = drawn_heads(at)
    g = int(kv_heads)
    assert len(weights) == 4 and labels == [f"head {q}" + (f" (K/V head {q // (4 // g)})" if g < 4 else "")
                                            for q in range(4)]
    banner = at.success[0].value
    assert "Trained weights" in banner
    label = {"1": "MQA", "2": "GQA kv=2", "4": "MHA"}[kv_heads]
    if kv_heads != "4":
        assert label in banner
    ringed = [t for t in quality_chart(at)["data"] if t["name"] == "this layer's variant"]
    assert len(ringed) == 1 and ringed[0]["text"] == [label]  # this layer's variant marked on the shipped grid


def test_a_diversity_penalty_trains_another_layer_and_stays_in_the_url() -> None:
    at = new_app(weights="trained", h="2", d_model="16", steps="20").run()
    plain = drawn_heads(at)[1]
    at.slider(key="diversity").set_value(1.0).run()
    assert not at.exception and not at.error
    assert "head-diversity penalty 1" in at.success[0].value
    assert float(at.query_params["diversity"][-1]) == 1.0  # shareable
    pushed = drawn_heads(at)[1]
    assert not np.allclose(plain[0], pushed[0])  # another layer trained


def test_a_variant_that_cannot_train_here_says_why() -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="20", variant="gqa", kv_heads="3").run()
    assert not at.exception
    assert "cannot be trained" in at.error[0].value and "does not divide" in at.error[0].value


def markdown(at) -> str:
    return " ".join(m.value for m in at.markdown)


def test_train_mode_trains_the_variant_with_the_penalty_beside_one_head() -> None:
    at = new_app(mode="Train", h="4", d_model="16", steps="20", variant="gqa", kv_heads="2", diversity="0.5").run()
    assert not at.exception and not at.error
    text = markdown(at)
    assert "(GQA kv=2)" in text and "diversity penalty 0.5" in text
    assert at.segmented_control(key="variant").value == "gqa" and at.slider(key="diversity").value == 0.5
    at.radio(key="kv_heads").set_value(1).run()
    assert not at.exception and "(MQA)" in markdown(at)


def test_train_mode_explains_a_variant_it_cannot_train() -> None:
    at = new_app(mode="Train", h="4", d_model="16", steps="20", variant="gqa", kv_heads="3").run()
    assert not at.exception
    assert "cannot be trained" in at.error[0].value


# --- each trained variant shows its own view -------------------------------------------------------------------------

TRAINED_VIEWS = {  # variant URL fields -> the view only that variant offers
    "Latent (MLA)": {"variant": "mla", "kv_latent": "8"},
    "Window & sinks": {"variant": "window", "window": "2", "sinks": "logit"},
    "Two maps": {"variant": "diff"},
    "Router (MoH)": {"variant": "moh", "moh_k": "1", "moh_shared": "1"},
}


@pytest.mark.parametrize("view", list(TRAINED_VIEWS))
def test_a_trained_variant_layer_offers_and_draws_its_own_view(view: str) -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="20", **TRAINED_VIEWS[view]).run()
    assert not at.exception and not at.error
    assert "Trained weights" in at.success[0].value
    menu = at.button_group(key="view").options
    assert view in menu
    assert not {v for v in TRAINED_VIEWS if v != view} & set(menu)  # only this variant's own view
    at.button_group(key="view").set_value(view).run()
    assert not at.exception and not at.error, view
    assert at.get("plotly_chart"), view


def test_a_trained_moh_layer_shows_the_heads_each_token_picks() -> None:
    from mha_viz.training.precomputed import trained_layer
    from mha_viz.variants import LayerVariant

    at = new_app(weights="trained", h="4", d_model="16", steps="20", variant="moh", moh_k="1", view="Router (MoH)").run()
    assert not at.exception and not at.error
    trace = trained_layer("prev-first", 4, 16, 0, 20, variant=LayerVariant("moh", moh_k=1)).trace()
    picked = trace.meta["picked"]
    assert (picked.sum(0) == 1).all()  # each token: its one routed head
    shown = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    z = [z_matrix(t) for f in shown for t in heatmaps(f)]
    assert any(a.shape == trace.gates.shape and np.allclose(a, trace.gates, atol=1e-3) for a in z)  # its gates


def test_a_diversity_penalty_shows_its_redundancy_matrix_beside_the_layer_without_it() -> None:
    from mha_viz.divergence import head_divergence
    from mha_viz.training.precomputed import trained_layer

    at = new_app(weights="trained", h="4", d_model="16", steps="20").run()
    assert not [c for c in at.get("plotly_chart") if c.key.startswith("diversity_redundancy")]  # no penalty: none
    at.slider(key="diversity").set_value(1.0).run()
    assert not at.exception and not at.error
    charts = {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key.startswith("diversity_redundancy")}
    assert set(charts) == {"diversity_redundancy_0", "diversity_redundancy_1"}
    plain = trained_layer("prev-first", 4, 16, 0, 20)
    pushed = trained_layer("prev-first", 4, 16, 0, 20, diversity=1.0)
    for key, layer in (("diversity_redundancy_0", plain), ("diversity_redundancy_1", pushed)):
        D = head_divergence(layer.trace().weights)
        shown = z_matrix(heatmaps(charts[key])[0])
        assert np.allclose(np.sort(shown.ravel()), np.sort(D.ravel()), atol=1e-4)  # the layer's own matrix, reordered
        mean = D[~np.eye(4, dtype=bool)].mean()
        title = charts[key]["layout"]["title"]["text"]
        assert f"{mean:.3f} bits" in title and f"{layer.mean_accuracy:.1%}" in title
    assert not np.allclose(head_divergence(plain.trace().weights), head_divergence(pushed.trace().weights))


def test_a_penalised_diff_layer_says_its_redundancy_matrix_is_not_defined() -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="20", variant="diff", diversity="0.5").run()
    assert not at.exception and not at.error
    assert any("signed weights" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if c.key.startswith("diversity_redundancy")]


@pytest.mark.parametrize(("variant", "offered"), [("mla", False), ("diff", False), ("window", True), ("moh", True)])
def test_w_o_at_work_is_offered_where_the_trained_weights_split_per_head(variant: str, offered: bool) -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="20", variant=variant, view="Analysis").run()
    assert not at.exception and not at.error
    assert ("W_O at work" in at.button_group(key="section").options) == offered
    said = [c.value for c in at.caption if "W_O at work is not offered" in c.value]
    assert len(said) == (0 if offered else 1)
    if not offered:
        assert "per-head W_K and W_V" in said[0]
    if offered:
        at.button_group(key="section").set_value("W_O at work").run()
        assert not at.exception and not at.error


def test_w_o_at_work_follows_the_trained_variant_not_a_cached_mha_layer() -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="20", view="Analysis", section="W_O at work").run()
    mha = {c.key: c.proto.spec for c in at.get("plotly_chart") if c.key.startswith("analysis_wo")}
    assert len(mha) == 2  # contributions and one head's token map
    at = new_app(weights="trained", h="4", d_model="16", steps="20", view="Analysis", section="W_O at work",
                 variant="window", window="2")
    at.run()
    assert not at.exception and not at.error
    window = {c.key: c.proto.spec for c in at.get("plotly_chart") if c.key.startswith("analysis_wo")}
    assert window.keys() == mha.keys() and all(window[k] != mha[k] for k in mha)  # the window layer's own readout


@pytest.mark.parametrize("params", [
    {"variant": "mla", "kv_latent": "4", "q_latent": "8", "rope_dim": "0"},
    {"variant": "mla", "kv_latent": "16", "rope_dim": "2"},
    {"variant": "window", "window": "1", "sinks": "none"},
    {"variant": "window", "window": "3", "sinks": "tokens"},
    {"variant": "moh", "moh_k": "3"},
    {"variant": "moh", "moh_k": "2", "moh_shared": "2"},
], ids=lambda p: "-".join(p.values()))
def test_trained_variants_at_other_control_positions_draw_their_heads_and_view(params: dict[str, str]) -> None:
    view = {"mla": "Latent (MLA)", "window": "Window & sinks", "moh": "Router (MoH)"}[params["variant"]]
    at = new_app(weights="trained", h="4", d_model="16", steps="10", view=view, **params).run()
    assert not at.exception and not at.error
    assert "Trained weights" in at.success[0].value
    assert at.button_group(key="view").value == view and at.get("plotly_chart")


@pytest.mark.slow
@pytest.mark.parametrize("params", [{"variant": "diff"}, {"variant": "moh", "moh_k": "1"}, {"variant": "mla"},
                                    {"variant": "window", "window": "2"}], ids=lambda p: p["variant"])
def test_every_analysis_section_works_on_each_trained_variant(params: dict[str, str]) -> None:
    at = new_app(weights="trained", h="4", d_model="16", steps="10", view="Analysis", **params).run()
    sections = at.button_group(key="section").options
    assert len(sections) >= 5
    for section in sections:
        at.button_group(key="section").set_value(section).run()
        assert not at.exception and not at.error, section
