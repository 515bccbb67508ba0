"""What One head shows beyond Q, K, V: the projection matrices and why one score has its value.

W_Q/W_K/W_V in a trace must be the model's own projections (x W + b equals the projection module on
the same input, head by head), and score_terms must add up to the trace's score in every architecture
(plain scaling, T5's position bias, rotary positions, masks).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mha_viz
from mha_viz.analysis import score_terms, without_tokens
from mha_viz.sources import ConfigurableSource, configurable_trace
from tests.unit.test_pretrained_tiny import ADAPTED, TEXT, models, texts, tokenizer  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("one_thread")


def heads_of(module: torch.nn.Module, x: torch.Tensor, n: int, which: int | None = None) -> np.ndarray:
    """A projection module's output on x (T, d_in), split into n heads: (n, T, d); which: q/k/v of a fused c_attn."""
    with torch.no_grad():
        y = module(x[None])[0]  # (T, n*d) or (T, 3*n*d) for GPT-2's c_attn
    if which is not None:
        y = y.chunk(3, dim=-1)[which]
    return y.unflatten(-1, (n, -1)).transpose(0, 1).numpy()  # (n, T, d)


def test_configurable_trace_holds_its_projections():
    cfg = mha_viz.MHAConfig(32, 4, d_k=5, d_v=7, d_out=9)
    t = configurable_trace("the cat sat on the mat", cfg, seed=3, causal=True)
    x = mha_viz.embed_tokens(list(t.query_tokens), 32, seed=3).numpy()  # (T, 32)
    assert t.W_Q.shape == (4, 32, 5) and t.W_K.shape == (4, 32, 5) and t.W_V.shape == (4, 32, 7)
    np.testing.assert_allclose(np.einsum("td,hdk->htk", x, t.W_Q) + t.b_Q[:, None], t.queries, atol=1e-5)
    np.testing.assert_allclose(np.einsum("td,hdk->htk", x, t.W_K) + t.b_K[:, None], t.keys, atol=1e-5)
    np.testing.assert_allclose(np.einsum("td,hdk->htk", x, t.W_V) + t.b_V[:, None], t.values, atol=1e-5)
    assert t.scale == pytest.approx(5**-0.5)


@pytest.mark.parametrize("name", ADAPTED)
def test_pretrained_projections_are_the_models_own(models, name):  # noqa: F811 - fixture
    """x W_Q[h] + b_Q[h] equals the real projection module's head-h output on the same input."""
    m = models[name]
    for part in m.parts:
        site = m.adapter.site(part, 0)
        t = m.trace(TEXT, 0, part=part, **texts(m))
        d_in = t.W_Q.shape[1]
        x = torch.randn(5, d_in, generator=torch.Generator().manual_seed(0))  # (5, d_in)
        fused = site.q is site.k  # GPT-2: one c_attn for q, k and v
        for i, (W, b, module, n) in enumerate(((t.W_Q, t.b_Q, site.q, site.num_heads),
                                               (t.W_K, t.b_K, site.k, site.num_kv_heads),
                                               (t.W_V, t.b_V, site.v, site.num_kv_heads))):
            real = heads_of(module, x, n, i if fused else None)  # (n, 5, d)
            real = real[list(t.kv_heads)] if t.kv_heads is not None and i else real  # K/V heads per query head
            ours = np.einsum("td,hdk->htk", x.numpy(), W) + (0.0 if b is None else b[:, None])
            np.testing.assert_allclose(ours, real, atol=1e-5, err_msg=f"{name} {part} {'QKV'[i]}")


@pytest.mark.parametrize("name", ADAPTED)
def test_score_terms_add_up_to_every_score(models, name):  # noqa: F811 - fixture
    m = models[name]
    for part in m.parts:
        t = m.trace(TEXT, 1, part=part, **texts(m))
        H, T, S = t.weights.shape
        for h, i, j in ((0, T - 1, 0), (H - 1, T // 2, S // 2), (H // 2, T - 1, S - 1)):
            terms = score_terms(t, h, i, j)
            assert terms.dot == pytest.approx(float(terms.products.sum()))
            if np.isfinite(terms.score):
                assert terms.scale * terms.dot + terms.other == pytest.approx(terms.score, abs=1e-4)
            assert terms.weight == pytest.approx(float(t.weights[h, i, j]))
        if name == "t5" and part != "cross":  # T5 adds a learned position bias and does not scale
            assert t.scale == 1.0
            assert max(abs(score_terms(t, 0, i, j).other) for i in range(T) for j in range(S)) > 1e-3
        if name in ("bert", "gpt2", "llama") and part != "cross":  # no bias: q . k / sqrt(d_k) is the whole score
            visible = [(i, j) for i in range(T) for j in range(S) if np.isfinite(t.scores[0, i, j])]
            assert max(abs(score_terms(t, 0, i, j).other) for i, j in visible) < 1e-4


def test_score_terms_of_a_masked_pair_and_bad_positions():
    t = configurable_trace("one two three four", mha_viz.MHAConfig(16, 2), causal=True)
    masked = score_terms(t, 1, 0, 3)
    assert masked.score == -np.inf and masked.other == -np.inf and masked.weight == 0.0
    with pytest.raises(ValueError, match="outside"):
        score_terms(t, 2, 0, 0)


def test_hidden_tokens_keep_the_models_own_numbers_at_the_shown_positions():
    t = configurable_trace("[CLS] the cat sat [SEP]", mha_viz.MHAConfig(16, 2), causal=False)
    hidden = {"[", "]", "CLS", "SEP"}
    shown = without_tokens(t, hidden)
    keep = [i for i, tok in enumerate(t.query_tokens) if tok not in hidden]
    assert shown.query_tokens == ("the", "cat", "sat")
    np.testing.assert_allclose(shown.weights.sum(-1), 1.0, atol=1e-6)  # renormalised over what is shown
    np.testing.assert_array_equal(shown.queries, t.queries[:, keep])
    np.testing.assert_array_equal(shown.scores, t.scores[:, keep][:, :, keep])
    np.testing.assert_array_equal(shown.concat, t.concat[keep])
    assert max(shown.check_wo_path().values()) <= shown.rounding_tolerance()  # rows of the real W_O path
    assert not shown.missing and shown.meta["hidden_tokens"] == sorted(hidden)


def test_rounding_tolerance_tells_rounding_from_a_real_difference():
    t = configurable_trace("the animal did not cross the street", mha_viz.MHAConfig(64, 4))
    assert max(t.check_wo_path().values()) <= t.rounding_tolerance() < 1e-4
    broken = ConfigurableSource("x", mha_viz.MHAConfig(8, 2)).trace(0)
    object.__setattr__(broken, "output", broken.output + 1e-3)  # one part in a thousand: not rounding
    assert max(broken.check_wo_path().values()) > broken.rounding_tolerance()


def test_coverage_counts_unknown_and_single_character_tokens():
    model = mha_viz.load_model()
    assert model.coverage("The cat sat on the mat").unknown == 0
    chinese = model.coverage("我喜欢学习机器学习")
    assert chinese.unknown_share > 0.5 and chinese.tokens == 9
    arabic = model.coverage("مرحبا بالعالم")
    assert arabic.unknown == 0 and arabic.character_share == 1.0
