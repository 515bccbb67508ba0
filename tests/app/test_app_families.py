"""The app on the newly adapted families, driven with AppTest: every view of a trace renders, and One head's
"Why one score" shows what the model adds to q·k (DeBERTa's position terms, Bloom's ALiBi, Gemma2's soft-capping).
"""

from __future__ import annotations

import json

import pytest
import transformers as tf
from streamlit.testing.v1 import AppTest
from transformers import AutoModel

from mha_viz.parts import VIEWS
from mha_viz.pretrained.deberta import C2P, P2C
from tests.app.test_app import APP
from tests.tiny_causal import saved_random_models

V = 30522
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "max_position_embeddings": 64}  # fmt: skip
TOKENS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
MLA = {  # DeepSeek-V3's latent attention, small; layer 1 a mixture of 4 experts in one group
    "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5,
    "num_key_value_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
}  # fmt: skip
CONFIGS = {  # family -> (config, what "Why one score" names besides q·k)
    "deberta-v2": (lambda: tf.DebertaV2Config(vocab_size=V, **SMALL, relative_attention=True,
                                              pos_att_type=["p2c", "c2p"], position_buckets=8), [C2P, P2C]),
    "bloom": (lambda: tf.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4, **TOKENS), ["ALiBi"]),
    "gemma2": (lambda: tf.Gemma2Config(vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4,
                                       attn_logit_softcapping=2.0, **SMALL, **TOKENS), ["soft-capped"]),
    "albert": (lambda: tf.AlbertConfig(vocab_size=V, embedding_size=16, **SMALL), []),
    "modernbert": (lambda: tf.ModernBertConfig(vocab_size=V, **SMALL, global_attn_every_n_layers=2, local_attention=4,
                                               cls_token_id=101, sep_token_id=102, **TOKENS), []),
    "gpt_oss": (lambda: tf.GptOssConfig(vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4,
                                        num_local_experts=4, num_experts_per_tok=2,
                                        layer_types=["sliding_attention", "full_attention"], **SMALL, **TOKENS), []),
    "diffllama": (lambda: tf.DiffLlamaConfig(vocab_size=V, num_key_value_heads=2, lambda_std_dev=0.3, **SMALL,
                                             **TOKENS), []),
    "deepseek_v3": (lambda: tf.DeepseekV3Config(vocab_size=V, **MLA, **SMALL, **TOKENS), []),
    "cohere2": (lambda: tf.Cohere2Config(vocab_size=V, num_key_value_heads=2, sliding_window=4,
                                         layer_types=["sliding_attention", "full_attention"], **SMALL, **TOKENS), []),
    "deepseek_v32": (lambda: tf.DeepseekV32Config(vocab_size=V, **MLA, **SMALL, **TOKENS, index_topk=3,
                                                  index_head_dim=8, index_n_heads=2), []),
    "llama4_text": (lambda: tf.Llama4TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
        attention_chunk_size=4, no_rope_layer_interval=2, use_qk_norm=True, attn_temperature_tuning=True,
        floor_scale=2, attn_scale=0.5, max_position_embeddings=64, **TOKENS), []),
    "gemma3": (lambda: tf.Gemma3TextConfig(vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4,
                                           query_pre_attn_scalar=8, layer_types=["sliding_attention", "full_attention"],
                                           **SMALL, **TOKENS), []),
    "gemma3n_text": (lambda: tf.Gemma3nTextConfig(  # layers 2 and 3 read the keys and values of layers 0 and 1
        vocab_size=V, vocab_size_per_layer_input=V, hidden_size_per_layer_input=8, num_key_value_heads=2, head_dim=8,
        sliding_window=4, layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
        laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.0] * 4,
        **{**SMALL, "num_hidden_layers": 4}, **TOKENS), []),
}  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return saved_random_models({name: config for name, (config, _) in CONFIGS.items()}, AutoModel, tmp_path_factory)


def app_with(folder: str, view: str, layer: int = 1) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["mode"] = "Pretrained"
    at.query_params["text"] = "the cat sat on the mat"
    at.query_params["view"] = view
    at.query_params["layer"] = str(layer)
    at.run()
    at.text_input(key="model").set_value(folder).run()
    return at


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_every_view_renders_without_a_gap(folders, name):
    at = app_with(folders[name], "Heads")
    assert not at.exception and not at.error
    assert not any("Only the attention weights" in i.value for i in at.info)
    for view in VIEWS.menu("Pretrained"):
        if view == "Generate":
            continue  # a bare model (no LM head) cannot write; the app says so, tested elsewhere
        if view not in at.button_group(key="view").options:
            continue  # a variant's view (Latent (MLA), ...) is offered only for models of that variant
        at.button_group(key="view").set_value(view).run()
        assert not at.exception and not at.error, view
        assert not any(" needs " in i.value for i in at.info), view


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_why_one_score_names_what_the_model_adds(folders, name):
    at = app_with(folders[name], "One head")
    assert not at.exception and not at.error
    why = next(m.value for m in at.markdown if "q·k = Σ_d q_d k_d" in m.value)
    for term in CONFIGS[name][1]:
        assert term in why
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]
    assert any("The parts of query" in t for t in titles) == bool(CONFIGS[name][1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt_oss", "diffllama", "deepseek_v3", "gemma3", "deepseek_v32", "llama4_text",
                                  "gemma3n_text"])
def test_every_analysis_section_draws_or_says_why(folders, name):
    """Sinks (rows that sum to less than 1), differential heads (signed weights, no W_QK per head) and latent attention
    (no W_Q, W_K, W_V per head) reach every analysis section: each draws, or says why it cannot, never an exception."""
    from mha_viz.parts import SECTIONS

    at = app_with(folders[name], "Analysis")
    for section in SECTIONS.menu("Pretrained"):
        at.button_group(key="section").set_value(section).run()
        assert not at.exception and not at.error, section
        if name == "deepseek_v32" and section == "Head statistics":  # what dense attention would have given the rest
            assert "dropped" in at.dataframe[0].value.columns
    if name == "diffllama":  # signed weights: the divergence of distributions does not apply, and the page says so
        at.button_group(key="section").set_value("Redundancy").run()
        assert any("signed" in w.value for w in at.warning)


@pytest.mark.slow
def test_a_kv_shared_layer_says_whose_keys_it_reads(folders):
    at = app_with(folders["gemma3n_text"], "Heads", layer=2)
    assert not at.exception and not at.error
    assert any("Layer 2 has no W_K or W_V of its own: it reads the keys and values layer 0 computed" in c.value
               for c in at.caption)


@pytest.mark.slow
def test_a_differential_heads_two_maps_are_both_split(folders):
    """Why this key on DiffLlama: one table per map of the chosen differential head (query heads h and h + H), each
    the library's split of that map's scores for the key the differential weights pick."""
    import numpy as np

    from mha_viz.analysis import score_attribution
    from mha_viz.pretrained import load_model
    from tests.plotly_json import z_matrix

    at = app_with(folders["diffllama"], "Analysis")
    at.button_group(key="section").set_value("Why this key").run()
    assert not at.exception and not at.warning
    model = load_model(folders["diffllama"])
    trace = model.trace("the cat sat on the mat", 1)
    H, T = trace.weights.shape[:2]
    key = int(np.argmax(trace.weights[0, T - 1]))
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    tables = [spec for spec in specs if ": why" in spec["layout"]["title"]["text"]]  # the pattern's title asks a click
    assert [", map 1:" in t["layout"]["title"]["text"] for t in tables] == [True, False]
    assert ", map 2:" in tables[1]["layout"]["title"]["text"]
    for spec, head in zip(tables, (0, H), strict=True):
        sa = score_attribution(model, "the cat sat on the mat", layer=1, head=head, query=T - 1)
        assert abs(z_matrix(spec["data"][0]) - sa.table(key)).max() < 1e-5
    assert any("Map 2" in m.value and "λ" in m.value for m in at.markdown)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["albert", "deberta-v2", "modernbert"])
def test_why_this_key_splits_an_encoders_scores(folders, name):
    """Why this key on ALBERT (one layer's modules shared by every layer), DeBERTa (its position terms one more source
    of the table) and ModernBERT (a pre-norm encoder, a sliding window on layer 1): the table drawn is the library's
    split of head 0's score at the last query for the key it weights most."""
    import numpy as np

    from mha_viz.analysis import score_attribution
    from mha_viz.pretrained import load_model
    from tests.plotly_json import z_matrix

    at = app_with(folders[name], "Analysis")
    at.button_group(key="section").set_value("Why this key").run()
    assert not at.exception and not at.warning
    model = load_model(folders[name])
    trace = model.trace("the cat sat on the mat", 1)
    T = trace.weights.shape[1]
    key = int(np.argmax(trace.weights[0, T - 1]))
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    tables = [spec for spec in specs if ": why" in spec["layout"]["title"]["text"]]
    assert len(tables) == 1
    sa = score_attribution(model, "the cat sat on the mat", layer=1, head=0, query=T - 1)
    assert abs(z_matrix(tables[0]["data"][0]) - sa.table(key)).max() < 1e-5
    assert ("relative position" in sa.sources) == (name == "deberta-v2")
    assert any("*relative position*" in c.value for c in at.caption) == (name == "deberta-v2")


@pytest.mark.slow
def test_why_this_key_splits_a_kv_shared_layer_over_the_key_layers_sources(folders):
    """Why this key on Gemma 3n's layer 2, which reads the keys layer 0 computed: the table drawn is the library's
    split of head 0's score at the last query for the key it weights most, its columns layer 0's sources, and the
    caption says whose keys they are."""
    import numpy as np

    from mha_viz.analysis import score_attribution
    from mha_viz.pretrained import load_model
    from tests.plotly_json import z_matrix

    at = app_with(folders["gemma3n_text"], "Analysis", layer=2)
    at.button_group(key="section").set_value("Why this key").run()
    assert not at.exception and not at.warning
    model = load_model(folders["gemma3n_text"])
    trace = model.trace("the cat sat on the mat", 2)
    T = trace.weights.shape[1]
    key = int(np.argmax(trace.weights[0, T - 1]))
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    table, = (spec for spec in specs if ": why" in spec["layout"]["title"]["text"])
    sa = score_attribution(model, "the cat sat on the mat", layer=2, head=0, query=T - 1)
    assert abs(z_matrix(table["data"][0]) - sa.table(key)).max() < 1e-5
    assert table["layout"]["xaxis"]["ticktext"] == list(sa.key_sources) == ["token", "bias"]
    assert any("The keys are those layer 0 computed (KV sharing)" in c.value for c in at.caption)
