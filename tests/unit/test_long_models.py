"""Long traces of real model families equal the models' own eager weights: tiny random models (4 heads, 2 layers)
with 2048 positions, traced on 517 token ids (overview blocks of 5 x 5 tokens, the last row and column of blocks
partial). For every layer: the exact weights equal output_attentions, overview cells the max and mean of their
block's exact weights, rows and blocks equal, and the per-head statistics equal those of the exact weights. Rotary
(full, partial, local/global), sliding windows, soft-capping, sinks, learned positions, multi-head latent attention,
bidirectional encoders, differential heads, Llama 4's chunks and tempered NoPE layers and ALiBi (BLOOM, through the
model's own eager pass) are all here;
then the refusals (encoder-decoders, positions, ids, bytes) and cancelling."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.pretrained.llama import differential_lambda
from mha_viz.pretrained.long import LongTraceCancelled, ModelLongTrace
from tests.tiny_causal import random_model

V = 30522
POSITIONS = 2048
T = 517  # not a multiple of the overview's blocks (5 tokens a side): the last row and column of blocks are partial
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "max_position_embeddings": POSITIONS}  # fmt: skip
TOKENS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
MLA = {"q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5,
       "num_key_value_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
       "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}  # fmt: skip
WINDOWS = ["sliding_attention", "full_attention"]
# family -> (auto class, config): windows of 29 ... 37 tokens, far shorter than T, so a window off by one shows
FAMILIES: dict[str, tuple[type, Callable[[], tf.PretrainedConfig]]] = {
    "llama": (AutoModelForCausalLM, lambda: tf.LlamaConfig(vocab_size=V, num_key_value_heads=2, **SMALL, **TOKENS)),
    "mistral": (AutoModelForCausalLM, lambda: tf.MistralConfig(
        vocab_size=V, num_key_value_heads=2, sliding_window=37, **SMALL, **TOKENS)),
    "qwen2": (AutoModelForCausalLM, lambda: tf.Qwen2Config(vocab_size=V, num_key_value_heads=2, **SMALL, **TOKENS)),
    "qwen3": (AutoModelForCausalLM, lambda: tf.Qwen3Config(
        vocab_size=V, num_key_value_heads=2, head_dim=8, **SMALL, **TOKENS)),
    "gemma2": (AutoModelForCausalLM, lambda: tf.Gemma2Config(
        vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=33, attn_logit_softcapping=2.0,
        query_pre_attn_scalar=8, **SMALL, **TOKENS)),
    "gemma3": (AutoModelForCausalLM, lambda: tf.Gemma3TextConfig(
        vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=33, query_pre_attn_scalar=8,
        layer_types=WINDOWS, **SMALL, **TOKENS)),
    "gpt_oss": (AutoModelForCausalLM, lambda: tf.GptOssConfig(
        vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=29, num_local_experts=4,
        num_experts_per_tok=2, layer_types=WINDOWS, **SMALL, **TOKENS)),
    "phi": (AutoModelForCausalLM, lambda: tf.PhiConfig(
        vocab_size=V, partial_rotary_factor=0.5, qk_layernorm=True, **SMALL, **TOKENS)),
    "gpt2": (AutoModelForCausalLM, lambda: tf.GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=POSITIONS, bos_token_id=101, eos_token_id=102)),
    "gpt_neox": (AutoModelForCausalLM, lambda: tf.GPTNeoXConfig(vocab_size=V, rotary_pct=0.5, **SMALL, **TOKENS)),
    "deepseek_v3": (AutoModelForCausalLM, lambda: tf.DeepseekV3Config(vocab_size=V, **MLA, **SMALL, **TOKENS)),
    "deepseek_v32": (AutoModelForCausalLM, lambda: tf.DeepseekV32Config(  # each query keeps its indexer's top 40 keys
        vocab_size=V, **MLA, **SMALL, **TOKENS, index_topk=40, index_head_dim=8, index_n_heads=2)),
    "bert": (AutoModel, lambda: tf.BertConfig(vocab_size=V, **SMALL)),
    "modernbert": (AutoModel, lambda: tf.ModernBertConfig(
        vocab_size=V, global_attn_every_n_layers=2, local_attention=64, cls_token_id=101, sep_token_id=102,
        **SMALL, **TOKENS)),
    "diffllama": (AutoModelForCausalLM, lambda: tf.DiffLlamaConfig(
        vocab_size=V, num_key_value_heads=2, lambda_std_dev=0.3, **SMALL, **TOKENS)),
    "llama4_text": (AutoModelForCausalLM, lambda: tf.Llama4TextConfig(  # chunks of 33 on layer 0; layer 1 NoPE,
        vocab_size=V, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=2,  # tempered
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
        attention_chunk_size=33, no_rope_layer_interval=2, use_qk_norm=True, attn_temperature_tuning=True,
        floor_scale=8, attn_scale=0.5, max_position_embeddings=POSITIONS, **TOKENS)),
    "smollm3": (AutoModelForCausalLM, lambda: tf.SmolLM3Config(  # recall-16k's layout: a rotary window, then NoPE
        vocab_size=V, num_key_value_heads=2, use_sliding_window=True, sliding_window=31, layer_types=WINDOWS,
        no_rope_layers=[1, 0], **SMALL, **TOKENS)),
    "gemma3n_text": (AutoModelForCausalLM, lambda: tf.Gemma3nTextConfig(  # layers 2, 3 read 0's and 1's keys
        vocab_size=V, vocab_size_per_layer_input=V, hidden_size_per_layer_input=8, num_key_value_heads=2, head_dim=8,
        sliding_window=33, layer_types=WINDOWS * 2, num_kv_shared_layers=2, laurel_rank=4, altup_num_inputs=2,
        activation_sparsity_pattern=[0.0] * 4, **{**SMALL, "num_hidden_layers": 4}, **TOKENS)),
    "bloom": (AutoModelForCausalLM, lambda: tf.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4, **TOKENS)),
    # their own attention code too (the eager route): a local window in GPT-Neo's own mask, Falcon's rotary
    "gpt_neo": (AutoModelForCausalLM, lambda: tf.GPTNeoConfig(
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
        window_size=37, max_position_embeddings=POSITIONS, intermediate_size=64, bos_token_id=101, eos_token_id=102)),
    "falcon": (AutoModelForCausalLM, lambda: tf.FalconConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=POSITIONS,
        **TOKENS)),
}  # fmt: skip
TOLERANCE = 1e-5

pytestmark = pytest.mark.usefixtures("one_thread")


@functools.cache
def model(family: str) -> PretrainedModel:
    auto_class, config = FAMILIES[family]
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    return PretrainedModel(random_model(auto_class, config()), tokenizer, name=f"tiny-{family}", max_tokens=POSITIONS)


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(1000, 20000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def own_maps(m: PretrainedModel, ids: list[int]) -> np.ndarray:
    """[layers, maps, T, T] the model's own output_attentions: one softmax map per query head (a differential
    layer's 2 maps per head too, unpaired)."""
    m.max_tokens = max(m.max_tokens, len(ids))  # eager weights of T x T fit at these lengths
    with m.lock:
        outputs = m.adapter.forward(ids)
    return np.stack([a[0].float().numpy() for a in m.adapter.model_attentions(outputs, m.parts[0])])


@functools.cache
def traced(family: str, n: int = T) -> tuple[ModelLongTrace, np.ndarray]:
    m = model(family)
    ids = random_ids(n)
    return m.long_trace(ids=ids), own_maps(m, ids)


def exact_overview(w: np.ndarray, bt: int, bs: int) -> tuple[np.ndarray, np.ndarray]:
    """Block max and mean [H, t, s] of exact weights w [H, T, S], partial last blocks over the pairs they hold."""
    H, Tq, S = w.shape
    t, s = -(-Tq // bt), -(-S // bs)
    top = np.full((H, t * bt, s * bs), -np.inf)
    total = np.zeros((H, t * bt, s * bs))
    count = np.zeros((t * bt, s * bs))
    top[:, :Tq, :S] = total[:, :Tq, :S] = w
    count[:Tq, :S] = 1
    blocks = (H, t, bt, s, bs)
    return top.reshape(blocks).max(axis=(2, 4)), total.reshape(blocks).sum(axis=(2, 4)) / count.reshape(
        t, bt, s, bs).sum(axis=(1, 3))


def exact_stats(w: np.ndarray) -> dict[str, np.ndarray]:
    """[H] per-head statistics of exact weights w [H, T, S] (float64), each averaged over the queries."""
    w = w.astype(np.float64)
    i, j = np.arange(w.shape[1])[:, None], np.arange(w.shape[2])[None, :]
    return {
        "distance": (w * np.abs(i - j)).sum(-1).mean(-1),
        "entropy": -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1).mean(-1),
        "first": w[:, :, 0].mean(-1),
        "sink": (1.0 - w.sum(-1)).mean(-1),
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_of_every_layer_equal_the_models_own(family):
    long, own = traced(family)
    assert sorted(long.layers) == list(range(len(own))) and long.num_tokens == T
    for layer, one in long.layers.items():
        w = one.weights(slice(None), slice(None))  # (H, T, T)
        assert w.shape == own[layer].shape
        np.testing.assert_allclose(w, own[layer], rtol=0, atol=TOLERANCE, err_msg=f"{family} layer {layer}")


@pytest.mark.parametrize("family", FAMILIES)
def test_overview_cells_are_the_max_and_mean_of_their_blocks(family):
    long, own = traced(family)
    for layer in long.layers:
        ov = long.overview(layer)
        assert T % ov.block_rows and T % ov.block_cols  # partial last blocks are checked too
        top, mean = exact_overview(own[layer], ov.block_rows, ov.block_cols)
        assert ov.max.shape == ov.mean.shape == top.shape
        np.testing.assert_allclose(ov.max, top, rtol=0, atol=TOLERANCE, err_msg=f"{family} layer {layer} max")
        np.testing.assert_allclose(ov.mean, mean, rtol=0, atol=TOLERANCE, err_msg=f"{family} layer {layer} mean")


@pytest.mark.parametrize("family", FAMILIES)
def test_rows_and_blocks_equal_the_models_own(family):
    long, own = traced(family)
    for layer in long.layers:
        H = own.shape[1]
        for head, query in ((0, 0), (1, 200), (H - 1, T - 1)):
            np.testing.assert_allclose(long.row(layer, head, query), own[layer, head, query], rtol=0, atol=TOLERANCE)
        block = long.block(layer, H - 1, q_start=450, k_start=400, size=100)  # cut at the input's end: 67 x 100
        np.testing.assert_allclose(block, own[layer, H - 1, 450:, 400:500], rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("family", FAMILIES)
def test_statistics_equal_those_of_the_exact_weights(family):
    long, own = traced(family)
    stats = long.stats()
    for index, layer in enumerate(stats.layers):
        exact = exact_stats(own[layer])
        for name, value in exact.items():
            got = getattr(stats, name)[index]
            np.testing.assert_allclose(got, value, rtol=1e-4, atol=1e-5, err_msg=f"{family} layer {layer} {name}")


def test_grouped_query_heads_read_their_kv_head():
    one = traced("llama")[0].layer(0)
    assert one.keys.shape[0] == one.values.shape[0] == 2 and one.num_heads == 4
    assert one.kv_heads == (0, 0, 1, 1)


@pytest.mark.parametrize(("family", "windows"), [("mistral", (37, 37)), ("gemma2", (33, None)),
                                                 ("gemma3", (33, None)), ("gpt_oss", (29, None)),
                                                 ("modernbert", (None, 33)), ("gpt_neo", (None, 37)),
                                                 ("llama", (None, None))])
def test_window_layers_hide_keys_beyond_the_window(family, windows):
    """Each layer's weights are 0 exactly beyond its window and not only there (the window matters at T)."""
    long, _ = traced(family)
    for layer, window in enumerate(windows):
        assert long.layer(layer).rules.window == window
        if window is None:
            continue
        w = long.layer(layer).weights(slice(None), slice(None))
        back = np.arange(T)[:, None] - np.arange(T)[None, :]  # i - j
        edge = back == window - 1 if long.layer(layer).rules.causal else np.abs(back) == window - 1
        assert (w[:, np.abs(back) >= window] == 0).all() and (w[:, edge] > 0).all()


def test_sinks_take_weight_from_every_row():
    """gpt-oss: the learned sink logit takes part of each row's softmax: rows sum to less than 1, as the model's."""
    long, own = traced("gpt_oss")
    sink = long.stats().sink
    assert (sink > 1e-3).all()
    np.testing.assert_allclose(sink, np.stack([exact_stats(w)["sink"] for w in own]), rtol=1e-4)


def test_differential_layers_keep_both_softmax_maps_of_each_head():
    """DiffLlama: a long trace keeps the layer's H softmax maps (heads i and i + H/2 pair into one differential
    head), each an ordinary softmax (so its overview, statistics and zooms mean what they mean for any head); the
    signed weights of differential head i are map_i - lambda map_(i + H/2), as the full trace and
    attentions_for_ids give them."""
    m = model("diffllama")
    long, _ = traced("diffllama")
    signed = m.attentions_for_ids(random_ids(T))  # [layers, H/2, T, T]
    for layer, one in long.layers.items():
        w = one.weights(slice(None), slice(None))  # (H, T, T)
        assert w.shape[0] == 2 * signed.shape[1] == 4
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)  # ordinary softmax maps
        lam = float(differential_lambda(m.adapter.site("decoder", layer).attention))
        np.testing.assert_allclose(w[:2] - lam * w[2:], signed[layer], rtol=0, atol=2 * TOLERANCE)


def test_bloom_runs_its_own_eager_pass_with_alibi_slopes():
    m = model("bloom")
    long, _ = traced("bloom")
    slopes = 2.0 ** (-8.0 * torch.arange(1, 5) / 4)  # ALiBi's slopes of 4 heads, 2^(-8 i / H), as BLOOM builds them
    for one in long.layers.values():
        assert one.meta["route"] == "the model's own eager pass"
        assert one.meta["check"]["head outputs vs concat"] < TOLERANCE
        torch.testing.assert_close(one.rules.alibi, slopes.float())
    assert m.model.config._attn_implementation == "eager"


def test_bloom_long_trace_whose_check_fails_warns_or_raises_with_strict(monkeypatch):
    """BLOOM's long trace rebuilds each layer's head outputs and compares them with the concat the model computed
    (meta "check"): a rebuild that departs from it (here run_layer's outputs shifted by 0.5) is said, as for any
    trace: TraceCheckWarning naming the layer and the difference, TraceCheckError with strict=True."""
    from mha_viz import checks
    from mha_viz.pretrained import long_hooked

    run_layer = long_hooked.run_layer

    def shifted(*args, **kwargs):
        out, record = run_layer(*args, **kwargs)
        return out + 0.5, record

    monkeypatch.setattr(long_hooked, "run_layer", shifted)
    m = model("bloom")
    with pytest.warns(checks.TraceCheckWarning, match=r"tiny-bloom, layer \d: .*head outputs vs concat: max \|diff"):
        long = m.long_trace(ids=random_ids(64))
    assert all(checks.failures(one) for one in long.layers.values())
    m.strict = True
    with pytest.raises(checks.TraceCheckError, match="head outputs vs concat"):
        m.long_trace(ids=random_ids(64))


def test_bloom_refuses_before_running_when_its_eager_pass_would_not_fit():
    """BLOOM has no position limit; its eager pass makes [4, T, T] float32 tensors (3 alive): 10,000 tokens need
    4.5 GiB, over the 1 GiB allowed. Refused with the numbers and the longest length that fits."""
    m = model("bloom")
    calls = []
    with pytest.raises(ValueError, match=r"computes attention in its own code.*4578 MiB at 10000 tokens.*1024 MiB "
                                         r"allowed: use at most 4729 tokens"):
        m.long_trace(ids=random_ids(10_000), progress=lambda done, total: calls.append(done))
    assert calls == []  # nothing ran


def test_own_code_terms_a_long_trace_cannot_reproduce_are_refused():
    """Falcon with alibi=True adds ALiBi twice (once in its attention mask): refused, naming the term."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    config = tf.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True,
                             multi_query=False, max_position_embeddings=POSITIONS, **TOKENS)
    m = PretrainedModel(random_model(AutoModelForCausalLM, config), tokenizer, name="tiny-falcon-alibi")
    with pytest.raises(ValueError, match="FalconAttention .layer 0. computes attention in its own code with the score "
                                         "bias 'ALiBi again .in the attention mask.': a long trace cannot reproduce"):
        m.long_trace(ids=random_ids(50))
    assert m.model.config._attn_implementation == "eager"


@pytest.mark.parametrize("family", ["llama", "bloom"])
def test_a_cancelled_pass_stops_and_leaves_the_model_usable(family):
    m = model(family)
    ids = random_ids(300)
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))
        raise LongTraceCancelled("stop")

    with pytest.raises(LongTraceCancelled):
        m.long_trace(ids=ids, progress=progress)
    assert calls == [(1, 2)]  # stopped after the first layer
    assert m.model.config._attn_implementation == "eager"
    assert m.lock.acquire(blocking=False)  # released
    m.lock.release()
    long = m.long_trace(ids=ids)  # usable again, hooks and kernel gone
    np.testing.assert_allclose(long.layer(1).weights(slice(None), slice(None)), own_maps(m, ids)[1], atol=TOLERANCE)


def test_refusals_name_the_problem():
    m = model("llama")
    with pytest.raises(ValueError, match=r"2 \.\.\. 2048 tokens .* got 2049"):
        m.long_trace(ids=random_ids(POSITIONS + 1))
    with pytest.raises(ValueError, match=r"2 \.\.\. 2048 tokens .* got 1"):
        m.long_trace(ids=[5])
    for bad in ([5, -1, 7], [5, V, 7], [5, True, 7], [5, 7.0, 8]):
        with pytest.raises(ValueError, match=rf"integers in 0 \.\.\. {V - 1}"):
            m.long_trace(ids=bad)
    with pytest.raises(ValueError, match="text or ids, not both"):
        m.long_trace("some text", ids=[5, 7])
    with pytest.raises(ValueError, match=r"keeps \d+ MiB, more than the 2 MiB allowed: at most (\d+) tokens") as err:
        m.long_trace(ids=random_ids(2000), max_bytes=2**21)
    fit = int(re.search(r"at most (\d+) tokens", str(err.value)).group(1))
    assert 0 < fit < 2000 and m.long_trace(ids=random_ids(fit), max_bytes=2**21).nbytes <= 2**21  # the number fits
    long = m.long_trace("word " * 5000)  # text is cut to the model's positions
    assert long.num_tokens == POSITIONS


def test_encoder_decoders_are_refused():
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    config = tf.BartConfig(vocab_size=V, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, pad_token_id=0,
                           bos_token_id=101, eos_token_id=102, decoder_start_token_id=102, forced_eos_token_id=102)
    m = PretrainedModel(random_model(AutoModel, config), tokenizer, name="tiny-bart")
    with pytest.raises(ValueError, match="encoder-decoder model; a long trace reads one self-attention stack"):
        m.long_trace(ids=[101, 2000, 102])


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "gpt_oss", "bloom"])
def test_weights_equal_the_models_own_at_2047_tokens(family):
    """BLOOM's scores carry ALiBi terms up to 0.25 x 2046 = 512 in float32 (its own and ours), so a few of its
    weights differ by ~1e-5: tolerance 3e-5 there."""
    long, own = traced(family, POSITIONS - 1)
    atol = 3e-5 if family == "bloom" else TOLERANCE
    for layer, one in long.layers.items():
        for rows in (slice(0, 1024), slice(1024, None)):
            np.testing.assert_allclose(one.weights(rows, slice(None)), own[layer][:, rows], rtol=0, atol=atol)
        top, mean = exact_overview(own[layer], one.block_rows, one.block_cols)
        np.testing.assert_allclose(long.overview(layer).max, top, rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(long.overview(layer).mean, mean, rtol=0, atol=TOLERANCE)


def test_deepseek_v32_keeps_its_indexers_keys_and_refuses_scores_that_would_not_fit(monkeypatch):
    """Each query of DeepSeek-V3.2 reads only the 40 keys its indexer ranked highest: the long trace applies the
    indexer's own choice (Rules.kept; the weights equal the model's above), and without it the weights differ. The
    indexer scores every key for every query in the model's own code, so lengths whose scores would not fit are
    refused before the pass."""
    from mha_viz.pretrained import long_pass

    long, own = traced("deepseek_v32")
    for layer, one in long.layers.items():
        assert one.rules.kept.shape == (T, 40) and (own[layer] > 0).sum(-1).max() == 40
        dense = dataclasses.replace(one, rules=dataclasses.replace(one.rules, kept=None))
        assert np.abs(dense.weights(slice(None), slice(None)) - own[layer]).max() > 1e-2
    monkeypatch.setattr(long_pass, "EAGER_MAX_BYTES", 2**20)  # 1 MiB: 2 indexer heads' scores fit 209 tokens
    with pytest.raises(ValueError, match=r"makes \[tokens, tokens\] scores in its own code .* use at most 209 tokens"):
        model("deepseek_v32").long_trace(ids=random_ids(300))
