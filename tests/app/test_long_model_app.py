"""Pretrained mode on a long text (AppTest) with tiny random long-context models saved to folders: the layer's
overview and exact zoom of the whole text, the layer switch, every layer's heads by a long-range statistic, the
other views on a window (said so), and clear messages for a text past the positions, a model without a long trace
and a cancelled trace."""

from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
import transformers as tf
from streamlit.testing.v1 import AppTest
from transformers import AutoModelForCausalLM

from mha_viz.pretrained import PretrainedModel, load_model
from mha_viz.pretrained.long import LongLayer, ModelLongTrace
from mha_viz.sources import ModelSource
from mha_viz.ui.long_model import CANCELLED, _digest
from tests.app.test_app import APP
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import drawn_charts, renderer_data
from tests.tiny_causal import saved_random_models
from tests.unit.test_mixers import HYBRID

BASE = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 4096, "pad_token_id": 0,
        "bos_token_id": 101, "eos_token_id": 102}  # fmt: skip
CONFIGS = {
    "llama": lambda: tf.LlamaConfig(**BASE),
    "short": lambda: tf.LlamaConfig(**{**BASE, "max_position_embeddings": 600}),  # 600 positions: a text past them
    "bloom": lambda: tf.BloomConfig(vocab_size=30522, hidden_size=32, n_layer=2, n_head=4),  # its own eager pass
    "qwen3_next": lambda: HYBRID["qwen3_next"][1]().__class__(**{  # Gated DeltaNet layers 0-2, attention in 3
        **HYBRID["qwen3_next"][1]().to_dict(), "max_position_embeddings": 4096}),
    "deepseek_v32": lambda: tf.DeepseekV32Config(  # each query reads its indexer's top 64 keys
        **{**BASE, "num_key_value_heads": 4}, q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4,
        v_head_dim=5, first_k_dense_replace=2, index_topk=64, index_head_dim=8, index_n_heads=2),
    "bart": lambda: tf.BartConfig(vocab_size=30522, d_model=32, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, max_position_embeddings=4096),
}
TEXT = " ".join(["the cat sat on the mat and looked at the dog ."] * 130)  # 1562 tokens with [CLS] and [SEP]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = saved_random_models({k: v for k, v in CONFIGS.items() if k != "bart"}, AutoModelForCausalLM,
                              tmp_path_factory)
    return {**out, **saved_random_models({"bart": CONFIGS["bart"]}, tf.AutoModelForSeq2SeqLM, tmp_path_factory)}


def app_with(folder: str, view: str = "Heads", **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"mode": "Pretrained", "text": TEXT, "view": view, **params})
    at.run()
    at.text_input(key="model").set_value(folder).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


def long_overview(at: AppTest) -> np.ndarray:
    """[H, t, s]: the long overview the renderer paints (within 1.53e-5 of the trace's, mha_viz/layer_payload.py)."""
    return renderer_data(at, "heads_long")[1][0]


def long_trace(folder: str) -> tuple[PretrainedModel, ModelLongTrace]:
    """The model as the app loads it, and its long trace of TEXT (the ids the app reads)."""
    model = load_model(folder)
    return model, model.long_trace(ids=ModelSource(model, TEXT, model.parts[0]).long_ids())


@pytest.mark.slow
def test_a_long_text_gets_every_layers_overview_zoom_and_statistics(folders):
    at = app_with(folders["llama"])
    assert not at.error and not at.warning, [w.value for w in at.warning]
    (notice,) = [i.value for i in at.info if "A long text" in i.value]
    assert "1562 tokens" in notice and "tokens 0–511" in notice
    assert "their first 511 rows are exactly those of the long run" in notice  # [CLS] t1 ... t510 [SEP] vs the long ids
    assert long_overview(at).shape == (4, 121, 121)  # blocks of 13 x 13 of 1562 tokens
    stats = chart(at, "long_stats")["data"][0]
    assert z_matrix(stats).shape == (2, 4)  # layers x heads
    assert "entropy" in stats["hovertemplate"] and "first token" in stats["hovertemplate"]
    at.segmented_control(key="long_stat").set_value("first").run()
    assert at.query_params["long_stat"] in ("first", ["first"])
    first = z_matrix(chart(at, "long_stats")["data"][0])
    assert 0 <= np.nanmin(first) and np.nanmax(first) <= 1 and not np.allclose(first, z_matrix(stats))


def test_the_layer_switch_changes_the_overview_and_the_zoom_is_the_exact_block(folders):
    at = app_with(folders["llama"])
    layer0 = long_overview(at)
    at.session_state["layer"] = 1  # what the layer buttons' callback sets
    at.run()
    layer1 = long_overview(at)
    assert at.query_params["layer"] in ("1", ["1"]) and not np.allclose(layer0, layer1)
    at.slider(key="zoom").set_value(700).run()
    at.slider(key="zoom_k").set_value(300).run()
    assert at.query_params["zoom"] in ("700", ["700"]) and at.query_params["zoom_k"] in ("300", ["300"])
    zoom = heatmaps(chart(at, "heads_zoom"))
    _, long = long_trace(folders["llama"])
    np.testing.assert_allclose(layer1, long.overview(1).max, atol=2e-5)  # every head
    for head in (0, 3):
        np.testing.assert_allclose(z_matrix(zoom[head]), long.block(1, head, 700, 300, 128), atol=1e-6)


def test_a_hybrids_long_text_draws_its_mixer_layers_exact_matrices(folders):
    """Qwen3-Next's Gated DeltaNet layers get a long trace too: the overview paints each block's signed value of the
    largest |M|, the zoom the exact mixing matrix from the layer's factors, and the statistics read |M|'s rows."""
    at = app_with(folders["qwen3_next"], layer="0")
    assert not at.error and not at.warning, [w.value for w in at.warning]
    assert any("A long text: 1562 tokens" in i.value for i in at.info)
    assert any("Gated DeltaNet layer, not softmax attention" in i.value for i in at.info)
    assert any("signed value of the largest |M|" in c.value for c in at.caption)
    assert any("each row scaled to sum to 1" in c.value for c in at.caption)
    _, long = long_trace(folders["qwen3_next"])
    overview, expected = long_overview(at), long.overview(0).max
    assert (expected < 0).any()  # signed: drawn on a scale centred at 0
    np.testing.assert_allclose(overview, expected, atol=2e-5 * np.abs(expected).max())
    at.slider(key="zoom").set_value(700).run()
    at.slider(key="zoom_k").set_value(300).run()
    assert any("the exact mixing matrix M" in c.value for c in at.caption)
    zoom = heatmaps(chart(at, "heads_zoom"))
    for head in (0, 3):
        np.testing.assert_allclose(z_matrix(zoom[head]), long.block(0, head, 700, 300, 128), atol=1e-6)
    assert z_matrix(chart(at, "long_stats")["data"][0]).shape == (4, 4)
    at.session_state["layer"] = 3  # the softmax layer: weights again
    at.run()
    assert not at.error and np.nanmin(long_overview(at)) >= 0
    assert not any("the exact mixing matrix M" in c.value for c in at.caption)


def test_the_other_views_read_the_window_and_say_so(folders):
    at = app_with(folders["llama"], view="One head")
    assert any("the first 512 tokens of 1562" in c.value for c in at.caption)
    assert not any(k in drawn_charts(at) for k in ("heads_long", "long_stats"))


def test_a_text_past_the_models_positions_says_what_is_read(folders):
    at = app_with(folders["short"])
    (warning,) = [w.value for w in at.warning]
    assert "more than 600 tokens" in warning and "has 600 positions" in warning and "first 600 are read" in warning
    assert long_overview(at).shape == (4, 120, 120)  # 600 tokens in blocks of 5


def test_a_long_layer_whose_self_check_fails_says_so_above_it(folders, monkeypatch):
    """BLOOM's long trace checks its rebuilt head outputs against the model's concat: a rebuild that departs from it
    (run_layer's outputs shifted by 0.5) gets the error banner with the difference above the layer's views."""
    from mha_viz.pretrained import long_hooked

    run_layer = long_hooked.run_layer

    def shifted(*args, **kwargs):
        out, record = run_layer(*args, **kwargs)
        return out + 0.5, record

    monkeypatch.setattr(long_hooked, "run_layer", shifted)
    at = app_with(folders["bloom"])
    (error,) = [e.value for e in at.error]
    assert "Self-check failed" in error and "layer 0" in error and "head outputs vs concat" in error
    assert "heads_long" in drawn_charts(at)


def test_a_model_without_a_long_trace_says_so_and_shows_the_window(folders):
    at = app_with(folders["bart"])
    assert any("No long trace here" in w.value and "encoder-decoder" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    keys = drawn_charts(at)
    assert "heads_long" not in keys and "heads" in keys


def test_a_cancelled_long_trace_says_so_and_can_start_again(folders):
    model, _ = long_trace(folders["llama"])
    ids = ModelSource(model, TEXT, model.parts[0]).long_ids()
    digest = _digest(("model long", (folders["llama"], True, None), model.parts[0], ids))
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"mode": "Pretrained", "text": TEXT, "view": "Heads"})
    at.run()
    at.session_state[CANCELLED] = {digest}
    at.text_input(key="model").set_value(folders["llama"]).run()
    assert not at.exception and any("was cancelled" in i.value for i in at.info)
    assert "heads_long" not in drawn_charts(at)
    at.button(key="long_again").click().run()
    assert not at.exception and "heads_long" in drawn_charts(at)


@pytest.mark.slow
def test_a_long_trace_larger_than_the_shared_cache_is_refused_with_a_message(folders, monkeypatch):
    from mha_viz.ui.cache import shared_cache

    monkeypatch.setenv("MHA_VIZ_CACHE_MB", "1")  # 1562 tokens x 2 layers keep about 2 MiB
    shared_cache.clear()
    try:
        at = app_with(folders["llama"])
        warnings = [w.value for w in at.warning]
        assert any("No long trace here" in w and "more than the 1 MiB allowed" in w for w in warnings), warnings
        assert "heads_long" not in drawn_charts(at)
    finally:
        shared_cache.clear()


@pytest.mark.slow
def test_the_session_keeps_a_key_not_the_long_trace(folders):
    """The zoom is a fragment whose arguments Streamlit keeps for the session's life: they hold a loader of the
    shared cache's value, not the trace. Once the cache lets the trace go, nothing keeps it; moving the zoom then
    traces the text again."""
    from mha_viz.cache import ByteBudgetCache
    from tests.app.test_memory import alive

    kinds = (ModelLongTrace, LongLayer)
    before = {id(o): weakref.ref(o) for o in alive(kinds)}
    at = app_with(folders["llama"])
    at.slider(key="zoom").set_value(700).run()
    assert any(isinstance(o, ModelLongTrace) and o.num_tokens == 1562 for o in alive(kinds))
    for cache in alive((ByteBudgetCache,)):
        cache.clear()
    left = [o for o in alive(kinds) if not (id(o) in before and before[id(o)]() is o)]
    assert left == [], [sorted({type(r).__name__ for r in gc.get_referrers(o)}) for o in left]
    at.slider(key="zoom").set_value(300).run()
    assert not at.exception and heatmaps(chart(at, "heads_zoom"))[0]["y0"] == 300


def test_deepseek_v32s_long_text_draws_only_the_keys_its_indexer_kept(folders):
    """DeepSeek-V3.2 reads a long text too: the overview the page paints is the long trace's, whose rows hold only
    the 64 keys each query's indexer kept."""
    at = app_with(folders["deepseek_v32"], layer="1")
    assert not at.error and not at.warning, [w.value for w in at.warning]
    assert any("A long text: 1562 tokens" in i.value for i in at.info)
    _, long = long_trace(folders["deepseek_v32"])
    np.testing.assert_allclose(long_overview(at), long.overview(1).max, atol=2e-5)
    row = long.row(1, 0, 1500)
    assert (row > 0).sum() == 64 and row.sum() == pytest.approx(1.0, abs=1e-5)
