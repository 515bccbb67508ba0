"""mha_viz.analysis on hand-built weights and the configurable model: known answers and exact identities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_viz import MultiHeadAttention, embed_text
from mha_viz.analysis import (
    attention_rollout,
    cluster_order,
    compare_traces,
    concat_vs_sum,
    contribution_norms,
    head_divergence,
    head_stats,
    js_divergence,
    knocked_output,
    knockout_effect,
    knockout_ranking,
    norm_attention,
    redundancy,
    special_positions,
    trace_head_stats,
)
from mha_viz.trace import AttentionTrace

TEXT = "the cat sat on the mat because it was warm and the dog was not"  # 15 tokens


def layer(d_model: int = 16, heads: int = 4, seed: int = 0) -> MultiHeadAttention:
    """A seeded layer with a non-zero output bias (the default init zeroes it)."""
    mha = MultiHeadAttention(d_model, heads, seed=seed, dtype=torch.float64)
    with torch.no_grad():
        mha.b_O.copy_(torch.randn(mha.b_O.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return mha


def run(mha: MultiHeadAttention, text: str = TEXT, **kwargs) -> AttentionTrace:
    tokens, x = embed_text(text, mha.config.d_model, seed=1)
    return mha(x.double(), query_tokens=tokens, **kwargs)


def uniform_and_identity(T: int = 5) -> np.ndarray:
    return np.stack([np.full((T, T), 1 / T), np.eye(T)])  # (2, T, T)


# head statistics


def test_uniform_attention_has_entropy_one_and_identity_zero() -> None:
    stats = head_stats(uniform_and_identity(5), special=[0, 4])
    np.testing.assert_allclose(stats.entropy, [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(stats.confidence, [0.2, 1.0])
    np.testing.assert_allclose(stats.first, [0.2, 0.2])  # identity: only row 0 looks at token 0
    np.testing.assert_allclose(stats.special, [0.4, 0.4])
    np.testing.assert_allclose(stats.previous, [0.2, 0.0])
    np.testing.assert_allclose(stats.same, [0.2, 1.0])
    np.testing.assert_allclose(stats.next, [0.2, 0.0])
    # sum_{i,j} |i - j| over a 5 x 5 grid = 2 * (1*4 + 2*3 + 3*2 + 4*1) = 40, averaged over 5 rows of weight 1/5
    np.testing.assert_allclose(stats.distance, [40 / 25, 0.0])


def test_causal_rows_are_normalised_by_their_own_visible_count() -> None:
    T = 6
    visible = np.tri(T, dtype=bool)
    causal_uniform = visible / visible.sum(1, keepdims=True)  # row i: 1/(i+1) on keys 0..i
    stats = head_stats(causal_uniform[None], visible=visible)
    np.testing.assert_allclose(stats.entropy, [1.0])  # row 0 sees one key: skipped, not counted as 0 or 1
    assert head_stats(causal_uniform[None]).entropy[0] < 1  # normalised by log T instead, it falls short
    assert np.isnan(head_stats(np.ones((1, 3, 1))).entropy[0])  # every row sees one key: no entropy to report
    np.testing.assert_allclose(stats.next, [0.0])


def test_cross_attention_has_no_positional_statistics_and_special_tokens_match_by_string() -> None:
    stats = head_stats(np.full((1, 2, 4), 0.25), special=special_positions(["[CLS]", "a", "b", "[SEP]"], {"[SEP]", 1}),
                       positional=False)
    np.testing.assert_allclose(stats.special, [0.5])
    assert all(np.isnan(getattr(stats, n)[0]) for n in ("previous", "same", "next", "distance"))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 7), st.integers(0, 2**16), st.booleans())
def test_statistics_of_a_traced_layer_stay_in_range(heads: int, T: int, seed: int, causal: bool) -> None:
    mha = MultiHeadAttention(4 * heads, heads, seed=seed)
    trace = mha(torch.randn(T, 4 * heads, generator=torch.Generator().manual_seed(seed)), causal=causal)
    stats = trace_head_stats(trace, special=[0])
    for name in ("entropy", "confidence", "first", "special", "previous", "same", "next"):
        values = getattr(stats, name)
        assert values.shape == (heads,)
        finite = values[np.isfinite(values)]
        assert ((finite >= -1e-6) & (finite <= 1 + 1e-6)).all(), name
    np.testing.assert_allclose(stats.first, stats.special)
    assert (stats.distance >= 0).all() and (stats.distance <= T - 1).all()
    if T == 1:  # no row sees two keys, none has a previous or next token
        assert np.isnan(stats.entropy).all() and np.isnan(stats.previous).all() and np.isnan(stats.next).all()
    elif causal:
        np.testing.assert_allclose(stats.next, 0.0, atol=1e-6)


# redundancy


def test_identical_heads_have_zero_divergence_and_are_flagged() -> None:
    mha = layer(16, 4)
    with torch.no_grad():  # head 3 attends exactly like head 1
        mha.W_Q[3] = mha.W_Q[1]
        mha.W_K[3] = mha.W_K[1]
        mha.b_Q[3] = mha.b_Q[1]
        mha.b_K[3] = mha.b_K[1]
    result = redundancy(run(mha).weights, threshold=1e-6)
    assert result.divergence[1, 3] == pytest.approx(0.0, abs=1e-12)
    assert result.duplicates == ((1, 3),)
    order = list(result.order)
    assert sorted(order) == [0, 1, 2, 3] and abs(order.index(1) - order.index(3)) == 1  # clustered side by side
    D = result.divergence
    np.testing.assert_allclose(D, D.T)
    assert (np.diag(D) == 0).all() and (D[~np.eye(4, dtype=bool) & (D > 0)] > 0).all()


def test_jensen_shannon_divergence_is_zero_for_equal_and_one_bit_for_disjoint_rows() -> None:
    assert js_divergence([0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0]) == 0
    assert js_divergence([0.5, 0.5, 0, 0], [0, 0, 0.3, 0.7]) == pytest.approx(1.0)
    np.testing.assert_allclose(head_divergence(uniform_and_identity(4)), head_divergence(uniform_and_identity(4)[::-1]))


def test_cluster_order_puts_two_groups_side_by_side() -> None:
    close = {(0, 2), (1, 3)}  # heads 0 and 2 alike, 1 and 3 alike
    D = np.array([[0.0 if a == b else 0.01 if (min(a, b), max(a, b)) in close else 0.9 for b in range(4)]
                  for a in range(4)])
    order = list(cluster_order(D))
    assert abs(order.index(0) - order.index(2)) == 1 and abs(order.index(1) - order.index(3)) == 1


# contribution and knockout


def test_a_head_with_a_zero_output_block_contributes_nothing() -> None:
    mha = layer(16, 4)
    d_v = mha.config.d_v
    with torch.no_grad():
        mha.W_O[:, 2 * d_v:3 * d_v] = 0
    trace = run(mha)
    assert (contribution_norms(trace)[2] == 0).all()
    assert (norm_attention(trace)[2] == 0).all()
    assert knockout_effect(trace, [2]) == 0
    ranking = knockout_ranking(trace)
    assert ranking[2] == 0 and (np.delete(ranking, 2) > 0).all()


def test_norm_attention_equals_the_direct_per_pair_computation() -> None:
    trace = run(layer(12, 3, seed=4), "one two three four five")
    blocks = trace.W_O_blocks()  # (H, d_out, d_v)
    H, T, S = trace.weights.shape
    direct = np.array([[[np.linalg.norm(trace.weights[h, i, j] * trace.values[h, j] @ blocks[h].T)
                         for j in range(S)] for i in range(T)] for h in range(H)])
    np.testing.assert_allclose(norm_attention(trace), direct, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(contribution_norms(trace),
                               np.linalg.norm(np.einsum("hts,hso->hto", trace.weights, trace.values @ blocks.transpose(0, 2, 1)), axis=-1))


def test_knocking_out_all_heads_leaves_only_the_bias() -> None:
    mha = layer(16, 4)
    trace = run(mha)
    T = len(trace.query_tokens)
    np.testing.assert_allclose(knocked_output(trace, range(4)), np.broadcast_to(trace.b_O, (T, 16)))
    recomputed = run(mha, head_mask=torch.zeros(4, dtype=torch.float64))
    np.testing.assert_allclose(recomputed.output, np.broadcast_to(trace.b_O, (T, 16)))
    assert knockout_effect(trace, []) == 0


@pytest.mark.parametrize("off", [[0], [1, 3], [0, 1, 2]])
def test_knockout_from_the_trace_equals_recomputing_with_a_head_mask(off: list[int]) -> None:
    mha = layer(16, 4, seed=2)
    trace = run(mha, causal=True)
    mask = torch.ones(4, dtype=torch.float64)
    mask[off] = 0
    real = run(mha, causal=True, head_mask=mask).output
    np.testing.assert_allclose(knocked_output(trace, off), real, atol=1e-12)
    expected = np.linalg.norm(trace.output - real) / np.linalg.norm(trace.output)
    assert knockout_effect(trace, off) == pytest.approx(expected)
    np.testing.assert_allclose(knockout_effect(trace, off, axis=-1),
                               np.linalg.norm(trace.output - real, axis=-1) / np.linalg.norm(trace.output, axis=-1))


# rollout


def test_rollout_of_identity_layers_is_the_identity() -> None:
    T = 5
    eye = np.broadcast_to(np.eye(T), (3, 4, T, T))  # (L, H, T, T)
    np.testing.assert_allclose(attention_rollout(eye), np.broadcast_to(np.eye(T), (3, T, T)))


def test_rollout_multiplies_the_residual_averaged_layers() -> None:
    rng = np.random.default_rng(0)
    w = rng.random((2, 3, 4, 4))
    w /= w.sum(-1, keepdims=True)
    A = 0.5 * w.mean(1) + 0.5 * np.eye(4)  # (L, T, T)
    R = attention_rollout(w)
    np.testing.assert_allclose(R[0], A[0])
    np.testing.assert_allclose(R[1], A[1] @ A[0])
    np.testing.assert_allclose(R.sum(-1), 1.0)
    with pytest.raises(ValueError, match="self-attention"):
        attention_rollout(w[..., :3])


# comparison


def test_comparison_subtracts_only_when_the_tokens_line_up() -> None:
    a = run(layer(seed=0), "the cat sat")
    b = run(layer(seed=1), "the cat sat")  # two models, one sentence
    same = compare_traces(a, b)
    assert same.reason is None
    np.testing.assert_allclose(same.difference, b.weights - a.weights)
    other = compare_traces(a, run(layer(seed=0), "the dog sat"))
    assert other.difference is None and "position 1" in other.reason and "'cat' vs 'dog'" in other.reason
    assert compare_traces(a, run(layer(seed=0), "the dog sat"), by_position=True).difference is not None
    shorter = compare_traces(a, run(layer(seed=0), "the cat"))
    assert shorter.difference is None and "3 vs 2" in shorter.reason
    heads = compare_traces(a, run(layer(16, 2), "the cat sat"))
    assert heads.difference is None and "number of heads" in heads.reason


# concat versus sum


def test_concat_vs_sum_is_exact_when_all_output_blocks_are_equal() -> None:
    mha = layer(16, 4)
    d_v = mha.config.d_v
    with torch.no_grad():
        mha.W_O.copy_(mha.W_O[:, :d_v].repeat(1, 4))  # every head through the same block
    result = concat_vs_sum(run(mha))
    assert result.fitted_error < 1e-10 and result.mean_error < 1e-10 and result.concat_error < 1e-12
    assert (result.concat_dims, result.sum_dims) == (16, 4)


def test_concat_vs_sum_loses_something_with_distinct_blocks() -> None:
    trace = run(layer(16, 4))  # T = 15 tokens > d_v = 4: the fit is overdetermined
    result = concat_vs_sum(trace)
    assert not result.fits_any
    assert result.concat_error < 1e-12
    assert result.fitted_error > 0.01 and result.mean_error > 0.01
    assert result.fitted_per_token.shape == result.mean_per_token.shape == (15,)
    assert concat_vs_sum(run(layer(16, 2), "a b c")).fits_any  # 2 heads x 3 tokens <= d_v = 8: any terms fit


def test_concat_vs_sum_tells_on_a_sentence_shorter_than_a_head_is_wide() -> None:
    """The app's default layer (h = 4, d_model = 64: d_v = 16) on its 13-token sentence: the shared W' is fitted to
    the 4 x 13 head terms, so it is determined, and summing loses a clear share of the output."""
    from mha_viz import MHAConfig
    from mha_viz.params import DEFAULTS
    from mha_viz.sources import configurable_trace

    trace = configurable_trace(DEFAULTS.text, MHAConfig(DEFAULTS.d_model, DEFAULTS.h), seed=DEFAULTS.seed)
    assert len(trace.query_tokens) <= trace.d_v < trace.num_heads * len(trace.query_tokens)
    result = concat_vs_sum(trace)
    assert not result.fits_any and result.concat_error < 1e-5
    assert result.fitted_error > 0.1 and result.mean_error > 0.1



def test_the_divergence_of_heads_refuses_signed_weights() -> None:
    """Differential attention's weights are a difference of two maps: not distributions, so no JSD (a clear error,
    not NaN)."""
    from mha_viz.analysis import head_divergence

    w = np.full((2, 3, 3), 1 / 3)
    w[1, 0] = [0.6, 0.5, -0.1]
    with pytest.raises(ValueError, match="signed"):
        head_divergence(w)
