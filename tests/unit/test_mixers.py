"""Linear-attention and state-space layers as exact mixing matrices (mha_viz.mixers, mha_viz.pretrained.mixing).

The matrices are checked against transformers' own kernels (chunked and recurrent) on random inputs, then on tiny
random hybrid models (Qwen3-Next: Gated DeltaNet beside gated softmax attention; Mamba-2) against the unmodified
modules, hooked: M @ values equals the mixer's kernel output, the head outputs the input of out_proj, the trace's
output the output of out_proj, and tracing leaves the logits alone. Negative controls (the decay dropped, D dropped,
the output gate dropped) must fail those checks."""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as tf
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.mamba.modeling_mamba import mamba_selective_scan
from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

from mha_viz import TraceCheckWarning, mixers
from mha_viz.analysis import mixer_stats
from mha_viz.checks import failures
from mha_viz.mixers import KINDS, SelectiveScan, ShortConv, decay_matrix, gated_delta_matrix, ssd_matrix
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.pretrained.adapter import ADAPTERS
from mha_viz.pretrained.architectures import adapter_for
from mha_viz.trace import AttentionTrace
from tests.tiny_causal import random_model

V = 30522
TEXT = "The cat sat on the mat because it was tired, and then the dog sat on the mat too."
# family -> (README name, config): the hybrid and mixer-only families (tests/unit/test_families.py: the softmax ones)
HYBRID: dict[str, tuple[str, Callable[[], tf.PretrainedConfig]]] = {
    "qwen3_next": ("Qwen3-Next", lambda: tf.Qwen3NextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, max_position_embeddings=128)),
    "qwen3_5_text": ("Qwen3.5", lambda: tf.Qwen3_5TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, max_position_embeddings=128)),
    "bamba": ("Bamba", lambda: tf.BambaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=2,
        mamba_d_state=8, mamba_chunk_size=8, max_position_embeddings=128)),
    "bamba (more mixer heads)": ("Bamba", lambda: tf.BambaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=2,
        mamba_d_state=8, mamba_chunk_size=8, max_position_embeddings=128)),
    "granitemoehybrid": ("Granite 4", lambda: tf.GraniteMoeHybridConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["mamba", "attention", "mamba"], mamba_n_heads=4, mamba_d_head=16,
        mamba_n_groups=2, mamba_d_state=8, mamba_chunk_size=8, num_local_experts=0, shared_intermediate_size=32,
        attention_multiplier=0.2, position_embedding_type="rope", max_position_embeddings=128, residual_multiplier=0.22,
        logits_scaling=4.0, embedding_multiplier=3.0)),
    "kimi_linear": ("Kimi Linear", lambda: tf.KimiLinearConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=6,
        v_head_dim=5, num_local_experts=2, num_experts_per_tok=1, linear_num_heads=4, linear_head_dim=8,
        layer_types=["linear_attention", "full_attention", "linear_attention"], max_position_embeddings=128,
        pad_token_id=0, bos_token_id=101, eos_token_id=102)),
    "minimax": ("MiniMax", lambda: tf.MiniMaxConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, layer_types=["linear_attention", "full_attention", "linear_attention"],
        block_size=4, num_local_experts=2, num_experts_per_tok=1, max_position_embeddings=128)),
    "olmo_hybrid": ("OLMo hybrid", lambda: tf.OlmoHybridConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, max_position_embeddings=128, pad_token_id=0, eos_token_id=102,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])),
    "olmo_hybrid (no positions)": ("OLMo hybrid", lambda: tf.OlmoHybridConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, linear_num_value_heads=4, linear_num_key_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, max_position_embeddings=128, pad_token_id=0, eos_token_id=102,
        linear_allow_neg_eigval=False, rope_parameters={"rope_type": "default"},
        layer_types=["linear_attention", "full_attention"])),
    "nemotron_h": ("Nemotron-H", lambda: tf.NemotronHConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        layers_block_type=["linear_attention", "mlp", "full_attention", "moe", "linear_attention"], mamba_num_heads=4,
        mamba_head_dim=16, n_groups=2, ssm_state_size=8, chunk_size=8, n_routed_experts=2, num_experts_per_tok=1,
        moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, max_position_embeddings=128)),
    "nemotron_h (mixers only)": ("Nemotron-H", lambda: tf.NemotronHConfig(
        vocab_size=V, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        layers_block_type=["linear_attention", "full_attention", "linear_attention"], mamba_num_heads=8,
        mamba_head_dim=8, n_groups=2, ssm_state_size=8, chunk_size=8, max_position_embeddings=128)),
    "falcon_h1": ("Falcon-H1", lambda: tf.FalconH1Config(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=8,
        mamba_chunk_size=8, max_position_embeddings=128, key_multiplier=0.7, attention_in_multiplier=1.3,
        attention_out_multiplier=0.8, ssm_in_multiplier=1.2, ssm_out_multiplier=0.9,
        ssm_multipliers=[0.5, 1.5, 0.8, 1.1, 0.6], lm_head_multiplier=0.7, embedding_multiplier=1.6,
        mlp_multipliers=[0.9, 1.1])),
    "falcon_h1 (gated norm)": ("Falcon-H1", lambda: tf.FalconH1Config(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=8,
        mamba_chunk_size=8, max_position_embeddings=128, mamba_rms_norm=True, mamba_norm_before_gate=False)),
    "mamba2": ("Mamba-2", lambda: tf.Mamba2Config(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_heads=8, head_dim=8, expand=2, n_groups=2,
        state_size=8, chunk_size=8)),
    "mamba": ("Mamba", lambda: tf.MambaConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4, time_step_rank=4)),
    "falcon_mamba": ("Falcon Mamba", lambda: tf.FalconMambaConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4, time_step_rank=4)),
    "jamba": ("Jamba", lambda: tf.JambaConfig(
        vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
        num_experts=2, num_experts_per_tok=1, mamba_d_state=8, mamba_expand=2, mamba_dt_rank=4, mamba_d_conv=4,
        max_position_embeddings=128)),
    "lfm2": ("LFM2", lambda: tf.Lfm2Config(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["conv", "full_attention", "conv"], conv_L_cache=3,
        max_position_embeddings=128)),
    "lfm2 (conv bias)": ("LFM2", lambda: tf.Lfm2Config(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, layer_types=["conv", "full_attention"], conv_L_cache=4, conv_bias=True,
        max_position_embeddings=128)),
    "lfm3": ("LFM3", lambda: tf.Lfm3Config(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, layer_types=["conv", "sliding_attention", "full_attention"],
        sliding_window=4, conv_L_cache=7, max_position_embeddings=128, pad_token_id=0, bos_token_id=101,
        eos_token_id=102)),
    "lfm2_moe": ("LFM2-MoE", lambda: tf.Lfm2MoeConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, layer_types=["conv", "full_attention", "conv"],
        num_dense_layers=1, num_experts=2, num_experts_per_tok=1, max_position_embeddings=128)),
}  # fmt: skip


def slow_decays(model: torch.nn.Module) -> None:
    """Decays between 0.6 and 0.99 per token (A_log), so a mixer reaches far back and its matrix has structure."""
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "A_log"):
                module.A_log.copy_(torch.empty_like(module.A_log).uniform_(-4.0, -1.0))


def config_of(name: str) -> tf.PretrainedConfig:
    """The family's tiny config; the test is skipped where this transformers does not have the family yet (the lowest
    declared version predates some: Kimi Linear came after 5.15)."""
    try:
        return HYBRID[name][1]()
    except AttributeError:
        pytest.skip(f"transformers {tf.__version__} has no {HYBRID[name][0]} yet")


class Built(dict):
    """The tiny models by family; a family this transformers does not have skips the test that asks for it."""

    def __missing__(self, name: str) -> PretrainedModel:
        config_of(name)  # skips
        raise KeyError(name)


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    out = Built()
    for name, (_, config) in HYBRID.items():
        try:
            model = random_model(AutoModelForCausalLM, config())
        except AttributeError:  # not in this transformers: its tests skip (Built)
            continue
        slow_decays(model)
        out[name] = PretrainedModel(model, tokenizer, name=f"tiny-{name}", strict=True)
    return out


# ------------------------------------------------------------------------------ the matrices against the kernels


def test_a_gated_delta_matrix_times_the_values_is_the_kernels_output():
    torch.manual_seed(0)
    T, H_k, H_v, d_k, d_v = 150, 2, 4, 8, 5  # two value heads per query/key head; 150 = 2 chunks of 64 + a part
    q, k = (torch.randn(1, T, H_k, d_k).repeat_interleave(2, 2) for _ in range(2))  # each key head's, per value head
    v = torch.randn(1, T, H_v, d_v)
    g, beta = -F.softplus(torch.randn(1, T, H_v)) * 0.3, torch.rand(1, T, H_v)
    kernel = {"g": g, "beta": beta, "initial_state": None, "output_final_state": False, "use_qk_l2norm_in_kernel": True}
    chunked, _ = qwen3_next.torch_chunk_gated_delta_rule(q, k, v, **kernel)
    recurrent, _ = qwen3_next.torch_recurrent_gated_delta_rule(q, k, v, **kernel)
    qh, kh = (qwen3_next.l2norm(x.transpose(1, 2)) for x in (q, k))  # (1, H_v, T, d_k)
    M = gated_delta_matrix(qh * d_k**-0.5, kh, g.transpose(1, 2), beta.transpose(1, 2))  # (1, H_v, T, T)
    mixed = (M @ v.transpose(1, 2)).transpose(1, 2)  # (1, T, H_v, d_v)
    for reference in (chunked, recurrent):
        assert (mixed - reference).abs().max() <= 1e-5 * reference.abs().max()
    assert torch.equal(M.triu(1), torch.zeros_like(M))  # causal
    assert (M < 0).any() and not torch.allclose(M.sum(-1), torch.ones(T))  # signed, not a probability
    undecayed = gated_delta_matrix(qh * d_k**-0.5, kh, torch.zeros_like(g.transpose(1, 2)), beta.transpose(1, 2))
    assert ((undecayed @ v.transpose(1, 2)).transpose(1, 2) - chunked).abs().max() > 0.1 * chunked.abs().max()


def test_a_kimi_delta_matrix_with_a_decay_per_key_dim_is_the_kernels_output():
    """Kimi Delta Attention decays each key dim on its own: the same matrix, Gamma per dim, equals transformers'
    chunked and recurrent KDA; with the decays averaged over the dims (a decay per head) it does not."""
    config_of("kimi_linear")  # skipped where this transformers has no Kimi Linear
    from transformers.models.kimi_linear import modeling_kimi_linear as kimi

    torch.manual_seed(0)
    T, H, d_k, d_v = 150, 3, 8, 5
    q, k, v = torch.randn(1, T, H, d_k), torch.randn(1, T, H, d_k), torch.randn(1, T, H, d_v)
    g, beta = -F.softplus(torch.randn(1, T, H, d_k)) * 0.3, torch.rand(1, T, H)
    chunked, _ = kimi.chunk_kimi_delta_attention(q, k, v, g, beta, initial_state=None, output_final_state=False,
                                                 use_qk_l2norm_in_kernel=True)
    recurrent, _ = kimi.recurrent_kimi_delta_attention(q, k, v, g, beta, initial_state=None, output_final_state=False,
                                                       use_qk_l2norm_in_kernel=True)
    qh, kh = kimi.l2norm(q.transpose(1, 2)) * d_k**-0.5, kimi.l2norm(k.transpose(1, 2))
    M = gated_delta_matrix(qh, kh, g.transpose(1, 2), beta.transpose(1, 2))  # (1, H, T, T)
    mixed = (M @ v.transpose(1, 2)).transpose(1, 2)
    for reference in (chunked, recurrent):
        assert (mixed - reference).abs().max() <= 1e-5 * reference.abs().max()
    per_head = gated_delta_matrix(qh, kh, g.transpose(1, 2).mean(-1), beta.transpose(1, 2))
    assert ((per_head @ v.transpose(1, 2)).transpose(1, 2) - chunked).abs().max() > 0.01 * chunked.abs().max()


@pytest.mark.parametrize("steps", [-5.0, 0.0, 40.0])
def test_an_ssd_matrix_times_x_is_mamba2s_chunked_scan(steps):
    """Mamba-2: the SSD matrix equals transformers' chunked scan, with slow decays (steps near 0.007: one float32
    tile for all keys), faster ones (steps near 0.7: tiles of keys in float64, mha_viz.mixers.TILE) and where a tile
    decays past float64's range (steps near 40: those tiles come from the differences); without D or without the
    decay it does not."""
    torch.manual_seed(0)
    T, H, G, n, p = 150, 4, 2, 6, 5  # chunks of 16: the matrix knows nothing of chunks
    x, dt = torch.randn(1, T, H, p), torch.randn(1, T, H) + steps
    dt_bias, A, D = torch.randn(H), -torch.rand(H) * 2 - 0.1, torch.randn(H)
    B, C = torch.randn(1, T, G, n), torch.randn(1, T, G, n)
    reference = mamba2_chunk_scan(x, dt, A, B, C, chunk_size=16, D=D, dt_bias=dt_bias, dt_softplus=True)
    step = F.softplus(dt + dt_bias).transpose(1, 2)  # (1, H, T)
    Ch, Bh = (y.transpose(1, 2) for y in (C, B))  # (1, G, T, n): head h reads group h // (H / G)
    with mock.patch.object(mixers, "_exact_tile", side_effect=mixers._exact_tile) as exact:
        M = ssd_matrix(Ch, Bh, step, A, D)  # (1, H, T, T)
    assert exact.called == (steps > 1)  # the tiles past float64's range, and only those
    mixed = (M @ x.transpose(1, 2)).transpose(1, 2)
    assert (mixed - reference).abs().max() <= 1e-5 * reference.abs().max()
    assert torch.equal(M.triu(1), torch.zeros_like(M))
    if steps > 1:
        return  # decays this fast leave each token itself alone: the negative controls below would not differ
    for wrong in (ssd_matrix(Ch, Bh, step, A, None), ssd_matrix(Ch, Bh, step, torch.zeros_like(A), D)):
        assert ((wrong @ x.transpose(1, 2)).transpose(1, 2) - reference).abs().max() > 0.1 * reference.abs().max()


@pytest.mark.parametrize("steps", [-5.0, 0.0, 40.0])
def test_a_selective_scan_matrix_per_channel_is_mambas_scan(steps):
    """Mamba-1: one matrix per channel, its decay different for each state dim, equals transformers' selective scan,
    with slow decays (one float32 tile), faster ones (tiles of keys in float64, mha_viz.mixers.TILE) and where a tile
    decays past float64's range (steps near 40: those tiles come from the differences); with one decay per channel
    (the state dims' mean) or without D it does not."""
    torch.manual_seed(0)
    T, channels, N = 150, 6, 5
    x, B, C = torch.randn(channels, T), torch.randn(T, N), torch.randn(T, N)
    dt = torch.randn(channels, T) + steps  # steps 40: softplus(dt + bias) near 40, decays of e^-4 to e^-84 a token
    A, D, dt_bias = -torch.rand(channels, N) * 2 - 0.1, torch.randn(channels), torch.randn(channels)
    reference = mamba_selective_scan(x[None], dt[None], A, B.T[None], C.T[None], D=D, delta_bias=dt_bias,
                                     delta_softplus=True)[0]  # (channels, T)
    step = F.softplus(dt + dt_bias[:, None])  # (channels, T)
    with mock.patch.object(mixers, "_exact_tile", side_effect=mixers._exact_tile) as exact:
        M = SelectiveScan(C, B, step, A, D).matrix()  # (channels, T, T)
    assert exact.called == (steps > 1)  # the tiles past float64's range, and only those
    assert (torch.einsum("cts,cs->ct", M, x) - reference).abs().max() <= 1e-5 * reference.abs().max()
    assert torch.equal(M.triu(1), torch.zeros_like(M))
    rows = SelectiveScan(C, B, step, A, D).block(slice(70, 140), slice(3, 90), heads=[4, 1])  # any block, exactly
    assert torch.allclose(rows, M[[4, 1], 70:140, 3:90], atol=1e-5 * float(M.abs().max()))
    if steps:
        return  # decays this fast leave each token itself alone, this slow hardly differ by state dim: the
        # negative controls below would not differ
    for wrong in (SelectiveScan(C, B, step, A.mean(-1, keepdim=True).expand(-1, N), D), SelectiveScan(C, B, step, A)):
        assert (torch.einsum("cts,cs->ct", wrong.matrix(), x) - reference).abs().max() > 0.05 * reference.abs().max()


def test_a_short_convolution_matrix_per_channel_is_the_gated_convolution():
    """LFM2: C * conv(B * x) per channel is a band of the kernel's taps; with the taps in the wrong order it is not."""
    torch.manual_seed(0)
    T, channels, K = 20, 5, 3
    x, B, C, w = torch.randn(channels, T), torch.randn(channels, T), torch.randn(channels, T), torch.randn(channels, K)
    reference = C * F.conv1d((B * x)[None], w[:, None], padding=K - 1, groups=channels)[0, :, :T]
    M = ShortConv(C, B, w).matrix()
    assert (torch.einsum("cts,cs->ct", M, x) - reference).abs().max() <= 1e-5 * reference.abs().max()
    assert torch.equal(M.triu(1), torch.zeros_like(M)) and torch.equal(M.tril(-K), torch.zeros_like(M))  # a band
    assert torch.allclose(ShortConv(C, B, w).block(slice(4, 9), slice(2, 8), heads=[3]), M[[3], 4:9, 2:8])
    wrong = ShortConv(C, B, w.flip(-1)).matrix()
    assert (torch.einsum("cts,cs->ct", wrong, x) - reference).abs().max() > 0.1 * reference.abs().max()


def test_the_decay_matrix_is_a_product_of_decays_and_survives_long_sequences():
    log_decay = torch.full((2, 4000), -0.5)
    M = decay_matrix(log_decay)
    assert torch.isfinite(M).all() and M[0, 3999, 3998] == pytest.approx(np.exp(-0.5), rel=1e-5)
    assert M[0, 2, 0] == pytest.approx(np.exp(-1.0), rel=1e-5) and M[0, 0, 1] == 0


def mixer_trace(M: np.ndarray, decay: np.ndarray) -> AttentionTrace:
    T = M.shape[-1]
    tokens = tuple(f"t{i}" for i in range(T))
    return AttentionTrace(tokens, tokens, M.astype(np.float32), kind="ssm", causal=True,
                          head_arrays={"decay": decay.astype(np.float32)})


def test_mixer_statistics_measure_reach_forgetting_and_sign():
    T = 6
    ages = np.arange(T)[:, None] - np.arange(T)[None, :]  # t - s
    halving = np.where(ages >= 0, 0.5 ** np.maximum(ages, 0), 0.0)  # a state that halves every token
    M = np.stack([np.eye(T), halving, -halving])  # (3, T, T): itself only; halving; the same, subtracted
    stats = mixer_stats(mixer_trace(M, np.stack([np.full(T, 0.9), np.full(T, 0.5), np.full(T, 0.5)])))
    assert stats.reach[0] == 0 and stats.diagonal[0] == 1 and stats.row_sum[0] == 1 and stats.negative[0] == 0
    assert stats.half_life[1] == pytest.approx(1.0) and stats.half_life[0] == pytest.approx(np.log(0.5) / np.log(0.9))
    assert stats.reach[1] > 0 and stats.reach[1] == stats.reach[2]
    assert stats.row_sum[2] == pytest.approx(-stats.row_sum[1]) and stats.negative[2] == 1 and stats.negative[1] == 0
    assert stats.diagonal[1] == pytest.approx(T / halving.sum())
    with pytest.raises(ValueError, match="softmax attention"):
        mixer_stats(replace(mixer_trace(M, M[:, 0]), kind="softmax"))
    band = replace(mixer_trace(np.tril(M, 0) - np.tril(M, -3), M[:, 0]), kind="conv", head_arrays={})  # no decays
    conv = mixer_stats(band)
    assert np.isnan(conv.half_life).all() and np.isnan(conv.decay).all() and (conv.reach <= 2).all()


# ------------------------------------------------------------------------------ tiny hybrid models


def own_mixer_outputs(m: PretrainedModel, text: str) -> tuple[dict[int, torch.Tensor], dict[int, tuple]]:
    """The unmodified model's own numbers, hooked: each mixer's kernel output (its norm's first input; where no norm
    follows the kernel, as in Falcon-H1 without mamba_rms_norm, what its module's mamba2_chunk_scan returned; Mamba-1
    and LFM2 gate their kernel's output straight into out_proj, whose input is then the kernel's own) and each
    layer's out_proj (input, output), from one forward pass."""
    kernel, projection, scans = {}, {}, []

    def keep(store: dict, layer: int, value: object) -> None:
        store.setdefault(layer, value)

    handles, unnormed = [], []
    for layer in range(len(m.adapter.blocks)):
        module, site = m.adapter.mixer(layer), m.adapter.site("decoder", layer)
        if module is not None and site.core is not None:  # the gated norm (Site.core): its input is the kernel's
            handles.append(site.core.register_forward_pre_hook(
                lambda mod, args, layer=layer: keep(kernel, layer, args[0].detach())))
        elif module is not None and hasattr(sys.modules[type(module).__module__], "mamba2_chunk_scan"):
            unnormed.append((layer, sys.modules[type(module).__module__]))  # Mamba-1's and LFM2's: the concat is
        handles.append(site.out.register_forward_hook(
            lambda mod, args, output, layer=layer: keep(projection, layer, (args[0][0], output[0]))))
    with contextlib.ExitStack() as patches:
        for kernel_module in {id(k): k for _, k in unnormed}.values():
            scan = kernel_module.mamba2_chunk_scan
            patches.enter_context(mock.patch.object(kernel_module, "mamba2_chunk_scan", lambda *a, scan=scan, **k: (
                scans.append(out := scan(*a, **k)) or out)))
        try:
            with torch.no_grad():
                m.model(input_ids=torch.tensor([list(m.encode(text).ids)]), use_cache=False)
        finally:
            for h in handles:
                h.remove()
    kernel |= {layer: scan[0].flatten(-2) for (layer, _), scan in zip(unnormed, scans, strict=True)}  # (T, H*d)
    return kernel, projection


@pytest.mark.parametrize("name", HYBRID)
def test_every_layer_is_traced_and_equals_the_unmodified_modules(models, name):
    m = models[name]
    assert type(m.adapter) is ADAPTERS[m.architecture] and m.unavailable is None
    kernel, projection = own_mixer_outputs(m, TEXT)
    traces = m.traces(TEXT)
    kinds = [t.kind for t in traces]
    hybrid = ["linear", "linear", "linear", "softmax"]
    expected = {"qwen3_next": hybrid, "qwen3_5_text": hybrid, "bamba": ["ssm", "softmax", "ssm"],
                "bamba (more mixer heads)": ["ssm", "softmax", "ssm"], "minimax": ["linear", "softmax", "linear"],
                "kimi_linear": ["linear", "softmax", "linear"],
                "granitemoehybrid": ["ssm", "softmax", "ssm"], "mamba2": ["ssm", "ssm"],
                "olmo_hybrid": ["linear", "softmax", "linear", "softmax"],
                "olmo_hybrid (no positions)": ["linear", "softmax"], "nemotron_h": ["ssm", "softmax", "ssm"],
                "nemotron_h (mixers only)": ["ssm", "softmax", "ssm"], "falcon_h1": ["softmax", "ssm"] * 2,
                "falcon_h1 (gated norm)": ["softmax", "ssm"] * 2, "mamba": ["ssm", "ssm"],
                "falcon_mamba": ["ssm", "ssm"], "jamba": ["ssm", "softmax", "ssm"],
                "lfm2": ["conv", "softmax", "conv"], "lfm2 (conv bias)": ["conv", "softmax"],
                "lfm2_moe": ["conv", "softmax", "conv"], "lfm3": ["conv", "softmax", "softmax"]}[name]
    assert kinds == expected
    for layer, t in enumerate(traces):
        T = t.weights.shape[1]
        assert np.abs(t.concat - projection[layer][0].numpy()).max() <= 1e-6
        assert np.abs(t.output - projection[layer][1].numpy()).max() <= 1e-6
        assert np.abs(t.concat @ t.W_O.T + (0 if t.b_O is None else t.b_O) - t.output).max() <= 1e-5
        if t.kind == "softmax":
            continue
        if layer in kernel:  # where a norm follows the kernel (else the concat above is the kernel's gated output)
            own = kernel[layer].reshape(T, t.num_heads, -1).transpose(1, 0).numpy()  # (H, T, d_v)
            assert np.abs(t.weights @ t.values - own).max() <= 1e-4 * np.abs(own).max()
        assert np.abs(t.head_outputs.transpose(1, 0, 2).reshape(T, -1) - t.concat).max() <= 1e-5
        assert np.all(np.triu(t.weights, 1) == 0) and (t.weights < 0).any()  # causal, signed
        assert t.signed and t.queries is None and "no softmax scores" in t.meta["unavailable"]
        assert t.meta["matrix"] == KINDS[t.kind]
        assert all(a.shape == (t.num_heads, T) for a in t.head_arrays.values())
        if t.kind == "conv":  # a band as wide as the kernel, nothing before it
            width = m.adapter.mixer(layer).conv_kernel_size
            assert np.all(np.tril(t.weights, -width) == 0) and np.all(np.diagonal(t.weights, -(width - 1), 1, 2))
            continue
        assert np.all((t.head_arrays["decay"] > 0) & (t.head_arrays["decay"] < 1))
        reach = np.abs(t.weights[:, -1, : T // 2]).sum() / np.abs(t.weights[:, -1]).sum()
        assert reach > 0.01  # the last token still reads the first half: slow decays, a matrix worth drawing
        with pytest.raises(ValueError, match="not available: a .* has no softmax scores"):
            t.require("queries")


@pytest.mark.parametrize("name", HYBRID)
def test_tracing_leaves_the_logits_alone_and_attentions_hold_every_layer(models, name):
    m = models[name]
    ids = torch.tensor([list(m.encode(TEXT).ids)])
    with torch.no_grad():
        before = m.model(input_ids=ids, use_cache=False).logits
        m.traces(TEXT)
        after = m.model(input_ids=ids, use_cache=False).logits
    assert torch.equal(before, after)
    maps = m.attentions(TEXT)
    traces = m.traces(TEXT)
    assert maps.shape == (len(traces), m.num_heads["decoder"], ids.shape[1], ids.shape[1])
    assert m.layer_heads["decoder"] == tuple(t.num_heads for t in traces)
    for layer, t in enumerate(traces):
        assert np.abs(maps[layer, : t.num_heads] - t.weights).max() <= 1e-6
        assert np.isnan(maps[layer, t.num_heads :]).all()  # heads the layer does not have (more mixer heads)


@pytest.mark.parametrize("name", HYBRID)
def test_knocking_out_a_mixer_head_zeroes_its_block(models, name):
    m = models[name]
    layer = 0  # a mixer layer in every family
    mask = np.ones(m.layer_heads["decoder"][layer], dtype=np.float32)
    mask[1] = 0.0
    t = m.trace(TEXT, layer, head_mask=mask)
    assert np.all(t.head_outputs[1] == 0) and np.abs(t.head_outputs[0]).max() > 0
    full = m.final_hidden(TEXT)
    assert np.abs(m.final_hidden(TEXT, head_masks={layer: mask}) - full).max() > 1e-4


def test_qwen3_next_softmax_heads_are_gated_per_dim_and_read_their_own_projections(models):
    m = models["qwen3_next"]
    t = m.trace(TEXT, 3)
    assert t.kind == "softmax" and not t.missing and t.meta["head_norm"].startswith("sigmoid")
    np.testing.assert_allclose(t.weights.sum(-1), 1.0, atol=1e-5)
    a = m.adapter.base.layers[3].self_attn
    x = torch.randn(5, 32)
    q = a.q_proj(x).view(5, 4, 16)[..., :8].transpose(0, 1)  # (H, 5, d): the query half of each head's columns
    W_Q = torch.as_tensor(m.adapter.projection_weights(m.adapter.site("decoder", 3))["W_Q"])
    assert torch.allclose(x @ W_Q, q, atol=1e-5)


# ------------------------------------------------------------------------------ negative controls


def _qwen_without_decay(self, module, x):
    """Qwen3-Next's mixing with the decay dropped: the delta rule alone (log decay 0)."""
    saved = module.A_log.data.clone()
    module.A_log.data.fill_(-30.0)  # exp(A_log) = 1e-13: no decay
    try:
        return ADAPTERS["qwen3_next"].mixing(self, module, x)
    finally:
        module.A_log.data.copy_(saved)


def _kimi_decay_per_head(self, module, x):
    """Kimi Linear's mixing with one decay per head (its key dims' mean) instead of one per key dim."""
    gate = module.forget_gate
    original = type(gate).forward
    gate.forward = lambda h: original(gate, h).mean(-1, keepdim=True).expand(*h.shape[:2], module.num_heads,
                                                                               module.head_dim)
    try:
        return ADAPTERS["kimi_linear"].mixing(self, module, x)
    finally:
        del gate.forward


def _minimax_without_decay(self, module, x):
    """MiniMax's lightning attention with its decay rates set to 0: plain causal linear attention."""
    saved = module.slope_rate.clone()
    module.slope_rate.zero_()
    try:
        return ADAPTERS["minimax"].mixing(self, module, x)
    finally:
        module.slope_rate.copy_(saved)


def _mamba_without_D(self, module, x):
    mix = ADAPTERS["mamba2"].mixing(self, module, x)
    return replace(mix, factors=replace(mix.factors, D=None))


def _mamba1_one_decay_per_channel(self, module, x):
    """Mamba-1 with each channel's decays averaged over its state dims (one decay per channel, as Mamba-2's)."""
    mix = ADAPTERS["mamba"].mixing(self, module, x)
    A = mix.factors.A
    return replace(mix, factors=replace(mix.factors, A=A.mean(-1, keepdim=True).expand_as(A)))


def _falcon_mamba_without_its_norms(self, module, x):
    """Falcon Mamba (and Jamba) read as Mamba: dt, B and C without their RMSNorms."""
    norms = {name: getattr(module, name) for name in ("dt_layernorm", "b_layernorm", "c_layernorm")}
    for name in norms:
        delattr(module, name)
    try:
        return ADAPTERS["mamba"].mixing(self, module, x)
    finally:
        for name, norm in norms.items():
            setattr(module, name, norm)


def _some_rotary(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary cos, sin (T, d) for queries q (..., T, d): positions where the layer has none."""
    T, d = q.shape[-2], q.shape[-1]
    angles = torch.arange(T)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)  # (T, d/2)
    return torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()


def _jamba_with_rotary(self, part, site, rec, q, k):
    """Jamba's attention (which has no positions) read as if it rotated its queries and keys."""
    return replace(ADAPTERS["jamba"].variations(self, part, site, rec, q, k), rotary=_some_rotary(q))


def _lfm2_taps_reversed(self, module, x):
    mix = ADAPTERS["lfm2"].mixing(self, module, x)
    return replace(mix, factors=replace(mix.factors, w=mix.factors.w.flip(-1)))


NEGATIVE = {
    "qwen3_next": [("Gated DeltaNet without its decay", 0, {"mixing": _qwen_without_decay}),
                   ("gated attention without its output gate", 3, {"variations": lambda self, *a: replace(
                       ADAPTERS["qwen3_next"].variations(self, *a), head_norm=None)})],
    "kimi_linear": [("Kimi Delta Attention with one decay per head, not per key dim", 0,
                     {"mixing": _kimi_decay_per_head})],
    "minimax": [("lightning attention without its decay", 0, {"mixing": _minimax_without_decay})],
    "mamba2": [("Mamba-2 without D", 0, {"mixing": _mamba_without_D})],
    "mamba": [("Mamba with one decay per channel, not per state dim", 0, {"mixing": _mamba1_one_decay_per_channel})],
    "falcon_mamba": [("Falcon Mamba without its dt, B and C norms", 0, {"mixing": _falcon_mamba_without_its_norms})],
    "jamba": [("Jamba without its dt, B and C norms", 0, {"mixing": _falcon_mamba_without_its_norms}),
              ("Jamba's attention given rotary positions", 1, {"variations": _jamba_with_rotary})],
    "lfm3": [("LFM3's attention without its head gate", 1, {"variations": lambda self, *a: replace(
        ADAPTERS["lfm3"].variations(self, *a), gates=None)}),
             ("LFM3's attention without its QK-norm", 2, {"variations": lambda self, *a: replace(
                 ADAPTERS["lfm3"].variations(self, *a), q_norm=None, k_norm=None)})],
    "lfm2": [("LFM2's convolution taps in the wrong order", 0, {"mixing": _lfm2_taps_reversed}),
             ("LFM2's attention without its QK-norm", 1, {"variations": lambda self, *a: replace(
                 ADAPTERS["lfm2"].variations(self, *a), q_norm=None, k_norm=None)})],
    "falcon_h1": [("Falcon-H1's keys without their multiplier", 0, {"scale": lambda self, site: site.attention.scaling}),
                  ("Falcon-H1's Mamba-2 projections without their muP multipliers", 1,
                   {"projected": lambda self, m, x: m.in_proj(x * m.ssm_in_multiplier)})],
    "olmo_hybrid": [("OLMo hybrid's write strengths not doubled (allow_neg_eigval)", 0,
                     {"beta": lambda self, module, b: b.float().sigmoid()}),
                    ("OLMo hybrid's attention given no positions", 1, {"variations": lambda self, *a: replace(
                        ADAPTERS["olmo_hybrid"].variations(self, *a), rotary=None)})],
}
CASES = [(name, *case) for name, cases in NEGATIVE.items() for case in cases]


@pytest.mark.parametrize(("name", "what", "layer", "overrides"), CASES, ids=[c[1] for c in CASES])
def test_a_wrong_mixer_adapter_is_caught(models, name, what, layer, overrides):
    m = models[name]
    m.adapter = type(f"Wrong{name}", (ADAPTERS[m.architecture],), overrides)(m.model)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TraceCheckWarning)
            t = m.trace(TEXT, layer, strict=False)
        assert failures(t) and caught and f"layer {layer}" in str(caught[0].message), what
    finally:
        m.adapter = adapter_for(m.model)


@pytest.mark.parametrize("name", HYBRID)
def test_generation_steps_through_mixers_with_exact_rows(models, name):
    """Step by step, the whole sequence again (a mixer's row needs it): the greedy tokens are transformers' own, and
    each step's row of every layer is the last row of that layer's trace of the sequence so far."""
    m = models[name]
    g = m.generate("the cat sat", 3)
    ids = torch.tensor([list(g.prompt_ids)])
    with torch.no_grad():
        own = m.model.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)[0, ids.shape[1]:]
    assert [s.token_id for s in g.steps] == own.tolist()
    for t, step in enumerate(g.steps):
        maps = m.attentions_for_ids([*g.prompt_ids, *(s.token_id for s in g.steps[:t])])
        np.testing.assert_allclose(step.attentions, maps[:, :, -1], rtol=0, atol=1e-5)  # NaN where maps have NaN
    with pytest.raises(ValueError, match=r"not softmax attention \((linear|ssm|conv)\): its mixing matrix is traced"):
        cache_step(m)


def test_mixing_matrices_past_the_memory_limit_are_refused_before_they_are_made(models, monkeypatch):
    """Jamba's Mamba layers hold one [T, T] matrix per channel (32 each here; 8192 in the real Jamba): over
    MAX_MIXER_BYTES the request is refused before any matrix is made (a trace: before the model runs), with what
    fits; one layer alone fits."""
    from mha_viz.pretrained import mixing

    m = models["jamba"]
    T = len(m.encode(TEXT).ids)
    per_layer = 4 * 32 * T * T  # float32 bytes of one Mamba layer's 32 channel matrices
    monkeypatch.setattr(mixing, "MAX_MIXER_BYTES", int(1.5 * per_layer))
    made = mock.patch.object(SelectiveScan, "block", side_effect=AssertionError("a matrix was made"))
    ran = mock.patch.object(m.adapter, "forward", side_effect=AssertionError("the model ran"))
    refused = pytest.raises(ValueError, match=r"2 mixer layer\(s\) of jamba hold 64 mixing matrices of \[23, 23\]")
    with made, ran, refused:
        m.traces(TEXT)  # refused before the forward pass
    with made, pytest.raises(ValueError, match="Use at most 19 tokens"):
        m.attentions(TEXT)
    assert m.trace(TEXT, 0).weights.shape == (32, T, T)  # one layer at a time fits


def test_lfm3_generation_places_its_sliding_window_between_convolutions(models):
    """LFM3's layers are a convolution, a sliding-window attention and a full one: generation labels the window of
    the second alone, and its rows (the model's own, step by step) see no key before it."""
    m = models["lfm3"]
    g = m.generate("the cat sat on the mat and the dog", 4)
    assert g.windows == (None, 4, None) and g.windowed_layers == (1,)
    for k, step in enumerate(g.steps):
        keys = len(g.prompt_ids) + k
        row = np.nan_to_num(step.attentions[1])  # (H, keys): the sliding layer's row
        assert not row[:, : keys - 4].any() and (row[:, keys - 4] > 0).any()


def cache_step(m: PretrainedModel) -> None:
    """The model's own cached decoding step read as attentions: refused, the cache holds no sequence to trace."""
    import inspect

    ids = torch.tensor([list(m.encode("the cat").ids)])
    accepted = inspect.signature(m.model.forward).parameters
    argument = next(a for a in ("cache", "cache_params", "past_key_values") if a in accepted)
    with torch.no_grad():
        out = m.model(input_ids=ids, use_cache=True)
        cache = next(out[a] for a in ("cache", "cache_params", "past_key_values") if out.get(a) is not None)
        step = m.model(input_ids=ids[:, -1:], **{argument: cache}, use_cache=True, output_attentions=True)
    m.adapter.model_attentions(step, "decoder")


def test_the_readme_lists_the_hybrid_families():
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"Hybrid and mixer-only architectures \(tested\): (.*?)\.\n", readme, re.DOTALL).group(1)
    assert set(re.split(r",\s*", listed.replace("\n", " "))) == {name for name, _ in HYBRID.values()}


@pytest.mark.parametrize("name", HYBRID)
def test_logit_attribution_splits_the_logit_through_mixer_heads(name):
    """Each mixer head's term is its traced contribution (its concat block through out_proj, times Granite 4's
    residual multiplier) through the frozen final norm (times its logit scale), and the terms add up to the model's
    own logit (Falcon-H1: each half of a block times its own multiplier, the MLP once per block); where the model's
    blocks do not simply add (MiniMax's alpha and beta), it says why."""
    from tests.unit.test_attribution_families import final_norm_input, own_logits

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    model = random_model(AutoModelForCausalLM, config_of(name))
    slow_decays(model)
    m = PretrainedModel(model, tokenizer)
    if m.adapter.attribution_unavailable:
        with pytest.raises(ValueError, match="logit attribution is unavailable"):
            m.logit_attribution(TEXT)
        return
    ids = list(m.encode(TEXT).ids)
    position = 5
    a = m.logit_attribution(TEXT, position=position)
    assert a.logit == pytest.approx(float(own_logits(m, ids)[position, a.token_id]), abs=1e-5)
    assert abs(a.total - a.logit) <= 1e-3 and a.residual_error <= 1e-4
    norm, x = final_norm_input(m, ids)
    x = x[position].double()
    s = (x.pow(2).mean() + getattr(norm, "variance_epsilon", getattr(norm, "eps", None))).sqrt()  # RMSNorms, all
    gamma = norm.weight.detach().double() + m.adapter.norm_weight_offset
    u = m.model.get_output_embeddings().weight[a.token_id].detach().double()
    cfg = m.model.config  # Granite 4 scales each block's output and the logits (the tiny one here does too)
    r, logit_scale = getattr(cfg, "residual_multiplier", 1.0), 1 / getattr(cfg, "logits_scaling", 1.0)
    if name.startswith("falcon_h1"):  # each half of a block by its own multiplier, the logits by lm_head_multiplier
        logit_scale = cfg.lm_head_multiplier
    for layer, trace in enumerate(m.traces(TEXT)):
        if name.startswith("falcon_h1"):
            r = cfg.ssm_out_multiplier if layer % 2 else cfg.attention_out_multiplier
        contributions = torch.as_tensor(trace.head_contributions()[:, position]).double()  # (H_l, d)
        expected = (r * contributions * gamma / s) @ u * logit_scale  # (H_l,)
        np.testing.assert_allclose(a.heads[layer, : trace.num_heads], expected.numpy(), atol=1e-5,
                                   err_msg=f"{name} layer {layer}")
        assert np.isnan(a.heads[layer, trace.num_heads :]).all()
