"""Direct logit attribution on tiny random causal LMs of the decoder families beyond GPT-2 and LLaMA: parallel
attention and MLP (GPT-NeoX, Phi, Falcon), ALiBi (Bloom), local layers (GPT-Neo), fused qkv (Phi-3; multi-query GPTBigCode), q/k norms
(Qwen3), Gemma's scaled embeddings and (1 + weight) RMSNorm, Cohere's logit scale. The terms must add up to the model's own logit and
each head's term must be its traced contribution through the frozen final norm, recomputed here from the model's
own modules, also for DeepSeek's multi-head latent attention with a mixture-of-experts MLP; Gemma2, Gemma 3 and
post-norm OPT are refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoTokenizer

from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import random_causal_lm

V = 30522
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "max_position_embeddings": 64, "bos_token_id": 101, "eos_token_id": 102, "pad_token_id": 0}  # fmt: skip
MLA = {"q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5,
       "num_key_value_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
       "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}  # fmt: skip
CONFIGS = {
    "gpt_neo": lambda: tf.GPTNeoConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, window_size=4,
                                       attention_types=[[["global", "local"], 1]], max_position_embeddings=64,
                                       intermediate_size=64, bos_token_id=101, eos_token_id=102),
    "gpt_bigcode": lambda: tf.GPTBigCodeConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                               multi_query=True, bos_token_id=101, eos_token_id=102),
    "gpt_neox": lambda: tf.GPTNeoXConfig(vocab_size=V, rotary_pct=0.5, tie_word_embeddings=False, **SMALL),
    "opt": lambda: tf.OPTConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                                word_embed_proj_dim=32, max_position_embeddings=64, bos_token_id=101, eos_token_id=102,
                                pad_token_id=0),
    "bloom": lambda: tf.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4, bos_token_id=101,
                                    eos_token_id=102, pad_token_id=0),
    "falcon": lambda: tf.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_kv_heads=2, new_decoder_architecture=True, max_position_embeddings=64,
                                      bos_token_id=101, eos_token_id=102, pad_token_id=0),
    "phi": lambda: tf.PhiConfig(vocab_size=V, partial_rotary_factor=0.5, qk_layernorm=True, **SMALL),
    "phi3": lambda: tf.Phi3Config(vocab_size=V, num_key_value_heads=2, **SMALL),
    "qwen3": lambda: tf.Qwen3Config(vocab_size=V, num_key_value_heads=2, head_dim=8, **SMALL),
    "gemma": lambda: tf.GemmaConfig(vocab_size=V, num_key_value_heads=1, head_dim=8, **SMALL),
    "deepseek_v3": lambda: tf.DeepseekV3Config(vocab_size=V, **MLA, **SMALL),  # layer 1 a mixture of experts
    "deepseek_v2": lambda: tf.DeepseekV2Config(vocab_size=V, **{**MLA, "q_lora_rank": None}, **SMALL),
    "cohere": lambda: tf.CohereConfig(vocab_size=V, num_key_value_heads=2, use_qk_norm=True, logit_scale=0.6,
                                      **SMALL),  # parallel attention and MLP; logits times logit_scale
}  # fmt: skip
TEXT = "the quick brown fox jumps over the lazy dog"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(bundled_model_dir())


@pytest.fixture(scope="module")
def models(tokenizer) -> dict[str, PretrainedModel]:
    return {name: PretrainedModel(random_causal_lm(config()), tokenizer, name=f"tiny-{name}") for name, config in CONFIGS.items()}


def own_logits(m: PretrainedModel, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return m.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]  # (T, V)


def final_norm_input(m: PretrainedModel, ids: list[int]) -> tuple[torch.nn.Module, torch.Tensor]:
    """The final norm (the module right before the LM head) and what it received, (T, d), recorded here."""
    norm = m.adapter.residual_stream()[1]
    seen = []
    handle = norm.register_forward_pre_hook(lambda module, args: seen.append(args[0][0].detach()))
    try:
        own_logits(m, ids)
    finally:
        handle.remove()
    return norm, seen[0]


def through_frozen_norm(m: PretrainedModel, norm: torch.nn.Module, part: torch.Tensor, x: torch.Tensor,
                        token: int) -> torch.Tensor:
    """u . (gamma * centre(part) / s), s measured on x, times the logit scale (Cohere's): one residual-stream part's
    share of the logit."""
    gamma = norm.weight.detach().double()
    if isinstance(norm, torch.nn.LayerNorm) or type(norm).__name__ == "CohereLayerNorm":  # Cohere's: no bias
        s = (x.var(unbiased=False) + getattr(norm, "eps", getattr(norm, "variance_epsilon", None))).sqrt()
        part = part - part.mean(-1, keepdim=True)
    else:  # an RMSNorm; Gemma's multiplies by (1 + weight)
        s = (x.pow(2).mean() + getattr(norm, "variance_epsilon", getattr(norm, "eps", None))).sqrt()
        gamma = gamma + 1 if m.architecture == "gemma" else gamma
    u = m.model.get_output_embeddings().weight[token].detach().double()
    return (part * gamma / s) @ u * getattr(m.model.config, "logit_scale", 1.0)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_terms_sum_to_the_models_logit(models, name):
    m = models[name]
    ids = m.tokenizer(TEXT)["input_ids"]
    logits = own_logits(m, ids)
    for position in range(len(ids)):
        a = m.logit_attribution(TEXT, position=position)
        assert a.token_id == int(logits[position].argmax())
        assert a.logit == pytest.approx(float(logits[position, a.token_id]), abs=1e-5)
        assert abs(a.total - a.logit) <= 1e-3 and a.residual_error <= 1e-4
        assert np.abs(a.heads).max() > 0.05
        assert [t for t in a.terms if "MLP" in t] == ["layer 0 MLP", "layer 1 MLP"]


@pytest.mark.parametrize("name", CONFIGS)
def test_each_head_is_its_traced_contribution_through_the_frozen_norm(models, name):
    m = models[name]
    ids = m.tokenizer(TEXT)["input_ids"]
    position = 5
    a = m.logit_attribution(TEXT, position=position)
    norm, x = final_norm_input(m, ids)
    x = x[position].double()
    for layer, trace in enumerate(m.traces(TEXT)):
        assert max(trace.meta["check"].values()) <= 1e-5
        contributions = torch.as_tensor(trace.head_contributions()[:, position]).double()  # (H, d)
        expected = through_frozen_norm(m, norm, contributions, x, a.token_id)
        np.testing.assert_allclose(a.heads[layer], expected.numpy(), atol=1e-5, err_msg=f"{name} layer {layer}")


def test_gemma_embeddings_are_scaled_by_the_square_root_of_d_model(models):
    m = models["gemma"]
    ids = m.tokenizer(TEXT)["input_ids"]
    a = m.logit_attribution(TEXT, position=3)
    norm, x = final_norm_input(m, ids)
    embedding = m.model.model.embed_tokens.weight[ids[3]].detach().double() * 32**0.5  # (d,)
    expected = through_frozen_norm(m, norm, embedding, x[3].double(), a.token_id)
    assert a.terms["embeddings"] == pytest.approx(float(expected), abs=1e-5)


def test_gemma2_gemma3_and_post_norm_opt_are_refused_with_the_reason(tokenizer):
    gemma2 = tf.Gemma2Config(vocab_size=V, num_key_value_heads=2, head_dim=8, **SMALL)
    m = PretrainedModel(random_causal_lm(gemma2), tokenizer)
    assert m.unavailable is None  # traced in full, only the attribution is refused
    with pytest.raises(ValueError, match="Gemma2 normalises each attention output .* soft-caps the final logits"):
        m.logit_attribution(TEXT)
    gemma3 = tf.Gemma3TextConfig(vocab_size=V, num_key_value_heads=2, head_dim=8, **SMALL)
    m = PretrainedModel(random_causal_lm(gemma3), tokenizer)
    assert m.unavailable is None
    with pytest.raises(ValueError, match="Gemma 3 normalises each attention output"):
        m.logit_attribution(TEXT)
    opt = tf.OPTConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                       word_embed_proj_dim=32, max_position_embeddings=64, do_layer_norm_before=False)
    with pytest.raises(ValueError, match="normalises after each block"):
        PretrainedModel(random_causal_lm(opt), tokenizer).logit_attribution(TEXT)
