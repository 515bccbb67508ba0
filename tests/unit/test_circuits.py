"""Circuits of one head (mha_viz.analysis.circuits): singular values, token-level QK and OV circuits and copying
scores, against direct products, numpy's SVD and eigenvalues, and known answers (the bundled induction model's
induction heads copy; a head built to copy, or to write minus what it reads)."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoModel, AutoTokenizer, BertConfig

import mha_viz
from mha_viz.analysis import circuits, copying_scores, detect_heads, ov_circuit, qk_circuit, singular_values
from mha_viz.config import MHAConfig
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.sources import configurable_trace
from mha_viz.weights import HeadWeights, head_weights
from tests.tiny_causal import random_model, tiny_causal


@pytest.fixture(scope="module")
def induction():
    return mha_viz.load_model(mha_viz.INDUCTION_MODEL)


@pytest.fixture(scope="module")
def weights(induction):
    return induction.head_weights()


def test_the_induction_heads_copy_and_copy_more_than_the_other_heads(induction, weights) -> None:
    found = detect_heads(induction, seed=0)["induction"] > 0.5  # [L, H]: every head of layer 1 (the model's README)
    assert found[1].all() and not found[0].any()
    c = copying_scores(weights)
    assert c.scores.shape == (2, 4) and c.circuit == "W_E W_OV W_U"
    assert c.scores[found].min() > 0.9 and c.scores[found].min() > c.scores[~found].max()
    assert c.positivity[found].min() > 0.99  # Elhage et al.'s sum(λ)/sum(|λ|): nearly all the weight is positive
    for head in range(4):  # each induction head's full OV circuit raises, for almost every token, its own logit most
        assert ov_circuit(weights, 1, head).top_is_self > 0.95


def hand_built(sign: float, V: int = 7, d: int = 5) -> HeadWeights:
    """A head whose OV circuit maps each token to itself (sign 1) or to minus itself (sign -1), in random bases:
    W_V W_O = sign * I and W_U = pinv(W_E), so W_E W_OV W_U = sign * W_E pinv(W_E), a projection onto W_E's span."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    W_E = rng.normal(size=(V, d)).astype(np.float32)
    one = lambda a: a[None, None].astype(np.float32)
    return HeadWeights(W_Q=one(rng.normal(size=(d, d))), W_K=one(rng.normal(size=(d, d))), W_V=one(Q),
                       W_O=one(sign * Q.T), W_E=W_E, W_U=np.linalg.pinv(W_E).astype(np.float32))


def test_a_head_that_writes_each_token_back_copies_and_one_that_writes_minus_it_does_not() -> None:
    assert copying_scores(hand_built(1.0)).scores[0, 0] == pytest.approx(1.0)
    assert copying_scores(hand_built(-1.0)).scores[0, 0] == pytest.approx(0.0)
    assert copying_scores(hand_built(-1.0)).positivity[0, 0] == pytest.approx(-1.0)
    assert ov_circuit(hand_built(1.0), 0, 0).top_is_self == 1.0
    assert ov_circuit(hand_built(-1.0), 0, 0).top_is_self == 0.0


def test_the_small_matrix_has_the_full_circuits_nonzero_eigenvalues(weights) -> None:
    c = copying_scores(weights)
    d_v = weights.W_V.shape[-1]
    for layer, head in ((0, 2), (1, 1)):
        full = weights.W_E.astype(np.float64) @ weights.W_OV(layer, head) @ weights.W_U.astype(np.float64)  # [V, V]
        eig = np.linalg.eigvals(full)
        big = eig[np.abs(eig) > 1e-6 * np.abs(eig).max()]
        assert len(big) == d_v < full.shape[0]  # rank d_v: the other V - d_v eigenvalues are zero
        small = c.eigenvalues[layer, head]
        distance = np.abs(small[:, None] - big[None]).min(axis=1)  # each small eigenvalue is one of the full ones
        assert distance.max() < 1e-6 * np.abs(big).max()
        assert c.scores[layer, head] == pytest.approx((big.real > 0).mean())
        assert c.positivity[layer, head] == pytest.approx(big.sum().real / np.abs(big).sum())


@pytest.mark.parametrize("where", ["tiny gpt2", "configurable d_k > d_model / h"])
def test_singular_values_are_numpys_svd_of_the_product_with_at_most_d_head_nonzero(where) -> None:
    if where == "tiny gpt2":
        w = tiny_causal("gpt2").head_weights()  # d_model 32, d_head 8
    else:
        w = head_weights(configurable_trace("a b c", MHAConfig(d_model=16, num_heads=2, d_k=12, d_v=3)))
    for layer in range(w.num_layers):
        for head in range(w.num_heads):
            sv = singular_values(w, layer, head)
            for ours, product, d_head in ((sv.qk, w.W_QK(layer, head), sv.d_k), (sv.ov, w.W_OV(layer, head), sv.d_v)):
                theirs = np.linalg.svd(product, compute_uv=False)
                assert len(ours) == min(d_head, w.d_model)
                np.testing.assert_allclose(ours, theirs[:len(ours)], rtol=1e-6, atol=1e-9)
                assert np.all(theirs[len(ours):] < 1e-9 * theirs[0])  # the rest of the product's are zero


def test_the_full_tables_are_the_products(weights) -> None:
    E = weights.W_E.astype(np.float64)
    qk = qk_circuit(weights, 1, 3)
    assert qk.full and qk.values.shape == (169, 169) and qk.row_labels[:2] == ("<bos>", "<unk>")
    np.testing.assert_allclose(qk.values, E @ weights.W_QK(1, 3) @ E.T, rtol=1e-4, atol=1e-3)
    ov = ov_circuit(weights, 1, 3)
    np.testing.assert_allclose(ov.values, E @ weights.W_OV(1, 3) @ weights.W_U, rtol=1e-4, atol=1e-3)
    assert ov.formula == "W_E W_OV W_U" and "LayerNorm folded" in ov.convention and "unscaled" in ov.convention


def test_the_positional_part_of_the_previous_token_head_looks_one_back_in_a_causal_model(weights) -> None:
    pos = qk_circuit(weights, 0, 2, positional=True, causal=True)
    assert pos.values.shape == (128, 128) and np.isnan(pos.values[3, 4]) and not np.isnan(pos.values[4, 3])
    assert (pos.top_columns[1:] == np.arange(127)).mean() > 0.95  # layer 0, head 2: the previous-token head


def test_the_peak_offset_says_where_the_positional_rows_peak(weights) -> None:
    """Layer 0, head 2 peaks one back in 126 of the 127 rows that have a previous position; head 3 on itself."""
    prev = qk_circuit(weights, 0, 2, positional=True, causal=True).peak_offset()
    assert (prev.offset, prev.rows, prev.where) == (-1, 127, "the previous position")
    assert prev.share == pytest.approx(126 / 127)
    own = qk_circuit(weights, 0, 3, positional=True, causal=True).peak_offset()
    assert own.offset == 0 and own.rows == 128 and own.share > 0.95 and own.where == "their own position"


def test_the_peak_offset_counts_only_rows_that_can_reach_it() -> None:
    """A hand-made 4 x 4 table whose rows peak two ahead (the last two rows cannot, and peak elsewhere)."""
    values = np.full((4, 4), -1.0, dtype=np.float32)
    values[[0, 1], [2, 3]] = 5.0
    values[[2, 3], [0, 0]] = 5.0
    vocab = tuple("0123")
    table = circuits.TokenCircuit("QK positions", 0, 0, "W_pos W_QK W_pos^T", values, np.arange(4), np.arange(4),
                                  True, vocab, vocab, "query position", "key position", "", "")
    peak = table.peak_offset()
    assert (peak.offset, peak.share, peak.rows, peak.where) == (2, 1.0, 2, "2 positions ahead")
    with pytest.raises(ValueError, match="different kinds"):
        circuits.TokenCircuit("OV", 0, 0, "", values, np.arange(4), np.arange(4), True, vocab, tuple("abcd"),
                              "", "", "", "").peak_offset()


def test_top_k_rows_of_a_sample_equal_the_full_tables_rows(weights, monkeypatch) -> None:
    monkeypatch.setattr(circuits, "CHUNK", 50)  # several chunks of columns: the running top-k across them
    for full, top in ((ov_circuit(weights, 1, 0), ov_circuit(weights, 1, 0, top_k=5, sample=20, seed=3)),
                      (qk_circuit(weights, 0, 2, positional=True, causal=True),
                       qk_circuit(weights, 0, 2, positional=True, causal=True, top_k=4, sample=30, seed=1))):
        assert not top.full and top.values.shape == (len(top.rows), top.values.shape[1])
        assert "seed" in top.sampling and len(np.unique(top.rows)) == len(top.rows)
        for i, row in enumerate(top.rows):
            values = full.values[row]
            order = np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable")[:top.values.shape[1]]
            np.testing.assert_array_equal(top.columns[i][~np.isnan(top.values[i])], order[~np.isnan(values[order])])
            np.testing.assert_allclose(top.values[i], values[order], rtol=1e-5, equal_nan=True)


def test_a_large_vocabulary_is_sampled_and_never_tabled_whole() -> None:
    w = tiny_causal("gpt2").head_weights()  # the MiniLM vocabulary: 30522 tokens
    ov = ov_circuit(w, 1, 2)
    assert not ov.full and ov.values.shape == (circuits.DEFAULT_SAMPLE, circuits.DEFAULT_TOP_K)
    assert ov.sampling.startswith("64 of 30522 tokens") and "seed 0" in ov.sampling
    direct = w.W_E[ov.rows].astype(np.float64) @ w.W_OV(1, 2) @ w.W_U.astype(np.float64)  # [64, V]: the sampled rows
    np.testing.assert_array_equal(ov.columns, np.argsort(-direct, axis=1)[:, :10])
    again = ov_circuit(w, 1, 2, seed=1)
    assert not np.array_equal(again.rows, ov.rows) and np.array_equal(ov_circuit(w, 1, 2).rows, ov.rows)
    picked = qk_circuit(w, 0, 0, rows=[101, 102], top_k=3)
    assert list(picked.row_labels) == ["[CLS]", "[SEP]"] and picked.values.shape == (2, 3)
    c = copying_scores(w)  # d_v x d_v eigenvalues, whatever the vocabulary
    assert c.scores.shape == (2, 4) and np.all((0 <= c.scores) & (c.scores <= 1))


def test_an_encoder_has_qk_circuits_and_an_ov_circuit_read_against_its_embeddings() -> None:
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    bert = PretrainedModel(random_model(AutoModel, config), AutoTokenizer.from_pretrained(bundled_model_dir()))
    w = bert.head_weights()
    assert w.W_U is None and w.W_pos.shape == (64, 32)
    assert singular_values(w, 1, 0).qk.shape == (8,)
    assert qk_circuit(w, 0, 1, rows=[5], top_k=2).values.shape == (1, 2)
    assert qk_circuit(w, 0, 1, positional=True).full
    ov = ov_circuit(w, 0, 1, rows=[5, 6], top_k=2)
    assert ov.formula == "W_E W_OV W_E^T" and "no unembedding" in ov.convention
    c = copying_scores(w)
    assert c.circuit == "W_E W_OV W_E^T" and "no unembedding" in c.note


def test_weights_without_embeddings_say_what_they_lack() -> None:
    w = head_weights(configurable_trace("a b c", MHAConfig(d_model=16, num_heads=2)))
    with pytest.raises(ValueError, match="no token embeddings"):
        ov_circuit(w, 0, 0)
    with pytest.raises(ValueError, match="no token embeddings"):
        qk_circuit(w, 0, 0)
    with pytest.raises(ValueError, match="no learned position table"):
        qk_circuit(w, 0, 0, positional=True)
    with pytest.raises(IndexError, match="no head 2 in layer 0"):
        singular_values(w, 0, 2)
    c = copying_scores(w)
    assert c.circuit == "W_OV" and c.scores.shape == (1, 2)
    for head in range(2):  # W_OV in the residual basis: its own nonzero eigenvalues
        eig = np.linalg.eigvals(w.W_OV(0, head))
        big = eig[np.abs(eig) > 1e-6 * np.abs(eig).max()]
        assert c.scores[0, head] == pytest.approx((big.real > 0).mean())


def test_the_figures_draw_the_numbers_on_integer_token_axes_in_float32(weights) -> None:
    import json

    from mha_viz.figures.circuits import copying_figure, singular_values_figure, token_table_figure, top_k_figure
    from tests.plotly_json import heatmaps, z_matrix

    c = copying_scores(weights)
    fig = json.loads(copying_figure(c.scores, title="copying", width=390).to_json())
    np.testing.assert_allclose(z_matrix(heatmaps(fig)[0]), c.scores, rtol=1e-6)
    sv = singular_values(weights, 1, 0)
    bars = [t for t in json.loads(singular_values_figure(sv.qk, sv.ov).to_json())["data"] if t["type"] == "bar"]
    assert len(bars) == 2 and bars[0]["y"]["dtype"] == "f4"
    ov = ov_circuit(weights, 1, 0)
    table = json.loads(token_table_figure(ov.values, ov.row_labels, ov.column_vocab, row_axis=ov.row_axis,
                                          column_axis=ov.column_axis, colour="logit", width=1000).to_json())
    (heat,) = heatmaps(table)
    assert heat["z"]["dtype"] == "f4" and z_matrix(heat).shape == (169, 169)
    assert table["layout"]["xaxis"]["tickmode"] == "array" and "fox" in table["layout"]["yaxis"]["ticktext"]
    top = ov_circuit(weights, 1, 0, top_k=3, sample=5)
    small = json.loads(top_k_figure(top.values, top.columns, top.row_labels, top.column_vocab, row_axis="source",
                                    column_axis="output token", colour="logit", width=390).to_json())
    (heat,) = heatmaps(small)
    assert np.array(heat["text"]).shape == (5, 3) and heat["text"][0][0] == top.column_vocab[top.columns[0, 0]]
    assert small["layout"]["yaxis"]["ticktext"] == list(top.row_labels)


def test_a_table_on_a_phone_labels_no_closer_than_a_label_needs(weights) -> None:
    """The induction model's 169 x 169 OV table at 358 px: labelled rows 14 px apart or more, slanted columns 17."""
    from mha_viz.figures.circuits import token_table_figure

    ov = ov_circuit(weights, 1, 0)
    fig = token_table_figure(ov.values, ov.row_labels, ov.column_vocab, row_axis=ov.row_axis,
                             column_axis=ov.column_axis, colour="logit", width=358)
    plot_height = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b - 20  # 20: under the last row
    plot_width = 358 - 160  # the room the figure leaves the columns (row labels and colour bar aside)
    rows, columns = fig.layout.yaxis.tickvals, fig.layout.xaxis.tickvals
    assert (rows[1] - rows[0]) * plot_height / 169 >= 14 and (columns[1] - columns[0]) * plot_width / 169 >= 17


def test_a_top_k_cell_prints_no_more_than_it_holds_and_the_hover_says_the_rank_the_axis_shows(weights) -> None:
    """Ten ranks on a phone: no token wider than its cell (the hover still names it in full); the hover's rank is
    the axis's (1 = largest), not the column's index."""
    from mha_viz.figures.circuits import top_k_figure
    from mha_viz.figures.common import CHAR_EM

    top = ov_circuit(weights, 1, 0, top_k=10, sample=5)
    for width in (358, 1100):
        fig = top_k_figure(top.values, top.columns, top.row_labels, top.column_vocab, row_axis="source",
                           column_axis="output token", colour="logit", width=width)
        (heat,) = fig.data
        cell_px = (width - 220) / 10
        assert all(len(t) * CHAR_EM * heat.textfont.size <= cell_px for row in heat.text for t in row)
        ranks = [[d[1] for d in row] for row in heat.customdata]
        assert all(r == [int(t) for t in fig.layout.xaxis.ticktext] for r in ranks)
        assert "%{customdata[1]}" in heat.hovertemplate and "%{x}" not in heat.hovertemplate
        assert [d[0] for d in heat.customdata[0]] == [top.column_vocab[c] for c in top.columns[0]]
    assert any(t for row in heat.text for t in row)  # the wide figure prints the tokens
