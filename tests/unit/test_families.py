"""Every adapted architecture opened up: tiny random models of each family, built offline from configs and read
with the bundled MiniLM tokenizer (vocab 30522), traced in every layer and part on three sentences (English, Greek,
Chinese). Each trace must equal the model's own attention weights, its real output projection and its real
projection modules; a wrong adapter must be caught; vision and audio models are refused."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoModel, AutoTokenizer

from mha_viz import TraceCheckWarning
from mha_viz.analysis import score_terms, without_tokens
from mha_viz.attention import apply_rotary
from mha_viz.checks import failures
from mha_viz.figures.steps import score_parts_figure
from mha_viz.pretrained import ModelLoadError, PretrainedModel, bundled_model_dir, load_model
from mha_viz.pretrained import generic as generic_module
from mha_viz.pretrained.adapter import Adapter, HeadMasks, Recorder, register, rotary_of
from mha_viz.pretrained.architectures import ADAPTERS, adapter_for
from mha_viz.pretrained.deberta import C2P, P2C
from mha_viz.pretrained.fallback import FallbackAdapter
from mha_viz.pretrained.generic import GenericAdapter
from mha_viz.pretrained.norms import norm_affine
from tests.tiny_causal import random_model

V = 30522  # the MiniLM vocabulary
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "max_position_embeddings": 64}  # fmt: skip
ENC_DEC = {
    "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
    "pad_token_id": 0, "eos_token_id": 102, "forced_eos_token_id": 102,
}  # fmt: skip
TOKENS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
MLA = {  # multi-head latent attention: small latents, d_k = 6 + 4 != d_v = 5; layer 1 a mixture of 4 experts
    "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5,
    "num_key_value_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
}  # fmt: skip
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 1.0, "mscale_all_dim": 1.0}  # fmt: skip
# family -> (README name, config); variants of one model_type exercise its other layouts and options
FAMILIES: dict[str, tuple[str, Callable[[], tf.PretrainedConfig]]] = {
    "bert": ("BERT", lambda: tf.BertConfig(vocab_size=V, **SMALL)),
    "roberta": ("RoBERTa", lambda: tf.RobertaConfig(vocab_size=V, pad_token_id=1, **{**SMALL, "max_position_embeddings": 66})),
    "xlm-roberta": ("XLM-R", lambda: tf.XLMRobertaConfig(vocab_size=V, pad_token_id=1, **{**SMALL, "max_position_embeddings": 66})),
    "distilbert": ("DistilBERT", lambda: tf.DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                                             max_position_embeddings=64)),
    "electra": ("ELECTRA", lambda: tf.ElectraConfig(vocab_size=V, embedding_size=16, **SMALL)),
    "albert": ("ALBERT", lambda: tf.AlbertConfig(vocab_size=V, embedding_size=16, **{**SMALL, "num_hidden_layers": 3})),
    "deberta-v2": ("DeBERTa-v2", lambda: tf.DebertaV2Config(
        vocab_size=V, **SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8,
        max_relative_positions=32, share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False)),
    "deberta-v2 (separate position projections)": ("DeBERTa-v2", lambda: tf.DebertaV2Config(
        vocab_size=V, **SMALL, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16)),
    "modernbert": ("ModernBERT", lambda: tf.ModernBertConfig(
        vocab_size=V, **SMALL, global_attn_every_n_layers=2, local_attention=4, cls_token_id=101, sep_token_id=102,
        **TOKENS)),
    "gpt2": ("GPT-2", lambda: tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                           bos_token_id=101, eos_token_id=102)),
    "gpt_bigcode": ("GPTBigCode (StarCoder)", lambda: tf.GPTBigCodeConfig(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=False, **TOKENS)),
    "gpt_bigcode (multi-query)": ("GPTBigCode (StarCoder)", lambda: tf.GPTBigCodeConfig(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=True, **TOKENS)),
    "gpt_neo": ("GPT-Neo", lambda: tf.GPTNeoConfig(
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
        window_size=4, max_position_embeddings=64, intermediate_size=64, bos_token_id=101, eos_token_id=102)),
    "gpt_neox": ("GPT-NeoX (Pythia)", lambda: tf.GPTNeoXConfig(vocab_size=V, **SMALL, rotary_pct=0.5, **TOKENS)),
    "opt": ("OPT", lambda: tf.OPTConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                        num_attention_heads=4, word_embed_proj_dim=32, max_position_embeddings=64,
                                        **TOKENS)),
    "bloom": ("Bloom", lambda: tf.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4, **TOKENS)),
    "falcon": ("Falcon", lambda: tf.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                 num_attention_heads=4, max_position_embeddings=64, **TOKENS)),
    "falcon (new decoder architecture)": ("Falcon", lambda: tf.FalconConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
        new_decoder_architecture=True, max_position_embeddings=64, **TOKENS)),
    "falcon (alibi)": ("Falcon", lambda: tf.FalconConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True, multi_query=False,
        max_position_embeddings=64, **TOKENS)),
    "llama": ("LLaMA", lambda: tf.LlamaConfig(vocab_size=V, num_key_value_heads=2, **SMALL, **TOKENS)),
    "mistral": ("Mistral", lambda: tf.MistralConfig(vocab_size=V, num_key_value_heads=1, sliding_window=4, **SMALL,
                                                    **TOKENS)),
    "qwen2": ("Qwen2", lambda: tf.Qwen2Config(vocab_size=V, num_key_value_heads=2, **SMALL, **TOKENS)),
    "cohere": ("Cohere", lambda: tf.CohereConfig(vocab_size=V, num_key_value_heads=2, use_qk_norm=True, **SMALL,
                                                 **TOKENS)),
    "cohere2": ("Cohere 2", lambda: tf.Cohere2Config(vocab_size=V, num_key_value_heads=2, sliding_window=4,
                                                     layer_types=["sliding_attention", "full_attention"], **SMALL,
                                                     **TOKENS)),
    "llama4_text": ("Llama 4", lambda: tf.Llama4TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
        attention_chunk_size=4, no_rope_layer_interval=2, use_qk_norm=True, attn_temperature_tuning=True,
        floor_scale=2, attn_scale=0.5, max_position_embeddings=64, **TOKENS)),
    "qwen3": ("Qwen3", lambda: tf.Qwen3Config(vocab_size=V, num_key_value_heads=2, head_dim=8, **SMALL, **TOKENS)),
    "smollm3": ("SmolLM3", lambda: tf.SmolLM3Config(  # layer 1 a NoPE layer (no rotation), layer 0 a sliding window
        vocab_size=V, num_key_value_heads=2, no_rope_layers=[1, 0], use_sliding_window=True, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], **SMALL, **TOKENS)),
    "olmo2": ("OLMo 2", lambda: tf.Olmo2Config(vocab_size=V, num_key_value_heads=2, **SMALL, **TOKENS)),
    "olmo3": ("OLMo 3", lambda: tf.Olmo3Config(vocab_size=V, num_key_value_heads=2, sliding_window=4,
                                             layer_types=["sliding_attention", "full_attention"], **SMALL, **TOKENS)),
    "gemma": ("Gemma", lambda: tf.GemmaConfig(vocab_size=V, num_key_value_heads=1, head_dim=8, **SMALL, **TOKENS)),
    "gemma2": ("Gemma2", lambda: tf.Gemma2Config(
        vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4, attn_logit_softcapping=2.0,
        query_pre_attn_scalar=8, **SMALL, **TOKENS)),
    "gemma3": ("Gemma 3", lambda: tf.Gemma3TextConfig(
        vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
        layer_types=["sliding_attention", "full_attention"], **SMALL, **TOKENS)),
    "gemma3n_text": ("Gemma 3n", lambda: tf.Gemma3nTextConfig(
        vocab_size=V, vocab_size_per_layer_input=V, hidden_size_per_layer_input=8, num_key_value_heads=2, head_dim=8,
        sliding_window=4, layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
        laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.0] * 4,
        **{**SMALL, "num_hidden_layers": 4}, **TOKENS)),
    "deepseek_v3": ("DeepSeek-V3", lambda: tf.DeepseekV3Config(vocab_size=V, **MLA, **SMALL, **TOKENS)),
    "deepseek_v32": ("DeepSeek-V3.2", lambda: tf.DeepseekV32Config(
        vocab_size=V, **MLA, **SMALL, **TOKENS, index_topk=3, index_head_dim=8, index_n_heads=2)),
    "deepseek_v3 (rotary not interleaved, YaRN)": ("DeepSeek-V3", lambda: tf.DeepseekV3Config(
        vocab_size=V, **MLA, **SMALL, **TOKENS, rope_interleave=False, rope_parameters=YARN)),
    "deepseek_v2": ("DeepSeek-V2", lambda: tf.DeepseekV2Config(
        vocab_size=V, **{**MLA, "q_lora_rank": None}, **SMALL, **TOKENS)),
    "phi": ("Phi", lambda: tf.PhiConfig(vocab_size=V, partial_rotary_factor=0.5, qk_layernorm=True, **SMALL, **TOKENS)),
    "phi3": ("Phi-3", lambda: tf.Phi3Config(vocab_size=V, num_key_value_heads=2, **SMALL, **TOKENS)),
    "gpt_oss": ("gpt-oss", lambda: tf.GptOssConfig(
        vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4, num_local_experts=4, num_experts_per_tok=2,
        layer_types=["sliding_attention", "full_attention"], **SMALL, **TOKENS)),
    "diffllama": ("DiffLlama", lambda: tf.DiffLlamaConfig(vocab_size=V, num_key_value_heads=2, lambda_std_dev=0.3,
                                                          **SMALL, **TOKENS)),
    "t5": ("T5", lambda: tf.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     decoder_start_token_id=0, pad_token_id=0, eos_token_id=102)),
    "bart": ("BART", lambda: tf.BartConfig(vocab_size=V, bos_token_id=101, decoder_start_token_id=102, **ENC_DEC)),
}  # fmt: skip
MLA_FAMILIES = [name for name in FAMILIES if name.startswith("deepseek")]  # multi-head latent attention
GENERIC = {  # text architectures without an adapter: the generic path
    "gptj": lambda: tf.GPTJConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64, **TOKENS),
    "mpnet": lambda: tf.MPNetConfig(vocab_size=V, **SMALL),
    "marian": lambda: tf.MarianConfig(vocab_size=V, decoder_start_token_id=0, **ENC_DEC),
}  # fmt: skip
TEXTS = (
    "the quick brown fox jumps over the lazy dog near the river bank",
    "Ο γρήγορος σκύλος τρέχει στο πάρκο",  # Greek: 27 word pieces
    "我喜欢在公园里散步和看书",  # Chinese: one token a character ([UNK] where the vocabulary has none)
)
DECODER_TEXT = "a short reply"  # fewer tokens than the texts, so cross-attention is not square

pytestmark = pytest.mark.usefixtures("one_thread")


def build(config: tf.PretrainedConfig, seed: int = 0) -> torch.nn.Module:
    """A seeded random base model (no LM head), drawn as tests/tiny_causal.random_model draws."""
    return random_model(AutoModel, config, seed)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(bundled_model_dir())


@pytest.fixture(scope="module")
def models(tokenizer) -> dict[str, PretrainedModel]:
    configs = {**{name: config for name, (_, config) in FAMILIES.items()}, **GENERIC}
    return {name: PretrainedModel(build(config()), tokenizer, name=f"tiny-{name}") for name, config in configs.items()}


def texts(m: PretrainedModel) -> dict:
    return {"decoder_text": DECODER_TEXT} if m.kind == "encoder-decoder" else {}


@pytest.fixture(scope="module")
def traced(models) -> Callable[[str], list]:
    """name -> [(text, part, layer, trace, the model's own attention weights (H, T, S))], computed once."""
    cache: dict[str, list] = {}

    def get(name: str) -> list:
        if name not in cache:
            cache[name] = every_trace(models[name])
        return cache[name]

    return get


def every_trace(m: PretrainedModel) -> list:
    """[(text, part, layer, trace, the model's own attention weights (H, T, S))] of every text, part and layer."""
    return [
        (text, part, layer, m.trace(text, layer, part=part, **texts(m)), reference[layer])
        for text in TEXTS
        for part in m.parts
        for reference in [m.attentions(text, part=part, **texts(m))]
        for layer in range(m.num_layers[part])
    ]


def test_every_adapter_is_tested_here():
    from tests.unit.test_mixers import HYBRID  # the hybrid and mixer-only families are tested there

    built, newer = set(), set()
    for name, (_, config) in (*FAMILIES.items(), *HYBRID.items()):
        try:
            built.add(config().model_type)
        except AttributeError:  # a family newer than this transformers (the lowest declared version): skipped
            newer.add(name.split(" ")[0])  # its key starts with its model_type
    assert built == set(ADAPTERS) - newer


def test_an_architecture_has_one_adapter_and_an_adapter_names_its_architectures():
    class Again(Adapter):
        architectures = ("gpt2", "not-yet-adapted")

    class Nameless(Adapter):
        pass

    with pytest.raises(ValueError, match="already have an adapter: {'gpt2': 'GPT2Adapter'}"):
        register(Again)
    with pytest.raises(ValueError, match="names no architectures"):
        register(Nameless)
    assert "not-yet-adapted" not in ADAPTERS  # a refused adapter registers nothing


def test_the_readme_lists_exactly_the_tested_architectures():
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"Adapted architectures \(tested\): (.*?)\.\n", readme, re.DOTALL).group(1)
    assert set(re.split(r",\s*", listed.replace("\n", " "))) == {name for name, _ in FAMILIES.values()}


@pytest.mark.parametrize("name", FAMILIES)
def test_traces_equal_the_model_in_every_layer_and_part(models, traced, name):
    m = models[name]
    assert m.unavailable is None and type(m.adapter) is ADAPTERS[m.model.config.model_type]
    spread = 0.0
    for text, part, layer, t, reference in traced(name):
        where = f"{name} {part} layer {layer} {text[:10]!r}"
        T, S = t.weights.shape[1:]
        assert not t.missing, where
        if t.maps is None:
            assert np.abs(t.weights - reference).max() <= 1e-5, where  # the model's own output_attentions
        else:  # differential (DiffLlama): output_attentions holds the H maps of the H / 2 heads' pairs (i, i + H / 2)
            assert np.abs(np.concatenate(t.maps) - reference).max() <= 1e-5, where
            assert np.abs(t.maps[0] - t.lambdas[:, None, None] * t.maps[1] - t.weights).max() <= 1e-6, where
        bias = 0.0 if t.b_O is None else t.b_O
        assert np.abs(t.concat @ t.W_O.T + bias - t.output).max() <= 1e-4, where  # the real output projection
        assert np.abs(t.head_outputs.transpose(1, 0, 2).reshape(T, -1) - t.concat).max() <= 1e-5, where
        assert np.abs(head_norm(m, part, layer, t.weights @ t.values) - t.head_outputs).max() <= 1e-5, where
        assert max(t.meta["check"].values()) <= 1e-5, where
        assert (t.meta["part"], t.meta["layer"], t.causal) == (part, layer, part == "decoder"), where
        spread = max(spread, float(np.abs(t.weights - 1 / S).max()))
    assert spread > 0.1  # real attention patterns, so the comparisons mean something


def head_norm(m: PretrainedModel, part: str, layer: int, mixed: np.ndarray) -> np.ndarray:
    """What the model does to weights @ values (H, T, d_v) before the concat: nothing, except DiffLlama's
    (1 - lambda_init) RMSNorm over each head's d_v, restated here from its modeling code."""
    if m.architecture != "diffllama":
        return mixed
    a = m.adapter.site(part, layer).attention
    rms = np.sqrt((mixed.astype(np.float64) ** 2).mean(-1, keepdims=True) + a.groupnorm.eps)
    return (1 - a.lambda_init) * mixed / rms


QKV_LAYOUTS = {  # how each fused projection's output splits into q, k and v, restated from the model's own code
    "gpt2": "side by side", "modernbert": "side by side", "phi3": "side by side",
    "gpt_neox": "per head", "bloom": "per head", "falcon (alibi)": "per head",
    "falcon": "multi-query", "falcon (new decoder architecture)": "groups",
    "gpt_bigcode": "per head", "gpt_bigcode (multi-query)": "multi-query",
}  # fmt: skip


def real_qkv(name: str, site, x: torch.Tensor) -> list[np.ndarray]:
    """The projection modules' q, k, v on x (T, d_in), split into heads: [(H, T, d), (KV, T, d), (KV, T, d)]."""
    H, KV, d, T = site.num_heads, site.num_kv_heads, site.head_dim, x.shape[0]
    with torch.no_grad():
        if not site.fused:
            return [m(x[None])[0].view(T, n, d).transpose(0, 1).numpy()
                    for m, n in ((site.q, H), (site.k, KV), (site.v, KV))]
        y = site.q(x[None])[0]  # (T, n_out)
    layout = QKV_LAYOUTS[name]
    if layout == "side by side":
        q, k, v = y.split([H * d, KV * d, KV * d], dim=-1)
        q, k, v = q.view(T, H, d), k.view(T, KV, d), v.view(T, KV, d)
    elif layout == "per head":  # view(T, H, 3, d) (Bloom, Falcon) = view(T, H, 3 d).chunk(3) (GPT-NeoX)
        q, k, v = y.view(T, H, 3, d).unbind(2)
    elif layout == "multi-query":
        heads = y.view(T, H + 2, d)
        q, k, v = heads[:, :H], heads[:, H:H + 1], heads[:, H + 1:]
    else:  # groups: per K/V head, its H/KV query heads, then its key and its value
        groups = y.view(T, KV, H // KV + 2, d)
        q, k, v = groups[:, :, :-2].reshape(T, H, d), groups[:, :, -2], groups[:, :, -1]
    return [z.transpose(0, 1).numpy() for z in (q, k, v)]


INTERLEAVED = ("cohere", "cohere2", "llama4_text")  # rotary on interleaved pairs, restated from their modeling code (rotate_half)


def trace_order(name: str, x: np.ndarray) -> np.ndarray:
    """Queries or keys (..., d) in the trace's dim order: [evens | odds] where the family rotates pairs
    (x_2i, x_2i+1), so that they become rotate_half's pairs (x_i, x_(i + d/2)); else as they are."""
    return np.concatenate((x[..., ::2], x[..., 1::2]), axis=-1) if name in INTERLEAVED else x


@pytest.mark.parametrize("name", FAMILIES)
def test_projection_weights_are_the_models_own(models, traced, name):
    """x W[h] + b[h] equals the real projection module's head-h output on the same input, fused layouts too."""
    m = models[name]
    for part in m.parts:
        site = m.adapter.site(part, 0)
        t = next(t for _, p, layer, t, _ in traced(name) if (p, layer) == (part, 0))
        if name in MLA_FAMILIES or name == "gemma3n_text":  # no matrix per head maps x to MLA's keys
            assert t.W_Q is None and t.W_K is None and t.W_V is None  # (test_mla_has_no_head_weights_and_says_why);
            continue  # Gemma 3n's values are normed after W_V, its shared layers have no W_K, W_V
            continue
        x = torch.randn(5, t.W_Q.shape[1], generator=torch.Generator().manual_seed(0))  # (5, d_in)
        for i, (W, b, real) in enumerate(zip((t.W_Q, t.W_K, t.W_V), (t.b_Q, t.b_K, t.b_V), real_qkv(name, site, x),
                                             strict=True)):
            real = real[list(t.kv_heads)] if t.kv_heads is not None and i else real  # K/V heads per query head
            if t.maps is not None:  # differential: head i reads query head i's Q and K, and V of the pair (i, i + H)
                real = real[list(site.kv_heads)] if i else real  # (2H, T, d)
                first, second = np.split(real, 2)
                real = np.concatenate((first, second), axis=-1) if i == 2 else first
            real = trace_order(name, real) if i < 2 else real
            ours = np.einsum("td,hdk->htk", x.numpy(), W) + (0.0 if b is None else b[:, None])
            np.testing.assert_allclose(ours, real, atol=1e-5, err_msg=f"{name} {part} {'QKV'[i]}")


@pytest.mark.parametrize("name", FAMILIES)
def test_head_weights_fold_the_norm_each_attention_reads_through(models, name):
    """In a real forward pass the query projection reads exactly pre_norm(x) (the adapter names the right norm), and
    HeadWeights' folded W_Q on the raw stream x, over the norm's scale s, gives the same queries (mha_viz.weights)."""
    m = models[name]
    if m.adapter.weights_unavailable:  # MLA, differential attention: no W_Q, W_K, W_V per head, and it says why
        with pytest.raises(ValueError, match="not matrices per head"):
            m.head_weights()
        return
    for part in (p for p in m.parts if p != "cross"):
        w = m.head_weights(part)
        assert w.W_Q.shape[:2] == (m.num_layers[part], m.num_heads[part])
        for layer in range(m.num_layers[part]):
            site, norm = m.adapter.site(part, layer), m.adapter.pre_norm(part, layer)
            if norm is None:
                continue
            seen: dict = {}

            def keep(key, *tensors, seen=seen):  # a hook that looks and returns None: it changes nothing
                seen.setdefault(key, tuple(t[0] for t in tensors))

            hooks = [norm.register_forward_hook(lambda mod, args, out: keep("norm", args[0], out)),
                     site.q.register_forward_pre_hook(lambda mod, args: keep("read", args[0]))]
            try:
                m.final_hidden(TEXTS[0], part=part, **texts(m))
            finally:
                for hook in hooks:
                    hook.remove()
            x, normed = seen["norm"]  # (T, d_model) each
            assert torch.equal(seen["read"][0], normed), f"{name} {part} {layer}: the queries read another norm"
            kind, _, _, eps = norm_affine(norm, x.shape[-1], m.adapter.norm_weight_offset)
            x = x.double()
            s = (x.var(-1, unbiased=False, keepdim=True) if kind == "LayerNorm" else x.pow(2).mean(-1, keepdim=True))
            s = torch.sqrt(s + eps).numpy()  # (T, 1)
            folded = np.einsum("td,hdk->htk", x.numpy(), w.W_Q[layer]) / s + (0.0 if w.b_Q is None else w.b_Q[layer][:, None])
            np.testing.assert_allclose(folded, trace_order(name, real_qkv(name, site, normed.float())[0]), atol=2e-4,
                                       err_msg=f"{name} {part} layer {layer}")


@pytest.mark.parametrize("name", FAMILIES)
def test_scores_are_their_terms(traced, name):
    """scores = c tanh((scale q.k + sum(score_bias)) / c) + mask, entry by entry, and score_terms() says so."""
    for _, part, layer, t, _ in traced(name):
        logit = t.score_scale * t.queries @ t.keys.transpose(0, 2, 1) + sum(t.score_bias.values())  # (H, T, S)
        capped = logit if t.softcap is None else t.softcap * np.tanh(logit / t.softcap)
        visible = np.isfinite(t.scores)
        np.testing.assert_allclose(t.scores[visible], capped[visible], atol=1e-4, err_msg=f"{name} {part} {layer}")
        assert np.all(t.weights[~visible] == 0)
        H, T, S = t.weights.shape
        for h, i, j in ((0, T - 1, 0), (H - 1, T // 2, S // 2), (H // 2, T - 1, S - 1)):
            terms = score_terms(t, h, i, j)
            assert set(terms.terms) == set(t.score_bias)
            if np.isfinite(terms.score):
                assert terms.capped == pytest.approx(terms.score, abs=1e-4)
                assert terms.scale * terms.dot + terms.other == pytest.approx(terms.score, abs=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_knockout_removes_exactly_the_heads_contribution(models, traced, name):
    m = models[name]
    for part in m.parts:
        layer = m.num_layers[part] - 1
        full = next(t for text, p, lay, t, _ in traced(name) if (text, p, lay) == (TEXTS[0], part, layer))
        H = m.num_heads[part]
        knocked = m.trace(TEXTS[0], layer, part=part, head_mask=[1, 0] + [1] * (H - 2), **texts(m))
        np.testing.assert_allclose(knocked.output, full.output - full.head_contributions()[1], atol=1e-4)
        np.testing.assert_array_equal(knocked.weights, full.weights)  # knockout acts after attention
        silent = m.trace(TEXTS[0], layer, part=part, head_mask=[0] * H, **texts(m))
        assert np.all(silent.concat == 0) and np.all(silent.head_outputs == 0)
        np.testing.assert_allclose(silent.output, np.broadcast_to(0.0 if full.b_O is None else full.b_O,
                                                                  full.output.shape), atol=1e-6)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_head_set_to_its_own_output_changes_nothing_and_to_zero_is_knockout(models, traced, name):
    """Mean and resample ablation set a head's block of the concat (HeadValues): set to the head's own traced output
    the model is unchanged, set to zero it equals knockout (one block per traced head, two maps in DiffLlama's)."""
    m = models[name]
    part = m.parts[0]
    layer = m.num_layers[part] - 1
    full = next(t for text, p, lay, t, _ in traced(name) if (text, p, lay) == (TEXTS[0], part, layer))
    hidden = m.final_hidden(TEXTS[0], part=part, **texts(m))
    itself = m.final_hidden(TEXTS[0], part=part, head_values={layer: {1: full.head_outputs[1]}}, **texts(m))
    np.testing.assert_allclose(itself, hidden, atol=1e-5)
    zero = m.final_hidden(TEXTS[0], part=part, head_values={layer: {1: np.zeros_like(full.head_outputs[1])}},
                          **texts(m))
    H = m.num_heads[part]
    knocked = m.final_hidden(TEXTS[0], part=part, head_masks={layer: [1, 0] + [1] * (H - 2)}, **texts(m))
    np.testing.assert_allclose(zero, knocked, atol=1e-5)
    assert not np.allclose(zero, hidden, atol=1e-4)


@pytest.mark.parametrize("name", [n for n in FAMILIES if n not in ("bert", "gpt2", "t5", "bart", "llama")])
def test_all_layers_from_one_pass_equal_each_layer_traced_alone(models, traced, name):
    m = models[name]
    for part in m.parts:
        together = m.traces(TEXTS[1], part=part, **texts(m))
        alone = [t for text, p, _, t, _ in traced(name) if (text, p) == (TEXTS[1], part)]
        for a, b in zip(together, alone, strict=True):
            for field in ("weights", "queries", "keys", "values", "scores", "concat", "output"):
                np.testing.assert_allclose(getattr(a, field), getattr(b, field), atol=1e-6, err_msg=field)


# ------------------------------------------------------------------------------ each family's own variations


def test_albert_shares_one_layer_and_each_call_is_its_own_layer(models, traced):
    m = models["albert"]
    sites = [m.adapter.site("encoder", layer) for layer in range(3)]
    assert len({s.attention for s in sites}) == 1 and [s.call for s in sites] == [0, 1, 2]
    traces = [t for text, _, _, t, _ in traced("albert") if text == TEXTS[0]]
    assert np.abs(traces[0].weights - traces[1].weights).max() > 0.05  # same weights, different inputs
    np.testing.assert_array_equal(traces[0].W_Q, traces[2].W_Q)
    # knocking out layer 1 (the shared module's second call) leaves its first call alone
    zeros = torch.zeros(4)
    with HeadMasks([(sites[1], zeros)]), Recorder(sites[0]) as first, Recorder(sites[1]) as second:
        m.adapter.forward(m.tokenizer(TEXTS[0])["input_ids"])
    np.testing.assert_allclose(first.concat.numpy(), traces[0].concat, atol=1e-6)
    assert torch.all(second.concat == 0)


def test_deberta_shows_content_and_position_terms(traced):
    for name in ("deberta-v2", "deberta-v2 (separate position projections)"):
        for _, _, _, t, _ in traced(name):
            assert set(t.score_bias) == {C2P, P2C} and t.scale == pytest.approx((3 * 8) ** -0.5)
            for term in (C2P, P2C):
                assert np.abs(t.score_bias[term]).max() > 0.05  # both position terms really move the scores


def test_deberta_position_terms_are_the_relative_embeddings_through_the_models_projections(models):
    m = models["deberta-v2 (separate position projections)"]
    a = m.model.encoder.layer[1].attention.self
    t = m.trace(TEXTS[0], 1)
    span, T = a.pos_ebd_size, t.weights.shape[-1]
    R = m.model.encoder.rel_embeddings.weight[: 2 * span]  # (2 span, d_model), no layer norm in this config
    with torch.no_grad():
        k_r = a.pos_key_proj(R).view(2 * span, 4, 8).numpy()  # (2 span, H, d)
        q_r = a.pos_query_proj(R).view(2 * span, 4, 8).numpy()
    i, j = 5, 2  # relative distance 3, inside the 16 unbucketed positions
    for h in range(4):
        c2p = t.queries[h, i] @ k_r[span + (i - j), h] * t.scale  # query content, key position
        p2c = t.keys[h, j] @ q_r[span - (j - i), h] * t.scale  # key content, query position
        assert t.score_bias[C2P][h, i, j] == pytest.approx(c2p, abs=1e-5)
        assert t.score_bias[P2C][h, i, j] == pytest.approx(p2c, abs=1e-5)
    assert T == len(m.tokens(TEXTS[0]))


def test_bloom_alibi_is_each_heads_slope_times_the_key_position(traced):
    for _, _, _, t, _ in traced("bloom"):
        H, T, S = t.weights.shape
        slopes = 2.0 ** (-8.0 / H * np.arange(1, H + 1))  # ALiBi's geometric slopes for H = 4 heads
        expected = slopes[:, None, None] * np.arange(S)[None, None, :]  # (H, 1, S): m_h * j
        np.testing.assert_allclose(t.score_bias["ALiBi"], np.broadcast_to(expected, (H, T, S)), rtol=1e-6)


def test_falcon_layouts_share_keys_and_values_as_the_model_does(models, traced):
    assert next(t for *_, t, _ in traced("falcon")).kv_heads == (0, 0, 0, 0)  # multi-query: one K/V head
    assert next(t for *_, t, _ in traced("falcon (new decoder architecture)")).kv_heads == (0, 0, 1, 1)
    alibi = next(t for *_, t, _ in traced("falcon (alibi)"))
    assert alibi.kv_heads is None and set(alibi.score_bias) == {"ALiBi", "ALiBi again (in the attention mask)"}


@pytest.mark.parametrize(("name", "window", "local"), [("gpt_neo", 4, [1]), ("mistral", 4, [0, 1]),
                                                      ("gemma2", 4, [0]), ("gemma3", 4, [0]), ("modernbert", 3, [1]),
                                                      ("gpt_oss", 4, [0]), ("gemma3n_text", 4, [0, 2])])
def test_sliding_windows_are_the_models_own(traced, name, window, local):
    for text, _, layer, t, _ in traced(name):
        i, j = np.indices(t.weights.shape[-2:])
        visible = np.abs(i - j) < window if layer in local else np.ones_like(i, dtype=bool)
        if t.causal:
            visible &= j <= i
        assert np.all(t.weights[:, ~visible] == 0) and np.all(t.weights[:, visible] > 0), (name, layer, text)
        assert t.meta.get("window") == (window if layer in local else None)


def test_gemma3n_shared_layers_read_the_keys_and_values_their_source_layer_stored(models, traced):
    """Gemma 3n's last two layers have no W_K or W_V: each reads the keys and values of the last earlier layer of
    its type (layer 2 reads layer 0's, sliding; layer 3 layer 1's, full), so their traces hold the same keys and
    values as the source's; the values are normed (unit RMS, no weight)."""
    assert models["gemma3n_text"].model.config.layer_types[:2] == ["sliding_attention", "full_attention"]
    for text in TEXTS:
        t = {layer: trace for txt, _, layer, trace, _ in traced("gemma3n_text") if txt == text}
        for shared, source in ((2, 0), (3, 1)):
            assert t[shared].meta["kv_from"] == source and "kv_from" not in t[source].meta
            np.testing.assert_allclose(t[shared].keys, t[source].keys, atol=1e-5)
            np.testing.assert_array_equal(t[shared].values, t[source].values)
        rms = np.sqrt((t[0].values.astype(np.float64) ** 2).mean(-1))
        np.testing.assert_allclose(rms, 1.0, atol=1e-3)
        assert t[0].scale == 1.0


def test_gpt_oss_layers_alternate_as_its_config_says(models, traced):
    assert models["gpt_oss"].model.config.layer_types == ["sliding_attention", "full_attention"]
    assert [t.meta.get("window") for text, _, _, t, _ in traced("gpt_oss") if text == TEXTS[0]] == [4, None]


def test_gpt_oss_sink_mass_is_what_each_rows_softmax_gave_the_sink_logit(models, traced):
    """sink mass[h, i] = e^(s_h) / (e^(s_h) + sum_j e^(scores[h, i, j])) = 1 - sum_j weights[h, i, j], by hand."""
    m = models["gpt_oss"]
    for _, part, layer, t, reference in traced("gpt_oss"):
        sinks = m.adapter.site(part, layer).attention.sinks.detach().numpy()  # (H,)
        np.testing.assert_array_equal(t.sinks, sinks)
        scores = t.scores.astype(np.float64)  # (H, T, S), hidden keys -inf
        by_hand = np.exp(sinks)[:, None] / (np.exp(sinks)[:, None] + np.exp(scores).sum(-1))  # (H, T)
        np.testing.assert_allclose(t.sink_mass, by_hand, atol=1e-6)
        np.testing.assert_allclose(t.sink_mass, 1 - reference.sum(-1), atol=1e-6)  # the model's rows lack it too
        np.testing.assert_allclose(t.weights, np.exp(scores) / (np.exp(sinks)[:, None] + np.exp(scores).sum(-1))[..., None],
                                   atol=1e-6)
        assert t.sink_mass.min() > 0 and t.sink_mass.mean() > 1e-2  # the sink takes a real share on this input


def test_diffllama_lambda_and_both_maps_are_the_modules_own(models, traced):
    """lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init, lambda_init = 0.8 - 0.6 exp(-0.3 layer); each map
    is the softmax of its own scores; weights = map_1 - lambda map_2, whose rows sum to 1 - lambda; both maps are the
    model's output_attentions (heads i and i + H/2); a wrong lambda is caught by the head outputs vs the real concat."""
    m = models["diffllama"]
    for _, part, layer, t, reference in traced("diffllama"):
        a = m.adapter.site(part, layer).attention
        p = {name: getattr(a, name).detach().double().numpy() for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")}
        lam = np.exp(p["lambda_q1"] @ p["lambda_k1"]) - np.exp(p["lambda_q2"] @ p["lambda_k2"]) + 0.8 - 0.6 * np.exp(-0.3 * layer)
        np.testing.assert_allclose(t.lambdas, lam, rtol=1e-6)
        H = t.num_heads
        assert t.maps.shape == (2, H, *t.weights.shape[1:]) and reference.shape[0] == 2 * H
        e = np.exp(t.map_scores.astype(np.float64))  # (2, H, T, S)
        np.testing.assert_allclose(t.maps, e / e.sum(-1, keepdims=True), atol=1e-6)
        np.testing.assert_allclose(t.maps[0] - lam * t.maps[1], t.weights, atol=1e-6)
        np.testing.assert_allclose(t.maps.reshape(reference.shape), reference, atol=1e-6)
        np.testing.assert_allclose(t.weights.sum(-1), 1 - lam, atol=1e-5)
        assert (t.weights.min() < 0 < t.weights.max()) == (lam > 0)  # signed where lambda > 0 (layer 1 here)
        assert t.meta["check"]["head outputs vs concat"] <= 1e-5
    wrong_lambda = wrong("diffllama", variations=lambda self, *a: replace(ADAPTERS["diffllama"].variations(self, *a),
                                                                       differential=0.5))
    m.adapter = wrong_lambda(m.model)
    try:
        with pytest.warns(TraceCheckWarning, match="head outputs vs concat"):
            assert m.trace(TEXTS[0], 1).meta["check"]["head outputs vs concat"] > 1e-3
    finally:
        m.adapter = adapter_for(m.model)


def test_llama4_chunks_rotary_layers_and_tempers_nope_layers(models, traced):
    """Its rotary layers see keys only in the query's chunk of 4 (restated: i // 4 == j // 4, causal); its NoPE layers
    see every earlier key, each query scaled by its temperature 1 + 0.5 log(1 + floor((t + 1) / 2)); its long trace
    equals its traces (tests/unit/test_long_models.py: and the model's own weights, at 517 tokens)."""
    for text, _, layer, t, _ in traced("llama4_text"):
        T = t.weights.shape[-1]
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        seen = (j <= i) & ((i // 4 == j // 4) if layer % 2 == 0 else True)
        assert np.array_equal(np.isfinite(t.scores[0]), seen), (text, layer)
        assert t.meta.get("chunk") == (4 if layer % 2 == 0 else None)
    a = models["llama4_text"].adapter.site("decoder", 1).attention
    from mha_viz.pretrained.llama4 import temperatures

    np.testing.assert_allclose(temperatures(a, 6).numpy(), 1 + 0.5 * np.log1p(np.floor((np.arange(6) + 1) / 2)))
    m = models["llama4_text"]
    long = m.long_trace(TEXTS[0])  # the long kernel applies the chunks; the queries arrive already tempered
    for layer, t in enumerate(m.traces(TEXTS[0])):
        np.testing.assert_allclose(long.layers[layer].weights(slice(None), slice(None)), t.weights, atol=1e-5)


def test_deepseek_v32_keeps_the_indexers_top_k_and_says_what_dense_attention_would_have_given(models):
    """The kept keys are the ones the unmodified indexer returned (hooked), the weights are 0 elsewhere, and the
    dropped mass is what the same layer gives those keys when its indexer keeps every key (the model's own weights)."""
    m, text = models["deepseek_v32"], TEXTS[0]
    indexer = m.adapter.site("decoder", 0).attention.indexer
    seen = []
    hook = indexer.register_forward_hook(lambda mod, args, out: seen.append(out[0].clone()) and None)
    try:
        t = m.trace(text, 0)
    finally:
        hook.remove()
    T = t.weights.shape[-1]
    kept = np.zeros((T, T), dtype=bool)
    np.put_along_axis(kept, seen[0].long().numpy(), True, axis=-1)
    assert t.kind == "sparse" and np.array_equal(t.meta["kept"], kept) and t.meta["index_topk"] == 3
    assert np.all(t.weights[:, ~kept] == 0) and kept[-1].sum() == 3 < T
    indexer.index_topk = 10_000  # dense attention: every key kept
    try:
        dense = m.attentions(text)[0]  # (H, T, T) the model's own
    finally:
        indexer.index_topk = 3
    np.testing.assert_allclose(t.head_arrays["dropped mass"], np.where(kept, 0.0, dense).sum(-1), atol=1e-5)
    assert t.head_arrays["dropped mass"].max() > 0.05


def test_llama4_writes_with_rows_from_the_whole_sequence(tokenizer):
    """Its chunked layers' cache holds only the current chunk: each step's row comes from the whole sequence again,
    equal to the model's own last row at every layer, and the greedy tokens are transformers' own."""
    from tests.tiny_causal import random_causal_lm

    m = PretrainedModel(random_causal_lm(FAMILIES["llama4_text"][1]()), tokenizer)
    g = m.generate("the cat sat on the mat and the dog", 6)
    ids = list(g.prompt_ids)
    with torch.no_grad():
        own = m.model.generate(torch.tensor([ids]), max_new_tokens=6, min_new_tokens=6, do_sample=False)[0, len(ids):]
    assert [s.token_id for s in g.steps] == own.tolist()
    for t, step in enumerate(g.steps):
        rows = m.attentions_for_ids(ids + [s.token_id for s in g.steps[:t]])[:, :, -1]  # (L, H, keys)
        np.testing.assert_allclose(step.attentions, rows, rtol=0, atol=1e-6)


def test_gpt_neo_does_not_scale_and_gemma2_soft_caps(traced):
    assert all(t.scale == 1.0 for *_, t, _ in traced("gpt_neo"))
    for _, _, _, t, _ in traced("gemma2"):
        assert t.softcap == 2.0 and t.scale == pytest.approx(8**-0.5)
        visible = np.isfinite(t.scores)
        assert np.abs(t.scores[visible]).max() < 2.0  # c tanh(x / c) never reaches c
        logit = t.scale * t.queries @ t.keys.transpose(0, 2, 1)
        assert np.abs(logit[visible]).max() > 2.0  # and the cap really bites on this input


@pytest.mark.parametrize(("name", "rotary_dims"), [("gpt_neox", 4), ("phi", 4), ("qwen3", 8), ("gemma", 8),
                                                  ("gemma3", 8)])
def test_rotary_turns_only_its_dims_after_the_head_norms(models, name, rotary_dims):
    """Position 0 is not rotated; later positions are, on the first rotary_dims dims only; q/k norms come first."""
    m = models[name]
    site = m.adapter.site("decoder", 1)
    raw = []
    hook = site.q.register_forward_hook(lambda module, args, output: raw.append(output[0].detach()))
    try:
        t = m.trace(TEXTS[0], 1)
    finally:
        hook.remove()
    T, d = t.weights.shape[1], t.d_k
    q = raw[0]
    if site.fused:
        q = m.adapter.qkv_columns(site, q)[0]
    q = q.view(T, 4, d).transpose(0, 1)  # (H, T, d) before norm and rotation
    norm = getattr(site.attention, {"qwen3": "q_norm", "gemma3": "q_norm", "phi": "q_layernorm"}.get(name, ""), None)
    with torch.no_grad():
        q = (norm(q) if norm is not None else q).numpy()
    np.testing.assert_allclose(t.queries[:, 0], q[:, 0], atol=1e-5)  # position 0: cos 1, sin 0
    np.testing.assert_allclose(t.queries[..., rotary_dims:], q[..., rotary_dims:], atol=1e-5)  # the rest pass
    assert np.abs(t.queries[:, 1:, :rotary_dims] - q[:, 1:, :rotary_dims]).max() > 1e-2
    np.testing.assert_allclose(np.linalg.norm(t.queries, axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-5)


def test_hiding_special_tokens_keeps_the_score_terms_aligned(traced):
    t = next(t for text, _, layer, t, _ in traced("deberta-v2") if (text, layer) == (TEXTS[0], 1))
    shown = without_tokens(t, {"[CLS]", "[SEP]"})
    assert shown.score_bias[C2P].shape == shown.weights.shape
    np.testing.assert_array_equal(shown.score_bias[P2C], t.score_bias[P2C][:, 1:-1, 1:-1])


@pytest.mark.parametrize("name", MLA_FAMILIES)
def test_mla_keys_and_values_are_the_cached_latent_up_projected(models, traced, name):
    """The trace keeps what MLA caches per token: the latent c_KV (meta["kv_latent"]) and one rotary key part shared
    by every head (meta["k_rope"]). The model's own kv_b_proj on that latent gives every head's position-free key
    dims and its values; the rotary dims of the keys are the same in every head."""
    a = models[name].model.layers[0].self_attn
    n, r, d_v, H = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.num_heads
    for text, _, layer, t, _ in traced(name):
        kv_b = models[name].model.layers[layer].self_attn.kv_b_proj
        S = t.weights.shape[-1]
        assert t.meta["kv_latent"].shape == (S, a.kv_lora_rank) and t.meta["rope_dim"] == r
        assert (t.d_k, t.d_v) == (r + n, d_v) and "latent" in t.meta["mla"]
        with torch.no_grad():
            up = kv_b(torch.as_tensor(t.meta["kv_latent"])).view(S, H, n + d_v).transpose(0, 1).numpy()  # (H, S, n + d_v)
        np.testing.assert_allclose(t.keys[..., r:], up[..., :n], atol=1e-5, err_msg=f"{name} {layer} {text[:10]}")
        np.testing.assert_allclose(t.values, up[..., n:], atol=1e-5)
        np.testing.assert_array_equal(t.keys[..., :r], np.broadcast_to(t.meta["k_rope"], (H, S, r)))
        assert np.abs(t.keys[..., r:] - t.keys[:1, :, r:]).max() > 1e-2  # while the position-free dims differ
        assert np.abs(t.meta["kv_latent"]).max() > 0.1


@pytest.mark.parametrize("name", MLA_FAMILIES)
def test_mla_has_no_head_weights_and_says_why(models, name):
    """head_weights is refused with the reason, and pre_norm is what both the query and the latent projections read."""
    m = models[name]
    with pytest.raises(ValueError, match="multi-head latent attention has no W_K and W_V per head"):
        m.head_weights("decoder")
    for layer in range(2):
        a, norm = m.model.layers[layer].self_attn, m.adapter.pre_norm("decoder", layer)
        readers = (a.q_proj if a.q_lora_rank is None else a.q_a_proj, a.kv_a_proj_with_mqa)
        seen = []
        hooks = [norm.register_forward_hook(lambda mod, args, out, seen=seen: seen.append(out[0])),
                 *(p.register_forward_pre_hook(lambda mod, args, seen=seen: seen.append(args[0][0])) for p in readers)]
        try:
            m.final_hidden(TEXTS[0])
        finally:
            for hook in hooks:
                hook.remove()
        assert len(seen) == 3 and torch.equal(seen[0], seen[1]) and torch.equal(seen[0], seen[2]), (name, layer)


# ------------------------------------------------------------------------------ negative controls


def rms_per_head(x: torch.Tensor) -> torch.Tensor:
    """An RMS norm over each head's own dims (..., H, T, d): not OLMo 2's, which normalises all heads at once."""
    return x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()


def shifted_chunks(self, *args):
    """Llama 4's variations with each chunk one position longer: the boundaries shifted."""
    v = ADAPTERS["llama4_text"].variations(self, *args)
    return replace(v, chunk=v.chunk + 1) if v.chunk else v


def shared_keys_as_stored(self, site, rec):
    """Gemma 3n's heads with a KV-shared layer's keys as its source layer stored them: not rotated back."""
    q, k, v = ADAPTERS["gemma3n_text"].heads(self, site, rec)
    cos, sin = rotary_of(rec)
    return q, apply_rotary(k, cos, sin) if site.attention.is_kv_shared_layer else k, v  # rotated again


def wrong(name: str, **overrides) -> Callable:
    """The family's adapter with one method replaced by a wrong one."""
    return type(f"Wrong{name}", (ADAPTERS[name],), overrides)


NEGATIVE = {
    "gpt_neox": ("GPT-NeoX read as [Q | K | V] side by side", {"qkv_columns": ADAPTERS["gpt2"].qkv_columns}),
    "gpt_neo": ("GPT-Neo with 1/sqrt(d_k)", {"scale": lambda self, site: site.head_dim**-0.5}),
    "gemma2": ("Gemma2 without soft-capping",
               {"variations": lambda self, *a: replace(ADAPTERS["gemma2"].variations(self, *a), softcap=None)}),
    "phi": ("Phi without its q/k norms",
            {"variations": lambda self, *a: replace(ADAPTERS["phi"].variations(self, *a), q_norm=None, k_norm=None)}),
    "deberta-v2": ("DeBERTa without p2c", {"variations": lambda self, *a: replace(
        ADAPTERS["deberta-v2"].variations(self, *a),
        bias={C2P: ADAPTERS["deberta-v2"].variations(self, *a).bias[C2P]})}),
    "gpt_oss": ("gpt-oss without its sinks",
                {"variations": lambda self, *a: replace(ADAPTERS["gpt_oss"].variations(self, *a), sinks=None)}),
    "bloom": ("Bloom without ALiBi",
              {"variations": lambda self, *a: replace(ADAPTERS["bloom"].variations(self, *a), bias={})}),
    "deepseek_v3": ("DeepSeek-V3's interleaved rotary pairs read as rotate-half pairs",
                    {"rope_order": lambda self, site: list(range(site.attention.qk_rope_head_dim))}),
    "deepseek_v2": ("DeepSeek-V2's interleaved rotary pairs read as rotate-half pairs",
                    {"rope_order": lambda self, site: list(range(site.attention.qk_rope_head_dim))}),
    "smollm3": ("SmolLM3's NoPE layer given rotary positions",
                {"variations": lambda self, *a: ADAPTERS["llama"].variations(self, *a)}),
    "olmo2": ("OLMo 2's q/k norms taken per head instead of across all heads", {"variations": lambda self, *a: replace(
        ADAPTERS["olmo2"].variations(self, *a), q_norm=rms_per_head, k_norm=rms_per_head)}),
    "cohere2": ("Cohere 2's interleaved rotary pairs read as rotate-half pairs", {
        "heads": lambda self, site, rec: ADAPTERS["llama"].heads(self, site, rec)}),
    "llama4_text": ("Llama 4's chunk boundaries shifted by one position", {"variations": shifted_chunks}),
    "gemma3n_text": ("Gemma 3n's shared keys taken as stored (rotated), so attend() rotates them twice",
                     {"heads": shared_keys_as_stored}),
    "albert": ("ALBERT always reading the first call", {"site": lambda self, part, layer: replace(
        ADAPTERS["albert"].site(self, part, layer), call=0)}),
}


@pytest.mark.parametrize("name", NEGATIVE)
def test_a_wrong_adapter_is_caught(models, name):
    """The same checks that pass above fail when the adapter gets one thing wrong (a negative control), and the
    trace says so (a TraceCheckWarning naming the layer)."""
    m = models[name]
    m.adapter = wrong(name, **NEGATIVE[name][1])(m.model)
    try:
        errors = []
        for layer in range(m.num_layers["encoder" if m.kind == "encoder" else "decoder"]):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TraceCheckWarning)
                t = m.trace(TEXTS[0], layer)
            errors.append(np.abs(t.weights - m.attentions(TEXTS[0])[layer]).max())
            assert t.meta["check"]["weights vs output_attentions"] == pytest.approx(errors[-1], abs=1e-6)
            assert bool(caught) == bool(failures(t)) == (errors[-1] > 1e-4), NEGATIVE[name][0]
            assert all(f"layer {layer}" in str(w.message) for w in caught)
        assert max(errors) > 1e-3, NEGATIVE[name][0]
    finally:
        m.adapter = adapter_for(m.model)


# ------------------------------------------------------------------------------ the generic path and refusals


@pytest.mark.parametrize(("name", "kind"), [("gptj", "decoder"), ("mpnet", "encoder"), ("marian", "encoder-decoder")])
def test_other_text_architectures_get_concat_head_outputs_W_O_and_output(models, name, kind):
    m = models[name]
    assert isinstance(m.adapter, GenericAdapter) and m.kind == kind
    assert f"'{name}' architecture" in m.unavailable and "Concat -> W_O" in m.unavailable
    for part in m.parts:
        reference = m.attentions(TEXTS[0], part=part, **texts(m))
        for layer in range(m.num_layers[part]):
            t = m.trace(TEXTS[0], layer, part=part, **texts(m))
            T = t.weights.shape[1]
            assert set(t.missing) == {"queries", "keys", "values", "scores"}
            np.testing.assert_array_equal(t.weights, reference[layer])
            bias = 0.0 if t.b_O is None else t.b_O
            assert np.abs(t.concat @ t.W_O.T + bias - t.output).max() <= 1e-4
            np.testing.assert_array_equal(t.head_outputs.transpose(1, 0, 2).reshape(T, -1), t.concat)
            assert t.meta["unavailable"] == m.unavailable and t.causal == (part == "decoder")
        knocked = m.trace(TEXTS[0], 1, part=part, head_mask=[1, 0, 1, 1], **texts(m))
        full = m.trace(TEXTS[0], 1, part=part, **texts(m))
        np.testing.assert_allclose(knocked.output, full.output - full.head_contributions()[1], atol=1e-4)
    changed = m.final_hidden(TEXTS[0], part=m.parts[0], head_masks={0: [0, 0, 0, 0]}, **texts(m))
    assert np.abs(changed - m.final_hidden(TEXTS[0], part=m.parts[0], **texts(m))).max() > 1e-3


PADDING_OFFSET = {  # generic architectures whose position ids start after the padding index, as RoBERTa's do
    "mpnet": lambda: tf.MPNetConfig(vocab_size=V, **SMALL),  # padding_idx 1, fixed in the model's code
    "camembert": lambda: tf.CamembertConfig(vocab_size=V, **{**SMALL, "pad_token_id": 3}),
    "xlm-roberta-xl": lambda: tf.XLMRobertaXLConfig(vocab_size=V, **{**SMALL, "pad_token_id": 1}),
    "data2vec-text": lambda: tf.Data2VecTextConfig(vocab_size=V, **{**SMALL, "pad_token_id": 1}),
}  # fmt: skip


@pytest.mark.parametrize("name", PADDING_OFFSET)
def test_padding_offset_positions_fit_at_the_maximum_and_equal_the_model(tokenizer, name):
    """Positions padding_idx + 1 ... : the longest input the model can embed is max_position_embeddings - padding_idx
    - 1 tokens; a text cut there must be traced, and its weights must be the model's own output_attentions."""
    model = build(PADDING_OFFSET[name]())
    m = PretrainedModel(model, tokenizer)
    pad = 1 if name == "mpnet" else model.config.pad_token_id
    assert m.max_tokens == 64 - pad - 1 and isinstance(m.adapter, GenericAdapter)
    text = "the quick brown fox " * 40
    ids = tokenizer(text, truncation=True, max_length=m.max_tokens)["input_ids"]
    assert len(m.tokens(text)) == len(ids) == m.max_tokens and pad not in ids
    with torch.no_grad():
        own = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    for layer in range(2):
        t = m.trace(text, layer)
        assert t.weights.shape == (4, m.max_tokens, m.max_tokens)
        np.testing.assert_array_equal(t.weights, own[layer][0].numpy())
    with pytest.raises((IndexError, RuntimeError)):  # one more token is past the table: the limit is exact
        model(input_ids=torch.tensor([[*ids, ids[-1]]]))


def test_the_generic_path_is_the_real_output_projection(models):
    """GPT-J's out_proj, found by looking, is the module the model itself calls after its attention."""
    m = models["gptj"]
    assert [m.adapter.site("decoder", layer).out for layer in range(2)] == [h.attn.out_proj for h in m.model.h]


def test_without_a_findable_output_projection_only_the_weights_remain(models, tokenizer, monkeypatch):
    monkeypatch.setattr(generic_module, "OUT_NAMES", ())
    m = PretrainedModel(models["gptj"].model, tokenizer)
    assert isinstance(m.adapter, FallbackAdapter) and "cannot be told apart" in m.unavailable
    t = m.trace(TEXTS[0], 0)
    assert set(t.missing) == {"queries", "keys", "values", "scores", "head_outputs", "concat", "output", "W_O"}
    with pytest.raises(ValueError, match="head_mask cannot be applied"):
        m.trace(TEXTS[0], 0, head_mask=[1, 1, 1, 1])


NON_TEXT = {
    "vit": (lambda: tf.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                 image_size=32, patch_size=8), "read images \\(pixel_values\\)"),
    "whisper": (lambda: tf.WhisperConfig(vocab_size=V, d_model=32, encoder_layers=1, decoder_layers=1,
                                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                         decoder_ffn_dim=64, decoder_start_token_id=101, **TOKENS),
                "read audio features \\(input_features\\)"),
}


@pytest.mark.parametrize("name", NON_TEXT)
def test_vision_and_audio_models_are_refused_at_once(tokenizer, tmp_path, name):
    config, reads = NON_TEXT[name]
    model = AutoModel.from_config(config(), attn_implementation="eager")
    refused_as_object_and_folder(model, tokenizer, tmp_path,
                                 f"'{name}' models {reads}, not token ids: mha-viz traces text models only")


def refused_as_object_and_folder(model, tokenizer, tmp_path, message: str) -> None:
    """PretrainedModel(model) and load_model(its saved folder) both raise ModelLoadError matching message."""
    with pytest.raises(ModelLoadError, match=message):
        PretrainedModel(model, tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=message):
        load_model(tmp_path)


def test_a_multimodal_model_is_refused(tokenizer):
    config = tf.CLIPConfig(text_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                                        "intermediate_size": 64, "vocab_size": V},
                           vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                                          "intermediate_size": 64, "image_size": 32, "patch_size": 8})
    with pytest.raises(ModelLoadError, match="'clip' is a multimodal model \\(its config has vision_config\\)"):
        PretrainedModel(AutoModel.from_config(config, attn_implementation="eager"), tokenizer)


BANDED = {  # attention weights reported as [query, offset in the window]: a 5-token text would pass as 5 x 5
    "longformer": lambda: tf.LongformerConfig(vocab_size=V, attention_window=4, **{**SMALL, "pad_token_id": 1}),
    "led": lambda: tf.LEDConfig(vocab_size=V, attention_window=4, **ENC_DEC),
}


@pytest.mark.parametrize("name", BANDED)
def test_banded_attention_is_refused_not_mislabelled(tokenizer, tmp_path, name):
    model = AutoModel.from_config(BANDED[name](), attn_implementation="eager")
    with torch.no_grad():
        banded = model(input_ids=torch.tensor([[101, 2417, 4419, 14523, 102]]), output_attentions=True)
    weights = (banded.encoder_attentions if name == "led" else banded.attentions)[0][0]  # (H, 5, window + 1)
    assert weights.shape == (4, 5, 5) and not (weights[:, 0, :2] > 0).any()  # not keys: offsets -2 ... +2
    refused_as_object_and_folder(model, tokenizer, tmp_path,
                                 f"'{name}' reports its attention weights as bands around each token")


@pytest.mark.parametrize("name", ["deberta-v2", "bloom", "t5"])
def test_the_score_parts_figure_adds_up_to_the_scores(traced, name):
    for text, part, layer, t, _ in traced(name):
        if text != TEXTS[0] or part == "cross":
            continue
        fig = score_parts_figure(t, 2, 4)
        bars = [np.asarray(trace.y, dtype=float) for trace in fig.data if trace.type == "bar"]
        assert len(bars) == 1 + len(t.score_bias)  # the content term and each named term
        visible = np.isfinite(t.scores[2, 4])
        np.testing.assert_allclose(sum(bars)[visible], t.scores[2, 4][visible], atol=1e-4)
