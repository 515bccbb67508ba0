"""Knockout through whole pretrained models: the bundled MiniLM, and a tiny GPT-2 with its LM head."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from mha_viz.analysis import (
    attention_rollout,
    knocked_output,
    knockout_effect,
    model_knockout,
    model_knockout_ranking,
    next_token_knockout,
)
from mha_viz.pretrained import PretrainedModel, bundled_model_dir, load_model

TEXT = "the cat sat on the mat"


@cache
def bundled() -> PretrainedModel:
    """The bundled MiniLM, loaded once per test session (the AppTests share it)."""
    return load_model()


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def minilm() -> PretrainedModel:
    return bundled()


@pytest.fixture(scope="module")
def tiny_lm() -> PretrainedModel:
    """A seeded 2-layer GPT-2 built with its LM head (as AutoModelForCausalLM would), MiniLM's tokenizer."""
    config = GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=101,
                        eos_token_id=102)
    torch.manual_seed(0)
    return PretrainedModel(GPT2LMHeadModel(config), AutoTokenizer.from_pretrained(bundled_model_dir()), name="tiny-lm")


def own_last_hidden_state(model: PretrainedModel, text: str) -> np.ndarray:
    ids = torch.tensor([model.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return model.model.base_model(input_ids=ids).last_hidden_state[0].numpy()  # the transformer without a head


def test_knocking_out_every_head_leaves_only_the_bias_in_the_layer_output(minilm: PretrainedModel) -> None:
    H = minilm.num_heads["encoder"]
    trace = minilm.trace(TEXT, 3)
    knocked = minilm.trace(TEXT, 3, head_mask=np.zeros(H))  # zeroed inside the real model
    T = len(trace.query_tokens)
    np.testing.assert_allclose(knocked.output, np.broadcast_to(trace.b_O, (T, trace.d_out)), atol=1e-6)
    np.testing.assert_allclose(knocked_output(trace, range(H)), knocked.output, atol=1e-6)
    one = minilm.trace(TEXT, 3, head_mask=[0.0 if h == 5 else 1.0 for h in range(H)])
    np.testing.assert_allclose(knocked_output(trace, [5]), one.output, atol=1e-5)  # trace-only knockout = real one


def test_final_hidden_reproduces_the_model_and_changes_under_knockout(minilm: PretrainedModel) -> None:
    H = minilm.num_heads["encoder"]
    hidden = minilm.final_hidden(TEXT)
    np.testing.assert_array_equal(hidden, own_last_hidden_state(minilm, TEXT))
    np.testing.assert_array_equal(minilm.final_hidden(TEXT, head_masks={2: np.ones(H)}), hidden)
    knocked = minilm.final_hidden(TEXT, head_masks={2: [0.0] * 3 + [1.0] * (H - 3)})
    assert knocked.shape == hidden.shape and not np.allclose(knocked, hidden, atol=1e-4)
    np.testing.assert_array_equal(minilm.final_hidden(TEXT), hidden)  # the hooks are gone afterwards
    result = model_knockout(minilm, TEXT, 2, [0, 1, 2])
    np.testing.assert_array_equal(result.knocked, knocked)
    assert result.tokens == tuple(minilm.tokens(TEXT)) and 0 < result.effect
    assert result.per_token.shape == (len(result.tokens),)
    with pytest.raises(ValueError, match="12 finite values"):
        minilm.final_hidden(TEXT, head_masks={2: [1.0] * 11})
    with pytest.raises(IndexError, match="layer must be"):
        minilm.final_hidden(TEXT, head_masks={6: np.ones(H)})


def test_whole_model_ranking_is_one_knockout_per_head(minilm: PretrainedModel) -> None:
    ranking = model_knockout_ranking(minilm, TEXT, 5)
    assert ranking.shape == (12,) and (ranking > 0).all()
    assert ranking[7] == pytest.approx(model_knockout(minilm, TEXT, 5, [7]).effect)
    # in the last layer the layer output's change and the final state's change follow each other
    layer_effects = [knockout_effect(minilm.trace(TEXT, 5), [h]) for h in range(12)]
    assert np.corrcoef(layer_effects, ranking)[0, 1] > 0.5


def test_rollout_of_the_bundled_model_is_row_stochastic(minilm: PretrainedModel) -> None:
    rollout = attention_rollout(minilm.attentions(TEXT))  # (6, T, T)
    assert rollout.shape == (6, 8, 8)
    np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-6)


def test_next_token_probabilities_come_from_the_lm_head_and_change_under_knockout(tiny_lm: PretrainedModel) -> None:
    assert tiny_lm.next_token_unavailable is None
    probs, knocked = next_token_knockout(tiny_lm, TEXT, 1, [0, 2])
    ids = torch.tensor([tiny_lm.tokenizer(TEXT)["input_ids"]])
    with torch.no_grad():
        own = tiny_lm.model(input_ids=ids).logits[0, -1].softmax(-1).numpy()
    np.testing.assert_allclose(probs, own, atol=1e-7)
    assert probs.sum() == pytest.approx(1.0, abs=1e-5) and knocked.sum() == pytest.approx(1.0, abs=1e-5)
    assert np.abs(probs - knocked).sum() > 1e-4
    np.testing.assert_array_equal(tiny_lm.final_hidden(TEXT), own_last_hidden_state(tiny_lm, TEXT))


def test_next_token_view_explains_why_it_is_unavailable(minilm: PretrainedModel, tiny_lm: PretrainedModel) -> None:
    assert "encoder model" in minilm.next_token_unavailable
    bare = PretrainedModel(AutoModel.from_config(tiny_lm.model.config), tiny_lm.tokenizer, name="bare-gpt2")
    assert "without its language-model head" in bare.next_token_unavailable
    with pytest.raises(ValueError, match="AutoModelForCausalLM"):
        bare.next_token_probs(TEXT)


def test_a_saved_causal_lm_loads_with_its_head_and_gives_next_token_probabilities(tmp_path) -> None:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from mha_viz.pretrained import bundled_model_dir, load_model

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=101,
                               eos_token_id=102)).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(tmp_path)
    model = load_model(tmp_path)
    assert model.next_token_unavailable is None
    probs = model.next_token_probs("the cat sat")
    assert probs.shape == (30522,) and abs(float(probs.sum()) - 1) < 1e-4
