"""Tiny random models of the first adapted architectures (and one unadapted one), built offline from
configs and read with the bundled MiniLM tokenizer (vocab 30522). Each trace must reproduce the
model's own attention weights and its real output projection. tests/test_families.py covers every
adapted family."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    AlbertConfig,
    AutoModel,
    AutoTokenizer,
    BartConfig,
    BertConfig,
    DistilBertConfig,
    GPT2Config,
    LlamaConfig,
    MarianConfig,
    MistralConfig,
    OPTConfig,
    Qwen2Config,
    RobertaConfig,
    T5Config,
    XLMRobertaConfig,
)

from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.pretrained.architectures import ADAPTERS

V = 30522  # the MiniLM vocabulary
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
POSITIONS = {"max_position_embeddings": 64}
ENC_DEC = {
    "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
    "pad_token_id": 0, "eos_token_id": 102, "forced_eos_token_id": 102,
}  # fmt: skip
CONFIGS = {
    "bert": lambda: BertConfig(vocab_size=V, **SMALL, **POSITIONS),
    "roberta": lambda: RobertaConfig(vocab_size=V, pad_token_id=1, max_position_embeddings=66, **SMALL),
    "xlm-roberta": lambda: XLMRobertaConfig(vocab_size=V, pad_token_id=1, **SMALL, **POSITIONS),
    "distilbert": lambda: DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=64, **POSITIONS),
    "gpt2": lambda: GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=101, eos_token_id=102
    ),
    "llama": lambda: LlamaConfig(vocab_size=V, num_key_value_heads=2, **SMALL, **POSITIONS),
    "mistral": lambda: MistralConfig(vocab_size=V, num_key_value_heads=1, sliding_window=4, **SMALL, **POSITIONS),
    "qwen2": lambda: Qwen2Config(vocab_size=V, num_key_value_heads=2, **SMALL, **POSITIONS),
    "t5": lambda: T5Config(
        vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=102,
    ),
    "bart": lambda: BartConfig(vocab_size=V, bos_token_id=101, decoder_start_token_id=102, **ENC_DEC),
    # adapted since, covered by tests/test_families.py too
    "albert": lambda: AlbertConfig(vocab_size=V, embedding_size=16, **SMALL, **POSITIONS),
    "opt": lambda: OPTConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4, word_embed_proj_dim=32,
        pad_token_id=0, bos_token_id=101, eos_token_id=102, **POSITIONS,
    ),
    # an architecture without an adapter: the generic path
    "marian": lambda: MarianConfig(vocab_size=V, decoder_start_token_id=0, **ENC_DEC),
}
ADAPTED = [name for name in CONFIGS if name in ADAPTERS]
UNADAPTED = [name for name in CONFIGS if name not in ADAPTERS]
TEXT = "the quick brown fox jumps over the lazy dog near the river bank"
DECODER_TEXT = "a short reply"  # fewer tokens than TEXT, so cross-attention is not square


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """A seeded random model; weights ~ N(0, 0.2) so attention is neither uniform nor one-hot."""
    torch.manual_seed(seed)
    model = AutoModel.from_config(CONFIGS[name](), attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return model


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(bundled_model_dir())


@pytest.fixture(scope="module")
def models(tokenizer):
    return {name: PretrainedModel(build(name), tokenizer, name=f"tiny-{name}") for name in CONFIGS}


def texts(m: PretrainedModel) -> dict:
    return {"decoder_text": DECODER_TEXT} if m.kind == "encoder-decoder" else {}


def every_layer(m: PretrainedModel):
    for part in m.parts:
        reference = m.attentions(TEXT, part=part, **texts(m))  # the model's own output_attentions
        for layer in range(m.num_layers[part]):
            yield part, layer, m.trace(TEXT, layer, part=part, **texts(m)), reference[layer]


def test_the_adapted_list_is_what_these_tests_cover():
    assert set(ADAPTED) <= set(ADAPTERS) and UNADAPTED == ["marian"]


@pytest.mark.parametrize("name", ADAPTED)
def test_trace_reproduces_the_model(models, name):
    m = models[name]
    assert m.unavailable is None
    for part, layer, t, reference in every_layer(m):
        T, S = t.weights.shape[1:]
        assert np.abs(t.weights - reference).max() <= 1e-5
        assert np.abs(t.weights - 1 / S).max() > 0.1  # a real pattern, so the comparison means something
        np.testing.assert_allclose(t.weights.sum(-1), 1.0, atol=1e-5)
        bias = 0.0 if t.b_O is None else t.b_O
        np.testing.assert_allclose(t.concat @ t.W_O.T + bias, t.output, atol=1e-5)
        np.testing.assert_allclose(t.head_outputs.transpose(1, 0, 2).reshape(T, -1), t.concat, atol=1e-5)
        np.testing.assert_allclose(t.weights @ t.values, t.head_outputs, atol=1e-5)
        assert max(t.meta["check"].values()) <= 1e-5
        assert (t.meta["part"], t.meta["layer"], t.meta["model"]) == (part, layer, f"tiny-{name}")
        assert t.causal == (part == "decoder") and t.cross == (part == "cross")


@pytest.mark.parametrize("name", ADAPTED)
def test_tokens_per_part(models, tokenizer, name):
    m = models[name]
    encoder_tokens = tuple(tokenizer.convert_ids_to_tokens(tokenizer(TEXT)["input_ids"]))
    for part in m.parts:
        t = m.trace(TEXT, 0, part=part, **texts(m))
        if m.kind != "encoder-decoder":
            assert t.query_tokens == t.key_tokens == encoder_tokens
            continue
        decoder_tokens = tuple(m.tokens(DECODER_TEXT, decoder=True))
        assert decoder_tokens[1:] == tuple(m.tokens(DECODER_TEXT))[:-1]  # shifted right behind the start token
        queries, keys = {"encoder": "ee", "decoder": "dd", "cross": "de"}[part]
        tokens = {"e": encoder_tokens, "d": decoder_tokens}
        assert (t.query_tokens, t.key_tokens) == (tokens[queries], tokens[keys])


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "t5", "bart"])
def test_causal_parts_never_look_ahead(models, name):
    m = models[name]
    t = m.trace(TEXT, 1, part="decoder", **texts(m))
    later = np.triu(np.ones(t.weights.shape[-2:], dtype=bool), 1)
    assert t.causal and np.all(t.weights[:, later] == 0) and np.all(t.scores[:, later] == -np.inf)
    assert np.all(np.isfinite(t.scores[:, ~later]))


def test_sliding_window_is_the_models_own(models):
    t = models["mistral"].trace(TEXT, 0, part="decoder")
    i, j = np.indices(t.weights.shape[-2:])
    visible = (j <= i) & (j > i - 4)  # sliding_window=4: the token itself and the 3 before it
    assert np.all(t.weights[:, ~visible] == 0) and np.all(t.weights[:, visible] > 0)


GQA = [("llama", (0, 0, 1, 1)), ("mistral", (0, 0, 0, 0)), ("qwen2", (0, 0, 1, 1))]


@pytest.mark.parametrize(("name", "kv_heads"), GQA)
def test_grouped_query_heads_share_keys_and_values(models, name, kv_heads):
    t = models[name].trace(TEXT, 1)
    assert t.kv_heads == kv_heads
    for h in range(1, len(kv_heads)):  # heads of one group are neighbours
        shares = kv_heads[h] == kv_heads[h - 1]
        assert np.array_equal(t.keys[h], t.keys[h - 1]) == shares
        assert np.array_equal(t.values[h], t.values[h - 1]) == shares


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2"])
def test_queries_and_keys_are_taken_after_rotary_embeddings(models, name):
    m = models[name]
    attn = m.model.layers[1].self_attn
    raw = []
    hook = attn.q_proj.register_forward_hook(lambda module, args, output: raw.append(output[0].detach()))
    try:
        t = m.trace(TEXT, 1)
    finally:
        hook.remove()
    T = t.weights.shape[1]
    q_raw = raw[0].view(T, 4, -1).transpose(0, 1).numpy()  # (H, T, d), before the rotation
    np.testing.assert_allclose(t.queries[:, 0], q_raw[:, 0], atol=1e-6)  # position 0 is not rotated
    assert np.abs(t.queries[:, 1:] - q_raw[:, 1:]).max() > 1e-2
    norms = np.linalg.norm(t.queries, axis=-1), np.linalg.norm(q_raw, axis=-1)
    np.testing.assert_allclose(*norms, rtol=1e-5)  # a rotation keeps lengths


def test_t5_scores_carry_the_relative_position_bias_and_no_scaling(models):
    m = models["t5"]
    for part in ("encoder", "decoder"):
        t = m.trace(TEXT, 1, part=part, **texts(m))
        bias = t.scores - t.queries @ t.keys.transpose(0, 2, 1)
        finite = np.isfinite(t.scores)
        assert np.abs(bias[finite]).max() > 0.1  # the learned relative bias (no 1/sqrt(d_k))
        i, j = np.indices(bias.shape[-2:])
        for offset in (-1, 0):  # the bias depends on j - i only
            on_diagonal = bias[:, (j - i == offset) & finite[0]]
            np.testing.assert_allclose(on_diagonal, on_diagonal[:, :1].repeat(on_diagonal.shape[1], 1), atol=1e-5)
    cross = m.trace(TEXT, 1, part="cross", **texts(m))
    np.testing.assert_allclose(cross.scores, cross.queries @ cross.keys.transpose(0, 2, 1), atol=1e-5)


@pytest.mark.parametrize("name", ADAPTED)
def test_knocking_out_every_head_leaves_the_bias(models, name):
    m = models[name]
    for part in m.parts:
        t = m.trace(TEXT, 1, part=part, head_mask=[0] * m.num_heads[part], **texts(m))
        expected = np.zeros_like(t.output) if t.b_O is None else np.broadcast_to(t.b_O, t.output.shape)
        np.testing.assert_allclose(t.output, expected, atol=1e-6)
        assert np.all(t.concat == 0) and np.all(t.head_outputs == 0)


def test_knocking_out_one_head_removes_exactly_its_contribution(models):
    m = models["bart"]
    full = m.trace(TEXT, 0, part="cross", **texts(m))
    knocked = m.trace(TEXT, 0, part="cross", head_mask=[1, 0, 1, 1], **texts(m))
    np.testing.assert_allclose(knocked.output, full.output - full.head_contributions()[1], atol=1e-5)


def test_long_inputs_are_truncated_to_the_position_table(models):
    m = models["gpt2"]
    assert m.max_tokens == 64
    t = m.trace("word " * 100, 0)
    assert t.weights.shape == (4, 64, 64) and t.meta["truncated"] == 102 - 64
    bart = models["bart"]
    t = bart.trace("word " * 100, 0, part="cross", decoder_text="word " * 70)
    assert t.weights.shape == (4, 64, 64) and t.meta["truncated"] == (102 - 64) + (72 - 64)


def test_roberta_keeps_two_positions_for_padding(models):
    assert models["roberta"].max_tokens == 66 - 2
    assert models["roberta"].trace("word " * 100, 0).weights.shape == (4, 64, 64)


def test_an_sdpa_model_is_switched_to_eager(tokenizer):
    torch.manual_seed(0)
    model = AutoModel.from_config(CONFIGS["bert"](), attn_implementation="sdpa")
    m = PretrainedModel(model, tokenizer)
    assert model.config._attn_implementation == "eager" and m.name == "bert"
    t = m.trace(TEXT, 1)
    assert np.abs(t.weights - m.attentions(TEXT)[1]).max() <= 1e-5


def test_an_unadapted_architecture_gives_the_models_weights_and_its_output_projection(models):
    m = models["marian"]
    assert m.kind == "encoder-decoder" and "'marian' architecture" in m.unavailable
    for part, layer, t, reference in every_layer(m):
        np.testing.assert_array_equal(t.weights, reference)
        assert set(t.missing) == {"queries", "keys", "values", "scores"}
        assert t.meta["unavailable"] == m.unavailable and t.causal == (part == "decoder")
        assert max(t.check_wo_path().values()) <= t.rounding_tolerance()
        with pytest.raises(ValueError, match="not available"):
            t.require("queries")


@pytest.mark.parametrize("name", [*ADAPTED, *UNADAPTED])
def test_all_layers_from_one_pass_equal_each_layer_traced_alone(models, name):
    m = models[name]
    for part in m.parts:
        together = m.traces(TEXT, part=part, **texts(m))
        assert len(together) == m.num_layers[part]
        for layer, t in enumerate(together):
            alone = m.trace(TEXT, layer, part=part, **texts(m))
            assert t.meta == alone.meta and t.missing == alone.missing
            for field in ("weights", "queries", "keys", "values", "scores", "head_outputs", "concat", "output", "W_O"):
                a, b = getattr(t, field), getattr(alone, field)
                assert (a is None) == (b is None), field
                if a is not None:
                    np.testing.assert_allclose(a, b, atol=1e-6, err_msg=f"{part} layer {layer} {field}")
