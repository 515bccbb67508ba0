"""PretrainedModel.generate on tiny random GPT-2 and LLaMA (grouped-query) models: greedy equals transformers'
generate token for token, each step's attention row is the model's own (KV cache against a full forward pass),
sampling is reproducible and filtered as documented."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertConfig

from mha_viz.pretrained import Generation, PretrainedModel, bundled_model_dir
from mha_viz.pretrained.generation import sampling_distribution
from mha_viz.sampling import Sampling
from tests.tiny_causal import NAMES, build_lm, tiny_causal

PROMPT = "the quick brown fox jumps over the lazy dog"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    return {name: tiny_causal(name) for name in NAMES}


def full_logits(m: PretrainedModel, g: Generation) -> torch.Tensor:
    """Logits (T, V) of one forward pass without a cache over the prompt and every generated token."""
    ids = torch.tensor([[*g.prompt_ids, *g.token_ids]])
    with torch.no_grad():
        return m.model(input_ids=ids, use_cache=False).logits[0]


def transformers_greedy(m: PretrainedModel, prompt_ids: tuple[int, ...], n: int) -> tuple[int, ...]:
    ids = torch.tensor([list(prompt_ids)])
    out = m.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
    return tuple(out[0, len(prompt_ids) :].tolist())


@pytest.mark.parametrize("name", NAMES)
def test_greedy_generation_equals_transformers_generate(models, name):
    m = models[name]
    g = m.generate(PROMPT, 12)
    assert g.prompt_ids == tuple(m.tokenizer(PROMPT)["input_ids"]) and g.prompt_tokens == tuple(m.tokens(PROMPT))
    assert g.token_ids == transformers_greedy(m, g.prompt_ids, 12)
    assert len(g.steps) == 12 and g.stop_reason == "max_new_tokens" and len(set(g.token_ids)) > 3
    assert g.tokens == tuple(m.tokenizer.convert_ids_to_tokens(list(g.token_ids)))
    assert g.text == m.tokenizer.decode(list(g.token_ids), skip_special_tokens=True)
    logits = full_logits(m, g)  # (T, V)
    P = len(g.prompt_ids)
    for k, step in enumerate(g.steps):
        assert step.token_id == int(np.argmax(step.probs))
        np.testing.assert_allclose(step.probs, logits[P - 1 + k].softmax(-1).numpy(), atol=1e-6)  # plain softmax


@pytest.mark.parametrize("name", NAMES)
def test_each_steps_attention_is_the_models_own_row_for_the_predicting_query(models, name):
    m = models[name]
    g = m.generate(PROMPT, 10)
    P = len(g.prompt_ids)
    full = m.attentions_for_ids([*g.prompt_ids, *g.token_ids])  # (L, H, T, T), no KV cache
    for k, step in enumerate(g.steps):
        assert step.attentions.shape == (2, 4, P + k) and len(g.key_tokens(k)) == P + k
        np.testing.assert_allclose(step.attentions, full[:, :, P - 1 + k, : P + k], atol=1e-5)
        np.testing.assert_allclose(step.attentions.sum(-1), 1.0, atol=1e-5)
        assert np.abs(step.attentions - 1 / (P + k)).max() > 0.05  # a real pattern, not uniform
    assert g.key_tokens(3) == (*g.prompt_tokens, *g.tokens[:3])


@pytest.mark.parametrize("name", NAMES)
def test_an_end_of_sequence_token_stops_generation_as_in_transformers(models, name):
    m = models[name]
    free = m.generate(PROMPT, 8)
    eos = free.token_ids[2]
    stop = free.token_ids.index(eos)  # its first occurrence
    config = m.model.generation_config
    before = config.eos_token_id
    config.eos_token_id = eos
    try:
        g = m.generate(PROMPT, 8)
        assert g.stop_reason == "eos" and g.token_ids == free.token_ids[: stop + 1]
        assert g.token_ids == transformers_greedy(m, g.prompt_ids, 8)
    finally:
        config.eos_token_id = before


@pytest.mark.parametrize("name", NAMES)
def test_sampling_is_reproducible_from_the_seed_and_draws_from_the_reported_distribution(models, name):
    m = models[name]
    a, b = (m.generate(PROMPT, 10, Sampling(1.3, seed=7)) for _ in range(2))
    assert a.token_ids == b.token_ids
    assert all(np.array_equal(s.probs, t.probs) for s, t in zip(a.steps, b.steps, strict=True))
    others = [m.generate(PROMPT, 10, Sampling(1.3, seed=seed)).token_ids for seed in (8, 9, 10)]
    assert any(ids != a.token_ids for ids in others)
    logits = full_logits(m, a)
    P = len(a.prompt_ids)
    for k, step in enumerate(a.steps):
        assert abs(float(step.probs.sum()) - 1) < 1e-5 and step.probs[step.token_id] > 0
        np.testing.assert_allclose(step.probs, (logits[P - 1 + k] / 1.3).softmax(-1).numpy(), atol=1e-6)
    assert a.sampling == Sampling(temperature=1.3, top_k=None, top_p=None, seed=7)


@pytest.mark.parametrize("name", NAMES)
def test_top_k_keeps_the_k_largest_logits(models, name):
    m = models[name]
    g = m.generate(PROMPT, 8, Sampling(2.0, top_k=5, seed=1))
    logits = full_logits(m, g)
    P = len(g.prompt_ids)
    for k, step in enumerate(g.steps):
        kept = np.flatnonzero(step.probs > 0)
        largest = np.argsort(-logits[P - 1 + k].numpy())[:5]
        assert set(kept) == set(largest) and step.token_id in kept
        expected = (logits[P - 1 + k] / 2.0).softmax(-1).numpy()[kept]
        np.testing.assert_allclose(step.probs[kept], expected / expected.sum(), rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_top_p_keeps_the_smallest_set_that_reaches_p(models, name):
    m = models[name]
    g = m.generate(PROMPT, 8, Sampling(3.0, top_p=0.3, seed=2))
    logits = full_logits(m, g)
    P = len(g.prompt_ids)
    for k, step in enumerate(g.steps):
        p = (logits[P - 1 + k].double() / 3.0).softmax(-1).numpy()  # (V,)
        order = np.argsort(-p, kind="stable")
        size = int(np.searchsorted(np.cumsum(p[order]), 0.3)) + 1  # the fewest largest entries with sum >= 0.3
        kept = np.flatnonzero(step.probs > 0)
        # The model computes in float32: entries that tie with the cut to float32 rounding may swap, so the
        # properties are checked with that tolerance: as many as the fewest largest entries, they are largest,
        # they reach top_p, and without the smallest of them they do not.
        tol = 1e-6
        dropped = np.setdiff1d(np.arange(p.size), kept)
        assert len(kept) == size > 1 and step.token_id in kept
        assert p[kept].min() >= p[dropped].max() - tol
        assert p[kept].sum() >= 0.3 - tol and p[kept].sum() - p[kept].min() < 0.3 + tol
        np.testing.assert_allclose(step.probs[kept], p[kept] / p[kept].sum(), rtol=1e-4)


def test_sampling_distribution_known_answers():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = p.log()

    def dist(**kwargs) -> np.ndarray:
        return sampling_distribution(logits, Sampling(**kwargs)).numpy()

    np.testing.assert_allclose(dist(temperature=1.0), p, atol=1e-6)
    np.testing.assert_allclose(dist(temperature=0.0, top_k=1, top_p=0.1), p, atol=1e-6)  # greedy: filters unused
    np.testing.assert_allclose(dist(temperature=2.0), p.sqrt() / p.sqrt().sum(), atol=1e-6)  # p^(1/T), renormalised
    np.testing.assert_allclose(dist(temperature=1.0, top_k=2), [0.625, 0.375, 0, 0], atol=1e-6)
    np.testing.assert_allclose(dist(temperature=1.0, top_p=0.5), [1, 0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(dist(temperature=1.0, top_p=0.79), [0.625, 0.375, 0, 0], atol=1e-6)
    np.testing.assert_allclose(dist(temperature=1.0, top_p=0.81), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], atol=1e-6)
    np.testing.assert_allclose(dist(temperature=1.0, top_p=1.0), p, atol=1e-6)
    # top_k first, then top_p on the renormalised distribution: [0.526, 0.316, 0.158] keeps 2 for p = 0.8
    np.testing.assert_allclose(dist(temperature=1.0, top_k=3, top_p=0.8), [0.625, 0.375, 0, 0], atol=1e-6)
    with pytest.raises(ValueError, match="too small"):
        sampling_distribution(torch.tensor([1.0, 2.0]), Sampling(temperature=1e-45))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"max_new_tokens": True}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": "1"}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"seed": "a"}, "seed"),
    ],
)
def test_bad_arguments_are_refused(models, kwargs, message):
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        models["gpt2"].generate(PROMPT, args.pop("max_new_tokens"), Sampling(**args))


def test_settings_other_than_a_sampling_are_refused_clearly(models):
    with pytest.raises(TypeError, match="Sampling"):
        models["gpt2"].generate(PROMPT, 3, 0.7)  # a temperature where the Sampling goes


def test_numpy_numbers_are_accepted_like_python_numbers(models):
    m = models["gpt2"]
    a = m.generate(PROMPT, np.int64(4), Sampling(np.float32(0.5), top_k=np.int64(7), top_p=0.9, seed=np.int64(3)))
    b = m.generate(PROMPT, 4, Sampling(0.5, top_k=7, top_p=0.9, seed=3))
    assert a.token_ids == b.token_ids and a.sampling == b.sampling and type(a.sampling.seed) is int
    assert hash(a.sampling) == hash(b.sampling)  # equal settings, one cache key


def test_the_apps_settings_spell_off_as_zero_top_k_and_one_top_p():
    assert Sampling.from_settings(0.0, 5, 0.3, 2) == Sampling(seed=2)  # greedy: no filter
    assert Sampling.from_settings(1.5, 0, 1.0, 3) == Sampling(1.5, seed=3)
    assert Sampling.from_settings(1.5, 5, 0.9, 3) == Sampling(1.5, top_k=5, top_p=0.9, seed=3)
    assert Sampling().describe() == "greedy: the most likely token"
    assert Sampling(1.5, top_k=5, seed=3).describe() == "sampled at temperature 1.5, top-k 5, seed 3"


def test_the_prompt_and_the_new_tokens_must_fit_the_positions(models):
    m = models["gpt2"]  # 64 positions
    P = len(m.tokens(PROMPT))
    assert len(m.generate(PROMPT, 64 - P).steps) == 64 - P  # exactly full
    with pytest.raises(ValueError, match=f"at most {64 - P} new tokens fit"):
        m.generate(PROMPT, 64 - P + 1)
    with pytest.raises(ValueError, match="no room for new tokens"):
        m.generate("word " * 70, 1)


@pytest.mark.parametrize("name", NAMES)
def test_a_prompt_longer_than_max_tokens_is_read_into_the_cache_in_chunks(name):
    """With max_length past max_tokens (the views' window, 16 here), a 3x longer prompt goes into the KV cache 16
    positions at a time, without weights: the greedy tokens are still transformers' own and every step's row is the
    model's own last row of a full forward pass; by default, or past the positions, the prompt is refused."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    m = PretrainedModel(build_lm(name), tokenizer, name=f"tiny-{name}", max_tokens=16)  # 64 positions
    prompt = " ".join([PROMPT] * 4)
    P = len(m.tokenizer(prompt)["input_ids"])
    assert 32 < P < 56
    fed = []  # each call's keyword arguments
    hook = m.model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(kwargs), with_kwargs=True)
    try:
        g = m.generate(prompt, 8, max_length=64)
    finally:
        hook.remove()
    chunks = [k["input_ids"].shape[1] for k in fed if not k.get("output_attentions")]
    assert chunks == [16, 16, P - 1 - 32]  # the prompt but its last token, 16 at a time, without weights
    assert g.token_ids == transformers_greedy(m, g.prompt_ids, 8)
    ids = torch.tensor([[*g.prompt_ids, *g.token_ids]])
    with torch.no_grad():
        own = m.model(input_ids=ids, use_cache=False, output_attentions=True).attentions  # per layer (1, H, T, T)
    for k, step in enumerate(g.steps):
        assert step.attentions.shape == (2, 4, P + k)
        np.testing.assert_allclose(step.attentions, np.stack([a[0, :, P - 1 + k, :P + k] for a in own]), atol=1e-5)
    with pytest.raises(ValueError, match=f"the prompt has {P} tokens and tiny-{name} reads at most 16"):
        m.generate(prompt, 8)
    with pytest.raises(ValueError, match="max_length 65 is past tiny-.*'s 64 positions"):
        m.generate(prompt, 8, max_length=65)


def test_a_model_without_a_kv_cache_generates_within_its_window():
    """A hybrid's mixers read the whole sequence at every step: max_length past max_tokens is refused, saying why."""
    from tests.tiny_causal import random_causal_lm
    from tests.unit.test_mixers import HYBRID

    m = PretrainedModel(random_causal_lm(HYBRID["mamba2"][1]()), AutoTokenizer.from_pretrained(bundled_model_dir()),
                        name="tiny-mamba2", max_tokens=16)
    with pytest.raises(ValueError, match="reads the whole sequence again at every step .* within 16 tokens, not 40"):
        m.generate(PROMPT, 4, max_length=40)
    assert len(m.generate(PROMPT, 2, max_length=16).steps) == 2


def test_generation_needs_a_causal_language_model():
    torch.manual_seed(0)
    bert = PretrainedModel(
        AutoModel.from_config(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                         intermediate_size=64), attn_implementation="eager"),
        AutoTokenizer.from_pretrained(bundled_model_dir()),
    )
    with pytest.raises(ValueError, match="generation is unavailable: .*encoder model"):
        bert.generate(PROMPT, 3)


def stop_after(calls: int) -> tuple[list[int], object]:
    """A should_stop that answers False calls times, then True; and the list of its answers' count."""
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > calls

    return asked, should_stop


@pytest.mark.parametrize("name", NAMES)
def test_should_stop_ends_a_generation_between_tokens_keeping_the_tokens_written(models, name):
    m = models[name]
    full = m.generate(PROMPT, 12)
    asked, should_stop = stop_after(2)
    cut = m.generate(PROMPT, 12, should_stop=should_stop)
    assert cut.stop_reason == "stopped" and cut.token_ids == full.token_ids[:3] and len(asked) == 3
    for mine, whole in zip(cut.steps, full.steps):  # the same steps, the same distributions and attention rows
        np.testing.assert_array_equal(mine.probs, whole.probs)
        np.testing.assert_array_equal(mine.attentions, whole.attentions)
    first = m.generate(PROMPT, 12, should_stop=lambda: True)
    assert first.token_ids == full.token_ids[:1] and first.stop_reason == "stopped"  # one token always written
    assert m.generate(PROMPT, 12, should_stop=lambda: False).token_ids == full.token_ids
