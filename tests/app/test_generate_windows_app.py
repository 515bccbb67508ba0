"""The Generate view on sliding-window models, driven with AppTest: a tiny random Mistral (every layer windowed) and
Qwen2 (the last two of four layers windowed), window 4, loaded from folders. The step's attention row is drawn at the
real key positions, 0 outside the window, and a caption says which layers slide and what they do not see."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers as tf
from streamlit.testing.v1 import AppTest
from transformers import AutoModelForCausalLM, AutoTokenizer

from mha_viz.pretrained import PretrainedModel
from tests.app.test_app import APP, z_matrix
from tests.tiny_causal import saved_random_models

V = 30522
W = 4
BASE = {"vocab_size": V, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 101,
        "eos_token_id": 102}  # fmt: skip
CONFIGS = {  # family -> (config, its windowed layers)
    "mistral": (lambda: tf.MistralConfig(**BASE, sliding_window=W), (0, 1, 2, 3)),
    "qwen2": (lambda: tf.Qwen2Config(**BASE, use_sliding_window=True, sliding_window=W, max_window_layers=2), (2, 3)),
}
TEXT = "the cat sat on the mat"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return saved_random_models({name: config for name, (config, _) in CONFIGS.items()}, AutoModelForCausalLM, tmp_path_factory)


def chart(at: AppTest, key: str) -> dict:
    matches = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(matches) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(matches[0].proto.spec)


@pytest.mark.parametrize("name", CONFIGS)
def test_generate_draws_windowed_rows_at_their_keys_and_says_so(folders, name):
    windowed = CONFIGS[name][1]
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"mode": "Pretrained", "text": TEXT, "view": "Generate", "new_tokens": "6", "gen_step": "6"})
    at.run()
    at.text_input(key="model").set_value(folders[name]).run()
    at.button_group(key="view").set_value("Generate").run()  # the first model, an encoder, has no Generate view
    assert not at.exception and not at.error, [e.value for e in at.exception]
    assert at.slider(key="gen_step").value == 6
    m = PretrainedModel(AutoModelForCausalLM.from_pretrained(folders[name], attn_implementation="eager"),
                        AutoTokenizer.from_pretrained(folders[name]))
    g = m.generate(TEXT, 6)
    n = len(g.prompt_ids) + 5  # the prompt, then the 5 tokens written before step 6
    figure = chart(at, "gen_attention")
    keys = figure["layout"]["xaxis"]["ticktext"]
    z = z_matrix(figure["data"][0]).reshape(4, 4, -1)  # (layers, heads, keys)
    assert len(keys) == z.shape[-1] == n > W + 5
    full = m.attentions_for_ids(list(g.input_ids(5)))[:, :, -1]  # (layers, heads, keys): no cache
    np.testing.assert_allclose(z, full, atol=1e-5)  # KV cache against no cache: float32 rounding
    for layer in range(4):
        outside = z[layer, :, : n - W]
        assert (not outside.any()) if layer in windowed else (outside > 0).all()
    captions = " ".join(c.value for c in at.caption)
    listed = ", ".join(map(str, windowed))
    assert "Sliding window" in captions and "✓ equal" in captions  # the logit attribution still adds up
    assert f"layers {listed}: a window of 4 keys, so the {n - W} earliest keys are outside it (weight 0)" in captions
