"""Direct logit attribution on tiny random GPT-2 and LLaMA (grouped-query) models: the terms sum to the model's
own logit, and each head's and each named term's value is recomputed here from the model's own modules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertConfig, GPTJConfig, GPTJForCausalLM

from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import NAMES, build_lm, tiny_causal

TEXT = "the quick brown fox jumps over the lazy dog"
TERMS = {
    "gpt2": ["embeddings", "layer 0 attention bias", "layer 0 MLP", "layer 1 attention bias", "layer 1 MLP",
             "final norm bias"],
    "llama": ["embeddings", "layer 0 attention bias", "layer 0 MLP", "layer 1 attention bias", "layer 1 MLP"],
}  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    return {name: tiny_causal(name) for name in NAMES}


def final_norm(m: PretrainedModel) -> torch.nn.Module:
    return m.model.transformer.ln_f if m.architecture == "gpt2" else m.model.model.norm


def own_logits(m: PretrainedModel, text: str) -> torch.Tensor:
    with torch.no_grad():
        return m.model(input_ids=torch.tensor([m.tokenizer(text)["input_ids"]]), use_cache=False).logits[0]  # (T, V)


def residual_at_final_norm(m: PretrainedModel, text: str) -> torch.Tensor:
    """(T, d): the input of the final norm, recorded here with a hook of this test's own."""
    seen = []
    handle = final_norm(m).register_forward_pre_hook(lambda module, args: seen.append(args[0][0].detach()))
    try:
        own_logits(m, text)
    finally:
        handle.remove()
    return seen[0]


def through_frozen_norm(m: PretrainedModel, part: torch.Tensor, s: float, token_id: int) -> torch.Tensor:
    """u . (gamma * centre(part) / s) for part (..., d): one residual-stream part's share of the logit."""
    norm = final_norm(m)
    if isinstance(norm, torch.nn.LayerNorm):
        part = part - part.mean(-1, keepdim=True)
    u = m.model.lm_head.weight[token_id].detach()
    return (part * norm.weight.detach() / s) @ u


@pytest.mark.parametrize("name", NAMES)
def test_the_terms_sum_to_the_models_logit_at_every_position(models, name):
    m = models[name]
    logits = own_logits(m, TEXT)  # (T, V)
    T = len(m.tokens(TEXT))
    largest = dict.fromkeys(TERMS[name], 0.0)  # max |term| over positions
    for position in range(T):
        a = m.logit_attribution(TEXT, position=position)
        assert a.token_id == int(logits[position].argmax()) and a.position == position
        assert a.logit == pytest.approx(float(logits[position, a.token_id]), abs=1e-5)
        assert a.probability == pytest.approx(float(logits[position].softmax(-1)[a.token_id]), abs=1e-6)
        assert abs(a.total - a.logit) <= 1e-3 and a.check["sum of terms vs logit"] <= 1e-3
        assert a.residual_error <= 1e-4
        assert a.heads.shape == (2, 4) and list(a.terms) == TERMS[name]
        assert np.abs(a.heads).max() > 0.1
        largest = {term: max(largest[term], abs(value)) for term, value in a.terms.items()}
    assert min(largest.values()) > 0.01  # no term is zero by construction
    for token in (0, 5000, 30521):  # other tokens than the top one
        a = m.logit_attribution(TEXT, position=3, token=token)
        assert a.token_id == token and abs(a.total - float(logits[3, token])) <= 1e-3


@pytest.mark.parametrize("name", NAMES)
def test_each_head_is_its_concat_block_through_W_O_the_frozen_norm_and_the_unembedding(models, name):
    m = models[name]
    position = 6
    a = m.logit_attribution(TEXT, position=position)
    x = residual_at_final_norm(m, TEXT)[position].double()  # (d,)
    eps = final_norm(m).eps if name == "gpt2" else final_norm(m).variance_epsilon
    s = float((x.var(unbiased=False) if name == "gpt2" else x.pow(2).mean()).add(eps).sqrt())
    assert a.norm == {"gpt2": "LayerNorm", "llama": "RMSNorm"}[name] and a.norm_scale == pytest.approx(s, rel=1e-6)
    for layer, trace in enumerate(m.traces(TEXT)):
        assert trace.meta["check"]["weights vs output_attentions"] <= 1e-5
        contributions = torch.as_tensor(trace.head_contributions()[:, position])  # (H, d): head_h W_O^(h)T
        expected = through_frozen_norm(m, contributions.float(), a.norm_scale, a.token_id)  # (H,)
        np.testing.assert_allclose(a.heads[layer], expected.numpy(), atol=1e-5)


def test_embeddings_and_mlp_terms_are_what_those_modules_wrote(models):
    m = models["gpt2"]
    position = 4
    a = m.logit_attribution(TEXT, position=position)
    ids = m.tokenizer(TEXT)["input_ids"]
    wte, wpe = m.model.transformer.wte.weight, m.model.transformer.wpe.weight
    embedding = (wte[ids[position]] + wpe[position]).detach()  # (d,)
    assert a.terms["embeddings"] == pytest.approx(float(through_frozen_norm(m, embedding, a.norm_scale, a.token_id)),
                                                  abs=1e-5)
    mlp_outputs = []
    handles = [block.mlp.register_forward_hook(lambda module, args, out: mlp_outputs.append(out[0].detach()))
               for block in m.model.transformer.h]
    try:
        own_logits(m, TEXT)
    finally:
        for handle in handles:
            handle.remove()
    for layer, out in enumerate(mlp_outputs):
        expected = float(through_frozen_norm(m, out[position], a.norm_scale, a.token_id))
        assert a.terms[f"layer {layer} MLP"] == pytest.approx(expected, abs=1e-4)
    beta, u = m.model.transformer.ln_f.bias.detach(), m.model.lm_head.weight[a.token_id].detach()
    assert a.terms["final norm bias"] == pytest.approx(float(u @ beta), abs=1e-5)


def test_an_unembedding_bias_is_a_term_of_its_own():
    lm = build_lm("gpt2")
    lm.config.tie_word_embeddings = False
    lm.lm_head = torch.nn.Linear(32, 30522, bias=True)
    with torch.no_grad():
        lm.lm_head.weight.normal_(0.0, 0.2)
        lm.lm_head.bias.normal_(0.0, 1.0)
    m = PretrainedModel(lm, AutoTokenizer.from_pretrained(bundled_model_dir()))
    a = m.logit_attribution(TEXT, position=2, token=7592)
    assert a.terms["unembedding bias"] == pytest.approx(float(lm.lm_head.bias.detach()[7592]), abs=1e-6)
    assert abs(a.total - float(own_logits(m, TEXT)[2, 7592])) <= 1e-3


def test_a_token_can_be_named_by_its_string(models):
    m = models["gpt2"]
    by_id = m.logit_attribution(TEXT, token=m.tokenizer.convert_tokens_to_ids("fox"))
    by_string = m.logit_attribution(TEXT, token="fox")
    assert by_string.token == "fox" and by_string.token_id == by_id.token_id
    np.testing.assert_array_equal(by_string.heads, by_id.heads)
    last = m.logit_attribution(TEXT)
    assert last.position == len(m.tokens(TEXT)) - 1 and last.tokens == tuple(m.tokens(TEXT))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"position": 11}, "position must be"),
        ({"position": -12}, "position must be"),
        ({"position": 1.0}, "position must be"),
        ({"token": 30522}, "token must be"),
        ({"token": -1}, "token must be"),
        ({"token": True}, "token must be"),
        ({"token": "not-a-token"}, "not a token"),
    ],
)
def test_bad_positions_and_tokens_are_refused(models, kwargs, message):
    assert len(models["gpt2"].tokens(TEXT)) == 11
    with pytest.raises(ValueError, match=message):
        models["gpt2"].logit_attribution(TEXT, **kwargs)


def test_ids_whose_eager_attention_would_not_fit_are_refused_before_the_model_runs(models, monkeypatch):
    """A long prompt's ids (Generate past the views' window): over EAGER_MAX_BYTES of [H, T, T] work a layer, the
    request is refused with how many tokens fit, before the model runs; within it, the terms still add up."""
    from mha_viz.pretrained import attribution

    m = models["gpt2"]  # 4 heads: 12 * 4 * T^2 bytes a layer
    monkeypatch.setattr(attribution, "EAGER_MAX_BYTES", 12 * 4 * 40**2)
    ids = m.tokenizer(TEXT * 5)["input_ids"]
    assert len(ids) > 40
    hook = m.model.register_forward_pre_hook(lambda *a: pytest.fail("the model ran"))
    try:
        with pytest.raises(ValueError, match="more than the 0 MiB allowed: it splits the logit after at most 40 tokens"):
            m.logit_attribution(ids=ids)
    finally:
        hook.remove()
    fits = m.logit_attribution(ids=ids[:40])
    assert abs(fits.total - fits.logit) < 1e-4


def test_models_without_a_known_residual_stream_are_refused():
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    torch.manual_seed(0)
    bert = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      intermediate_size=64)
    encoder = PretrainedModel(AutoModel.from_config(bert, attn_implementation="eager"), tokenizer)
    with pytest.raises(ValueError, match="logit attribution is unavailable: .*encoder model"):
        encoder.logit_attribution(TEXT)
    gptj = GPTJConfig(vocab_size=30522, n_embd=32, n_layer=1, n_head=4, rotary_dim=4, n_positions=64,
                      bos_token_id=101, eos_token_id=102)
    decoder = PretrainedModel(GPTJForCausalLM(gptj), tokenizer)
    with pytest.raises(ValueError, match="'gptj' model; it needs a decoder whose residual stream mha-viz knows: .*gpt2"):
        decoder.logit_attribution(TEXT)
