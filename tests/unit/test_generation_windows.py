"""generate() on sliding-window models: once the prompt and the new tokens outgrow the window, transformers' cache
keeps only the newest keys on windowed layers. Every step's row must still be the model's own row of a forward pass
without a cache (eager, output_attentions) over the whole sequence, at the real key positions, 0 outside the window;
Generation.windows says which layers are windowed. Tiny random models of 28 windowed text decoders of transformers
(adapted and generic; all layouts: every layer, alternating, Qwen's max_window_layers, hybrids), window 4, prompt +
new tokens = 14 keys."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoTokenizer

from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import random_causal_lm

V = 30522
W = 4  # the sliding window: a query sees itself and the W - 1 keys before it
NEW = 8
PROMPT = "the quick brown fox jumps"  # [CLS], 5 words, [SEP]: 7 tokens, the prompt alone outgrows the window
BASE = {"vocab_size": V, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 101,
        "eos_token_id": 102}  # fmt: skip
ALTERNATE = (W, None, W, None)  # sliding, full, sliding, full
ALL = (W,) * 4
QWEN_LAST = (None, None, W, W)  # Qwen2/Qwen3: layers from max_window_layers on slide
# 4 small experts, not the real 64-256 (and per-layer embeddings of 30522 x 8 for Gemma 4, not 262144 x 256):
# the windows under test do not depend on them, and the real sizes build 20-270M parameters
FEW_EXPERTS = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
# family -> (config, each layer's window as the model's code applies it)
FAMILIES: dict[str, tuple[Callable[[], tf.PretrainedConfig], tuple[int | None, ...]]] = {
    "mistral": (lambda: tf.MistralConfig(**BASE, sliding_window=W), ALL),
    "ministral": (lambda: tf.MinistralConfig(**BASE, head_dim=8, sliding_window=W,
                                             layer_types=["sliding_attention", "full_attention"] * 2), ALTERNATE),
    "mixtral": (lambda: tf.MixtralConfig(**BASE, sliding_window=W, num_local_experts=2, num_experts_per_tok=1), ALL),
    "qwen2": (lambda: tf.Qwen2Config(**BASE, use_sliding_window=True, sliding_window=W, max_window_layers=2),
              QWEN_LAST),
    "qwen2_moe": (lambda: tf.Qwen2MoeConfig(**BASE, use_sliding_window=True, sliding_window=W, max_window_layers=2,
                                            num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
                                            shared_expert_intermediate_size=32), (W, None, None, None)),
    "qwen3": (lambda: tf.Qwen3Config(**BASE, head_dim=8, use_sliding_window=True, sliding_window=W,
                                     max_window_layers=2), QWEN_LAST),
    "qwen3_moe": (lambda: tf.Qwen3MoeConfig(**BASE, head_dim=8, use_sliding_window=True, sliding_window=W,
                                            num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32), ALL),
    "phi3": (lambda: tf.Phi3Config(**BASE, sliding_window=W), ALL),
    "phimoe": (lambda: tf.PhimoeConfig(**BASE, sliding_window=W, num_local_experts=2, num_experts_per_tok=1), ALL),
    "starcoder2": (lambda: tf.Starcoder2Config(**BASE, sliding_window=W), ALL),
    "gemma2": (lambda: tf.Gemma2Config(**BASE, head_dim=8, query_pre_attn_scalar=8, sliding_window=W), ALTERNATE),
    "gemma3": (lambda: tf.Gemma3TextConfig(**BASE, head_dim=8, query_pre_attn_scalar=8, sliding_window=W,
                                           sliding_window_pattern=2), ALTERNATE),
    "vaultgemma": (lambda: tf.VaultGemmaConfig(**BASE, head_dim=8, query_pre_attn_scalar=8, sliding_window=W),
                   ALTERNATE),
    "gpt-oss": (lambda: tf.GptOssConfig(**BASE, head_dim=8, sliding_window=W, num_local_experts=2,
                                        num_experts_per_tok=1), ALTERNATE),
    "cohere2": (lambda: tf.Cohere2Config(**BASE, sliding_window=W, sliding_window_pattern=2), ALTERNATE),
    "gemma3n_text": (lambda: tf.Gemma3nTextConfig(  # layers 2 and 3 read the keys and values layers 0 and 1 stored
        **{**BASE, "vocab_size_per_layer_input": V}, head_dim=8, hidden_size_per_layer_input=8, sliding_window=W,
        layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2, laurel_rank=4,
        altup_num_inputs=2, activation_sparsity_pattern=[0.0] * 4), ALTERNATE),
    "exaone4": (lambda: tf.Exaone4Config(**BASE, sliding_window=W, sliding_window_pattern=2), ALTERNATE),
    "olmo3": (lambda: tf.Olmo3Config(**BASE, sliding_window=W), (W, W, W, None)),
    "smollm3": (lambda: tf.SmolLM3Config(**BASE, use_sliding_window=True, sliding_window=W, max_window_layers=2),
                (None, None, None, W)),
    "granite_swa": (lambda: tf.AutoConfig.for_model("granite_swa", **BASE, sliding_window=W), (None, W, W, W)),
    "cohere2_moe": (lambda: tf.AutoConfig.for_model("cohere2_moe", **BASE, head_dim=8, sliding_window=W),
                    (W, W, W, None)),
    "afmoe": (lambda: tf.AutoConfig.for_model("afmoe", **BASE, **FEW_EXPERTS, head_dim=8, sliding_window=W),
              (W, W, W, None)),
    "exaone_moe": (lambda: tf.AutoConfig.for_model("exaone_moe", **BASE, **FEW_EXPERTS, head_dim=8, sliding_window=W),
                   (W, W, W, None)),
    "mimo_v2_flash": (lambda: tf.AutoConfig.for_model("mimo_v2_flash", **BASE, head_dim=8, sliding_window=W,
                                                      n_routed_experts=4, num_experts_per_tok=2,
                                                      moe_intermediate_size=32), (None, W, W, W)),
    "gemma4": (lambda: tf.AutoConfig.for_model("gemma4_text", **BASE, head_dim=8, sliding_window=W,
                                               vocab_size_per_layer_input=V, hidden_size_per_layer_input=8),
               (W, W, W, None)),
    "ministral3": (lambda: tf.AutoConfig.for_model("ministral3", **BASE, head_dim=8, sliding_window=W), ALL),
    "doge": (lambda: tf.AutoConfig.for_model("doge", **BASE, sliding_window=W), ALL),
    "gpt_neo": (lambda: tf.GPTNeoConfig(vocab_size=V, hidden_size=32, num_layers=4, num_heads=4, window_size=W,
                                        attention_types=[[["global", "local"], 2]], max_position_embeddings=64,
                                        intermediate_size=64, bos_token_id=101, eos_token_id=102), (None, W, None, W)),
}  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(bundled_model_dir())


def no_cache_rows(lm: torch.nn.Module, ids: list[int]) -> np.ndarray:
    """The model's own weights (L, H, T, T): one eager forward over the whole sequence, no cache."""
    with torch.no_grad():
        out = lm(input_ids=torch.tensor([ids]), use_cache=False, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float().numpy()


@pytest.mark.parametrize("name", FAMILIES)
def test_windowed_rows_are_the_models_own_at_the_real_key_positions(tokenizer, name):
    config, windows = FAMILIES[name]
    lm = random_causal_lm(config())
    m = PretrainedModel(lm, tokenizer, name=f"tiny-{name}")
    g = m.generate(PROMPT, NEW)
    P = len(g.prompt_ids)
    assert P == 7 and len(g.steps) == NEW and P + NEW - 1 > W + 8  # the last row's keys: mostly outside the window
    assert g.windows == windows and g.windowed_layers == tuple(i for i, w in enumerate(windows) if w)
    ids = torch.tensor([list(g.prompt_ids)])
    assert g.token_ids == tuple(lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                                            do_sample=False, min_new_tokens=NEW)[0, P:].tolist())
    full = no_cache_rows(lm, [*g.prompt_ids, *g.token_ids])  # (L, H, T, T)
    for k, step in enumerate(g.steps):
        keys, query = P + k, P - 1 + k
        assert step.attentions.shape == (4, 4, keys) and len(g.key_tokens(k)) == keys
        np.testing.assert_allclose(step.attentions, full[:, :, query, :keys], atol=1e-5, err_msg=f"step {k}")
        for layer, window in enumerate(windows):
            seen = slice(0, keys) if window is None else slice(max(0, keys - window), keys)
            assert (step.attentions[layer, :, seen.start] > 0).any()  # the window's earliest key is seen
            assert not step.attentions[layer, :, : seen.start].any()  # and to none outside its window: exactly 0
            assert not full[layer, :, query, : seen.start].any()  # as in the forward pass without a cache
        assert g.outside_window(k) == {layer: keys - w for layer, w in enumerate(windows) if w and keys > w}


def test_a_cache_holding_fewer_keys_than_a_known_window_is_refused_not_mislabelled():
    from mha_viz.pretrained.generation import placed_rows

    rows = [torch.rand(1, 2, 1, 9), torch.rand(1, 2, 1, 4)]  # 9 keys; a windowed layer holding its last 4
    placed = placed_rows(rows, 9, (None, 4))
    assert placed.shape == (2, 2, 9) and not placed[1, :, :5].any()
    assert torch.equal(placed[1, :, 5:], rows[1][0, :, -1]) and torch.equal(placed[0], rows[0][0, :, -1])
    with pytest.raises(ValueError, match="layer 1 returned 4 keys for 9 positions: the cache"):
        placed_rows(rows, 9, (None, None))  # no window known: the row's keys cannot be told
    with pytest.raises(ValueError, match="layer 1 returned 4 keys for 9 positions with a sliding window of 6"):
        placed_rows(rows, 9, (None, 6))  # fewer keys than the window


@pytest.mark.parametrize("name", ["mistral", "qwen2", "qwen3", "phi3", "gpt_neo"])  # adapted: attribution available
def test_the_logit_attribution_of_a_windowed_step_adds_up_to_the_models_logit(tokenizer, name):
    lm = random_causal_lm(FAMILIES[name][0]())
    m = PretrainedModel(lm, tokenizer)
    g = m.generate(PROMPT, NEW)
    ids = g.input_ids(NEW - 1)  # 14 tokens: the predicting query sees only the last 4 on windowed layers
    dla = m.logit_attribution(ids=ids, token=g.steps[-1].token_id)
    with torch.no_grad():
        logit = lm(input_ids=torch.tensor([list(ids)]), use_cache=False).logits[0, -1, g.steps[-1].token_id]
    assert abs(dla.logit - float(logit)) <= 1e-5 and abs(dla.total - dla.logit) <= 1e-5
    assert g.steps[-1].token_id == int(np.argmax(g.steps[-1].probs))
