"""The GQA and differential fixes on real (tiny random) causal models in the app: a LLaMA with 4 query heads on 2 K/V
heads framed by group in the Heads view, and DiffLlama's Generate view (signed head weights on the signed scale) and
One head (the head norm named)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers as tf
from streamlit.testing.v1 import AppTest
from transformers import AutoModelForCausalLM

from tests.app.test_app import APP, z_matrix
from tests.renderer_json import shown_layer
from tests.tiny_causal import saved_random_models

BASE = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64, "pad_token_id": 0,
        "bos_token_id": 101, "eos_token_id": 102}  # fmt: skip
CONFIGS = {"llama": lambda: tf.LlamaConfig(**BASE),
           "diffllama": lambda: tf.DiffLlamaConfig(**BASE, lambda_std_dev=0.3)}
TEXT = "the cat sat on the mat"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return saved_random_models(CONFIGS, AutoModelForCausalLM, tmp_path_factory)


def app_with(folder: str, view: str, **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"mode": "Pretrained", "text": TEXT, "view": view, **params})
    at.run()
    at.text_input(key="model").set_value(folder).run()
    at.button_group(key="view").set_value(view).run()  # the first model, an encoder, may not offer the view
    assert not at.exception and not at.error, [e.value for e in at.exception]
    return at


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


def test_heads_of_a_pretrained_gqa_model_are_framed_by_kv_group(folders):
    meta, _ = shown_layer(app_with(folders["llama"], "Heads"))  # the renderer frames each head by its K/V group
    assert meta["kv_heads"] == [0, 0, 1, 1]
    assert "head 1 (K/V head 0)" in meta["labels"] and "head 2 (K/V head 1)" in meta["labels"]


def test_generate_draws_diffllamas_signed_weights_on_the_signed_scale(folders):
    at = app_with(folders["diffllama"], "Generate", new_tokens="3", gen_step="3")
    heat = chart(at, "gen_attention")["data"][0]
    z = z_matrix(heat)
    assert z.shape[0] == 2 * 2  # 2 layers x 2 differential heads, not 4 softmax maps a layer
    assert np.nanmin(z) < 0 and heat["zmin"] == -heat["zmax"]
    assert heat["colorscale"][0][1] == "rgb(103,0,31)"  # RdBu
    assert any("map₁ − λ·map₂" in c.value for c in at.caption)


def test_one_head_of_diffllama_says_its_output_passes_the_head_norm(folders):
    at = app_with(folders["diffllama"], "One head")
    assert any("(1 - lambda_init) RMSNorm(weights @ values)" in c.value for c in at.caption)
    titles = [a["text"] for a in chart(at, "head_steps")["layout"]["annotations"]]
    assert any(t.startswith("head output = (1 − λ_init)·RMSNorm(weights · V)") for t in titles)
