"""Head detectors: known answers on hand-built attention patterns, the repeated-token probe, and the model path.
(The trained heads of the bundled causal model are tested in test_induction_model.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BartConfig

from mha_viz.analysis import KINDS, detect_heads, detector_scores, head_scores, repeated_tokens
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import tiny_causal

N, START = 5, 1  # [start] + A + A with len(A) = 5
T = START + 2 * N

pytestmark = pytest.mark.usefixtures("one_thread")


def pattern(key_of_query: dict[int, int]) -> np.ndarray:
    """[T, T] one-hot rows: query i attends key_of_query[i] (the token itself where not given)."""
    a = np.zeros((T, T))
    for i in range(T):
        a[i, key_of_query.get(i, i)] = 1.0
    return a


SECOND_HALF = range(START + N, T)
PREVIOUS = pattern({i: i - 1 for i in range(1, T)})
DUPLICATE = pattern({i: i - N for i in SECOND_HALF})
INDUCTION = pattern({i: i - N + 1 for i in SECOND_HALF})
UNIFORM = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # causal: a[i, j] = 1 / (i + 1) for j <= i


def test_exact_patterns_score_one_for_their_own_kind_and_zero_for_the_others():
    heads = np.stack([PREVIOUS, DUPLICATE, INDUCTION])[None]  # (1 layer, 3 heads, T, T)
    scores = np.stack([detector_scores(heads, kind, n=N, start=START) for kind in KINDS])  # (kind, 1, 3)
    np.testing.assert_array_equal(scores[:, 0], np.eye(3))


def test_uniform_causal_attention_scores_the_mean_of_one_over_the_visible_keys():
    expected_previous = np.mean([1 / (i + 1) for i in range(START + 1, T)])
    expected_second_half = np.mean([1 / (i + 1) for i in SECOND_HALF])
    assert detector_scores(UNIFORM, "previous", n=N, start=START) == pytest.approx(expected_previous)
    assert detector_scores(UNIFORM, "duplicate", n=N, start=START) == pytest.approx(expected_second_half)
    assert detector_scores(UNIFORM, "induction", n=N, start=START) == pytest.approx(expected_second_half)


def test_a_head_that_splits_its_attention_scores_the_share():
    mixed = 0.25 * PREVIOUS + 0.75 * INDUCTION
    assert detector_scores(mixed, "induction", n=N, start=START) == pytest.approx(0.75)
    # previous counts queries 2 .. T-1 (both keys in A + A); INDUCTION puts 0 on i-1 there
    assert detector_scores(mixed, "previous", n=N, start=START) == pytest.approx(0.25)


def test_the_queries_start_after_the_start_token():
    shifted = pattern({i: i - 1 for i in range(START + 2, T)})  # the first query of A + A does not look back
    assert detector_scores(shifted, "previous", n=N, start=START) == pytest.approx((2 * N - 2) / (2 * N - 1))
    assert detector_scores(shifted, "previous", n=N - 1, start=START + 1) == pytest.approx(1.0)  # T > start + 2n


@pytest.mark.parametrize(
    ("attentions", "kwargs", "message"),
    [
        (PREVIOUS, {"kind": "copying"}, "kind must be"),
        (PREVIOUS[:, :-1], {"kind": "previous"}, r"\[\.\.\., T, T\]"),
        (PREVIOUS, {"kind": "previous", "n": 6}, "start \\+ 2n <= T"),
        (PREVIOUS, {"kind": "previous", "n": 1}, "n >= 2"),
    ],
)
def test_bad_detector_arguments_are_refused(attentions, kwargs, message):
    kwargs = {"n": N, "start": START, **kwargs}
    with pytest.raises(ValueError, match=message):
        detector_scores(attentions, kwargs.pop("kind"), **kwargs)


@pytest.fixture(scope="module")
def tiny() -> PretrainedModel:
    return tiny_causal("gpt2")


def test_the_probe_is_a_seeded_repeat_of_distinct_ordinary_tokens(tiny):
    ids, start, n = repeated_tokens(tiny, seed=3, length=20, batch=6)
    assert ids.shape == (6, 1 + 40) and (start, n) == (1, 20)
    assert np.all(ids[:, 0] == tiny.tokenizer.cls_token_id)  # MiniLM's tokenizer has no BOS: its CLS starts
    A = ids[:, 1:21]
    assert np.array_equal(ids[:, 21:], A) and all(len(set(row)) == 20 for row in A)
    assert not np.isin(A, tiny.tokenizer.all_special_ids).any() and A.max() < 30522
    assert np.array_equal(repeated_tokens(tiny, seed=3, length=20, batch=6)[0], ids)
    assert not np.array_equal(repeated_tokens(tiny, seed=4, length=20, batch=6)[0], ids)
    assert repeated_tokens(tiny)[2] == 31  # (64 positions - 1) // 2 < the default length 32


def test_head_scores_average_the_models_own_attention_over_the_probe(tiny):
    ids, start, n = repeated_tokens(tiny, seed=0)
    own = []
    for row in ids:
        with torch.no_grad():
            out = tiny.model(input_ids=torch.tensor([row.tolist()]), output_attentions=True, use_cache=False)
        own.append(np.stack([a[0].numpy() for a in out.attentions]))  # (L, H, T, T)
    scores = detect_heads(tiny)
    for kind in KINDS:
        expected = detector_scores(np.stack(own), kind, n=n, start=start).mean(0)  # (L, H)
        np.testing.assert_allclose(scores[kind], expected, atol=1e-6)
        np.testing.assert_array_equal(head_scores(tiny, kind), scores[kind])
        assert scores[kind].shape == (2, 4) and np.all((scores[kind] >= 0) & (scores[kind] <= 1))
    with pytest.raises(ValueError, match="kind must be"):
        head_scores(tiny, "copying")


def test_attentions_for_ids_are_the_attentions_of_the_same_text(tiny):
    text = "the cat sat on the mat"
    np.testing.assert_array_equal(tiny.attentions_for_ids(tiny.tokenizer(text)["input_ids"]), tiny.attentions(text))
    with pytest.raises(ValueError, match="token ids must be"):
        tiny.attentions_for_ids([1, 30522])
    with pytest.raises(ValueError, match="need 1 ... 64 token ids"):
        tiny.attentions_for_ids([])


def test_an_encoder_decoder_is_refused():
    torch.manual_seed(0)
    config = BartConfig(vocab_size=30522, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                        pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=102,
                        forced_eos_token_id=102)
    bart = PretrainedModel(AutoModel.from_config(config, attn_implementation="eager"),
                           AutoTokenizer.from_pretrained(bundled_model_dir()))
    with pytest.raises(ValueError, match="encoder-decoder"):
        head_scores(bart, "induction")


def test_should_stop_ends_the_probe_between_sequences_and_the_scores_average_those_run(tiny):
    ids, start, n = repeated_tokens(tiny, seed=0)
    asked: list[int] = []
    scores = detect_heads(tiny, should_stop=lambda: asked.append(1) or len(asked) > 2)  # stops before the 4th
    assert (scores.sequences, scores.asked, len(asked)) == (3, 8, 3)
    own = np.stack([tiny.attentions_for_ids(row.tolist()) for row in ids[:3]])  # (3, L, H, T, T)
    for kind in KINDS:
        np.testing.assert_allclose(scores[kind], detector_scores(own, kind, n=n, start=start).mean(0), atol=1e-6)
    whole = detect_heads(tiny)
    assert (whole.sequences, whole.asked) == (8, 8)
    assert detect_heads(tiny, should_stop=lambda: True).sequences == 1  # one sequence always run
