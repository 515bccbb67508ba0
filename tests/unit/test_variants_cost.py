"""Cost of attention variants: known answers by hand, refusals, and parameter counts of real torch modules."""

from __future__ import annotations

import numpy as np
import pytest
from torch import nn

from mha_viz.figures.common import describe
from mha_viz.figures.cost import kv_cache_figure
from mha_viz.variants_cost import (
    PRESETS,
    CostRow,
    LinearState,
    Preset,
    VariantShape,
    comparison,
    flops_per_token,
    human_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    mha_baseline,
    parameters,
    preset_rows,
    variant_cost,
)


def test_llama_3_8b_caches_4_kib_per_token_per_layer() -> None:
    llama = PRESETS["Llama-3-8B"]
    assert (llama.layers, llama.shape.d_model, llama.shape.h, llama.shape.kv_heads, llama.shape.head_dim) == (
        32, 4096, 32, 8, 128)
    assert kv_bytes_per_token(llama.shape) == 2 * 8 * 128 * 2 == 4096
    assert llama.model_kv_cache_bytes(8192) == 32 * 8192 * 4096 == 2**30  # 1 GiB at 8k tokens in bf16
    assert kv_bytes_per_token(mha_baseline(llama.shape)) == 2 * 32 * 128 * 2  # 4x: 32 query heads / 8 KV heads
    assert kv_bytes_per_token(llama.shape, dtype_bytes=1) == 2048


def test_deepseek_v3_caches_latent_and_rotary_key() -> None:
    v3 = PRESETS["DeepSeek-V3"].shape
    assert kv_bytes_per_token(v3) == (512 + 64) * 2 == 1152
    assert kv_bytes_per_token(mha_baseline(v3)) == 128 * (192 + 128) * 2  # MHA with the same head widths
    # per-layer parameters, written out: W_DQ, norm, W_UQ, W_DKV, norm, W_UKV, W_O
    assert variant_cost(v3, 1).params == (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512
                                          + 512 * 128 * 256 + 128 * 128 * 7168) == 187_107_328


@pytest.mark.parametrize("d_model,h", [(64, 4), (4096, 32), (768, 12)])
def test_mqa_over_mha_is_one_over_h(d_model: int, h: int) -> None:
    mqa, mha = VariantShape("gqa", d_model, h, kv_heads=1), VariantShape("mha", d_model, h)
    assert kv_bytes_per_token(mqa) * h == kv_bytes_per_token(mha) == 2 * d_model * 2
    assert kv_cache_bytes(mqa, 1000) * h == kv_cache_bytes(mha, 1000)


def test_standard_mha_has_4_d_model_squared_weights_and_the_textbook_flops() -> None:
    mha = VariantShape("mha", 64, 4)
    assert sum(parameters(mha).values()) == 4 * 64**2
    f = flops_per_token(mha, 10)
    assert f == {"Q": 2 * 64 * 64, "K": 2 * 64 * 64, "V": 2 * 64 * 64, "scores": 2 * 4 * 10 * 16,
                 "softmax": 5 * 4 * 10, "weights @ V": 2 * 4 * 10 * 16, "W_O": 2 * 64 * 64}


def test_window_bounds_the_cache_and_the_scores() -> None:
    w = VariantShape("window", 64, 4, kv_heads=2, window=16)
    per_token = 2 * 2 * 16 * 2
    assert kv_cache_bytes(w, 10) == 10 * per_token  # shorter than the window: every token
    assert kv_cache_bytes(w, 1000) == 16 * per_token  # longer: the window only
    assert flops_per_token(w, 1000)["scores"] == flops_per_token(w, 16)["scores"] == 2 * 4 * 16 * 16
    sinks = VariantShape("window", 64, 4, window=16, sink_tokens=4, sink_logits=True)
    assert kv_cache_bytes(sinks, 1000) == 20 * 4 * 32 * 2  # StreamingLLM: the first 4 tokens stay
    assert flops_per_token(sinks, 1000)["softmax"] == 5 * 4 * 21  # the sink logit joins every softmax
    assert parameters(sinks)["sink logits"] == 4


def test_gpt_oss_alternates_windowed_and_full_layers() -> None:
    oss = PRESETS["gpt-oss-20b"]
    per_token = 2 * 8 * 64 * 2  # 8 KV heads of head_dim 64
    assert kv_bytes_per_token(oss.shape) == per_token
    assert oss.model_kv_cache_bytes(100_000) == 12 * 128 * per_token + 12 * 100_000 * per_token


def test_a_hybrids_linear_layers_keep_a_fixed_state_and_its_attention_layers_a_kv_cache() -> None:
    qwen = PRESETS["Qwen3-Next-80B-A3B"]
    state = 32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)  # a 128 x 128 matrix per value head + 3 conv inputs
    assert qwen.linear.numbers == state and qwen.attention_layers == 12
    per_token = 2 * 2 * 256 * 2  # 2 KV heads of head_dim 256, bf16
    for n in (1, 8192, 262_144):
        assert qwen.model_kv_cache_bytes(n) == 12 * n * per_token + 36 * state * 2
    assert qwen.state_bytes() == 36 * state * 2  # the same at every context
    table = comparison([preset_rows()[-1]], 8192)
    assert table["linear layers' state"] == ["36 × 1.05 MiB"] and table["KV cache (context)"] == ["230 MiB"]
    assert table["MHA cache bytes"] == [48 * 8192 * 2 * 16 * 256 * 2]  # MHA: every layer attention, every head
    with pytest.raises(ValueError, match="at least one attention layer"):
        Preset("all linear", qwen.shape, 4, "", linear_layers=4, linear=qwen.linear)
    with pytest.raises(ValueError, match="must divide"):
        LinearState(3, 4, 8, 8)


def test_the_linear_state_is_what_transformers_keeps_for_a_gated_deltanet_layer() -> None:
    """The recurrent state a Qwen3-Next cache holds for a linear layer is h_v x d_k x d_v, and its convolution state
    has one column of 2·h_k·d_k + h_v·d_v numbers per kernel tap (transformers keeps c taps, a step needs c - 1)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3NextConfig

    config = Qwen3NextConfig(vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
                             linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6,
                             linear_conv_kernel_dim=3, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8,
                             shared_expert_intermediate_size=8, layer_types=["linear_attention", "full_attention"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.arange(10)[None], use_cache=True).past_key_values
    if not hasattr(cache, "get_recurrent_state"):
        pytest.skip("this transformers keeps a linear layer's state in another cache class")
    linear = LinearState(2, 4, 8, 6, conv_width=3)
    recurrent, conv = cache.get_recurrent_state(0), cache.get_conv_state(0)  # (1, h_v, d_k, d_v), (1, conv dim, c)
    assert recurrent[0].numel() == 4 * 8 * 6 and tuple(conv.shape[1:]) == (2 * 2 * 8 + 4 * 6, 3)
    assert linear.numbers == recurrent[0].numel() + (conv.shape[2] - 1) * conv.shape[1]


def test_moh_counts_the_heads_used_and_caches_every_head() -> None:
    moh, mha = VariantShape("moh", 64, 8, moh_k=2), VariantShape("mha", 64, 8)
    f, g = flops_per_token(moh, 32), flops_per_token(mha, 32)
    assert f["scores"] * 4 == g["scores"] and f["W_O"] * 4 == g["W_O"] and f["Q"] * 4 == g["Q"]
    assert f["K"] == g["K"] and f["router"] == 2 * 64 * 8
    assert kv_bytes_per_token(moh) == kv_bytes_per_token(mha)
    assert parameters(moh)["router"] == 64 * 8
    assert parameters(VariantShape("moh", 64, 8, moh_k=2, moh_shared=2))["router"] == 64 * 8 + 2 * 64


def test_mla_decoding_flops_by_hand() -> None:
    mla = VariantShape("mla", 32, 4, head_dim=8, v_dim=6, kv_latent=10, q_latent=12, rope_dim=2)
    f = flops_per_token(mla, 5)
    assert f["scores"] == 2 * 4 * 5 * (10 + 2) and f["weights @ latent"] == 2 * 4 * 5 * 10
    assert f["Q down"] == 2 * 32 * 12 and f["Q up"] == 2 * 12 * 4 * 10 and f["W_O"] == 2 * 4 * 6 * 32


@pytest.mark.parametrize("kwargs,message", [
    (dict(variant="gqa", d_model=64, h=4, kv_heads=3), "must divide h"),
    (dict(variant="gqa", d_model=64, h=4, kv_heads=4), "kv_heads = h is mha"),
    (dict(variant="mha", d_model=64, h=4, kv_heads=2), "own keys and values"),
    (dict(variant="gqa", d_model=64, h=4, kv_heads=8), "must divide h"),
    (dict(variant="mla", d_model=64, h=4), "kv_latent ≥ 1"),
    (dict(variant="window", d_model=64, h=4), "window ≥ 1"),
    (dict(variant="mha", d_model=64, h=4, window=8), "belongs to the window"),
    (dict(variant="gqa", d_model=64, h=4, kv_heads=2, rope_dim=8), "belongs to the mla"),
    (dict(variant="diff", d_model=48, h=3, kv_heads=3), "must be even"),
    (dict(variant="moh", d_model=64, h=4, moh_k=5), "moh_k must be from 1 to"),
    (dict(variant="moh", d_model=64, h=4, moh_k=0), "moh_k must be from 1 to"),
    (dict(variant="mha", d_model=64, h=5), "does not divide"),
    (dict(variant="mha", d_model=0, h=4), "d_model must be a whole number"),
    (dict(variant="nope", d_model=64, h=4), "variant must be one of"),
    (dict(variant="mha", d_model=64, h=4, sink_logits=True), "sink_logits belong"),
])
def test_invalid_shapes_are_refused_with_a_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VariantShape(**kwargs)


def test_invalid_context_and_dtype_are_refused() -> None:
    s = VariantShape("mha", 64, 4)
    with pytest.raises(ValueError, match="context"):
        kv_cache_bytes(s, 0)
    with pytest.raises(ValueError, match="dtype_bytes"):
        kv_bytes_per_token(s, 0)


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_llama_and_qwen3_attention_parameters() -> None:
    from transformers import LlamaConfig, Qwen3Config
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    for kv in (1, 2, 6):
        cfg = LlamaConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=kv, head_dim=8)
        shape = VariantShape("mha" if kv == 6 else "gqa", 48, 6, head_dim=8, kv_heads=kv)
        assert variant_cost(shape, 4).params == _numel(LlamaAttention(cfg, 0)), kv
    cfg = Qwen3Config(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=16)
    shape = VariantShape("gqa", 48, 6, head_dim=16, kv_heads=2, qk_norm=True)
    assert variant_cost(shape, 4).params == _numel(Qwen3Attention(cfg, 0))


def test_gpt_oss_attention_parameters() -> None:
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    cfg = GptOssConfig(hidden_size=40, num_attention_heads=8, num_key_value_heads=2, head_dim=6, sliding_window=4,
                       num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
    shape = VariantShape("window", 40, 8, head_dim=6, kv_heads=2, window=4, sink_logits=True, bias=True)
    assert variant_cost(shape, 4).params == _numel(GptOssAttention(cfg, 0))


def test_deepseek_v3_attention_parameters() -> None:
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    for q_latent in (12, None):
        cfg = DeepseekV3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_latent,
                               kv_lora_rank=10, qk_nope_head_dim=8, qk_rope_head_dim=2, v_head_dim=6)
        shape = VariantShape("mla", 32, 4, head_dim=8, v_dim=6, kv_latent=10, q_latent=q_latent or 0, rope_dim=2)
        assert variant_cost(shape, 4).params == _numel(DeepseekV3Attention(cfg, 0)), q_latent


def test_diffllama_attention_parameters() -> None:
    from transformers import DiffLlamaConfig
    from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention

    cfg = DiffLlamaConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=8)
    shape = VariantShape("diff", 48, 6, head_dim=8, kv_heads=2)
    assert variant_cost(shape, 4).params == _numel(DiffLlamaAttention(cfg, 0))
    assert parameters(shape)["λ (λ_q1, λ_k1, λ_q2, λ_k2)"] == 4 * 8


def test_mha_equals_torch_multihead_attention() -> None:
    shape = VariantShape("mha", 48, 6, bias=True)
    assert variant_cost(shape, 4).params == _numel(nn.MultiheadAttention(48, 6))


def test_comparison_table_and_figure() -> None:
    rows = [CostRow("mine", VariantShape("gqa", 64, 4, kv_heads=1)), *preset_rows()]
    table = comparison(rows, 8192)
    assert table["model"] == ["mine", "Llama-3-8B", "Qwen3-8B", "Mistral-7B", "DeepSeek-V3", "gpt-oss-20b",
                              "Qwen3-Next-80B-A3B"]
    assert table["MHA / variant cache"][:2] == [4.0, 4.0]
    assert table["KV cache (context)"][1] == "1 GiB" and table["MHA KV cache (context)"][1] == "4 GiB"
    assert table["MHA / variant cache"][3] == 8.0  # Mistral at 8192 tokens: a 4096 window and 4x fewer KV heads
    assert all(len(column) == len(rows) for column in table.values())
    fig = kv_cache_figure(table["model"], np.array(table["cache bytes"]), np.array(table["MHA cache bytes"]),
                          context=8192, width=400)
    variant, mha = (t for t in fig.data if t.name == "variant"), (t for t in fig.data if t.name == "MHA")
    np.testing.assert_allclose(np.asarray(next(variant).x, dtype=float), table["cache bytes"], rtol=1e-6)
    assert list(next(mha).text)[1] == "4 GiB"
    assert fig.layout.xaxis.type == "log"  # kilobytes beside tens of gigabytes
    assert "KV cache for 8,192 tokens" in describe(fig)
    with pytest.raises(ValueError, match="one variant and one MHA size per label"):
        kv_cache_figure(["a"], np.array([1.0, 2.0]), np.array([1.0, 2.0]), context=1)
    with pytest.raises(ValueError, match="positive"):
        kv_cache_figure(["a"], np.array([0.0]), np.array([1.0]), context=1)


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (512, 4096, 1536 * 1024, 2**30)] == ["512 B", "4 KiB", "1.5 MiB", "1 GiB"]

