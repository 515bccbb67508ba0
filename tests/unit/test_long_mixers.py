"""Long traces of linear-attention and state-space layers (mha_viz.pretrained.long_mixer): any block of a mixer's
matrix on demand from its factors (mha_viz.mixers.Factors), exactly the whole matrix's block; and every layer of every
hybrid family's long trace equal to the model's own maps, its overview and statistics those of the whole matrix, its
self-check (M @ values against the kernel's own output) passing, and failing for a wrong mixer."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
import torch

from mha_viz import mixers
from mha_viz.checks import TraceCheckError, failures
from mha_viz.mixers import DecayedLinear, DeltaRule, SelectiveScan, ShortConv, StateSpace
from mha_viz.pretrained import long_pass
from mha_viz.pretrained.adapter import ADAPTERS
from mha_viz.pretrained.architectures import adapter_for
from mha_viz.pretrained.long_mixer import LongMixerLayer
from tests.unit.test_mixers import HYBRID, _qwen_without_decay, models  # noqa: F401 (models: the fixture)

pytestmark = pytest.mark.unit

BLOCKS = [(slice(0, 300), slice(0, 300)), (slice(130, 259), slice(7, 140)), (slice(5, 70), slice(100, 200)),
          (slice(200, 300), slice(150, 290)), (slice(299, 300), slice(None)), (slice(64, 128), slice(63, 64))]


def factors() -> dict[str, object]:
    torch.manual_seed(0)
    H, T, d = 3, 300, 8
    q, k = torch.nn.functional.normalize(torch.randn(2, H, T, d), dim=-1)
    return {
        "gated delta rule": DeltaRule(q * d**-0.5, k, -torch.rand(H, T) * 0.2, torch.rand(H, T)),
        "delta rule, a decay per key dim": DeltaRule(q * d**-0.5, k, -torch.rand(H, T, d) * 0.2, torch.rand(H, T)),
        "decayed linear": DecayedLinear(q, k, -torch.rand(H, T) * 0.1),
        "state space": StateSpace(torch.randn(H, T, 4), torch.randn(H, T, 4), torch.rand(H, T), -torch.rand(H),
                                  torch.randn(H)),
        "state space, three heads reading one group": StateSpace(torch.randn(1, T, 4), torch.randn(1, T, 4),
                                                                 torch.rand(H, T), -torch.rand(H), torch.randn(H)),
        "short convolution": ShortConv(torch.randn(H, T), torch.randn(H, T), torch.randn(H, 4)),
    }


def test_heads_that_share_a_group_read_its_c_and_b():
    """Mamba-2's C and B are kept once per group: the matrix is the one with them repeated for each head."""
    f = factors()["state space, three heads reading one group"]
    repeated = StateSpace(f.C.expand(3, -1, -1), f.B.expand(3, -1, -1), f.dt, f.A, f.D)
    assert torch.equal(f.matrix(), repeated.matrix()) and f.num_heads == 3 and f.length == 300


def fast_decays() -> dict[str, object]:
    """Factors that decay by about e^-1.5 a token: over 300 tokens their decays pass float32's subnormal range."""
    torch.manual_seed(0)
    H, T, d = 3, 300, 8
    q, k = torch.nn.functional.normalize(torch.randn(2, H, T, d), dim=-1)
    fast = -1.0 - torch.rand(H, T)  # log decay a token
    return {
        "gated delta rule": DeltaRule(q * d**-0.5, k, fast, torch.rand(H, T)),
        "delta rule, a decay per key dim": DeltaRule(q * d**-0.5, k, fast[..., None].expand(H, T, d), torch.rand(H, T)),
        "decayed linear": DecayedLinear(q, k, fast),
        "state space": StateSpace(torch.randn(H, T, 4), torch.randn(H, T, 4), -fast, -torch.ones(H), torch.randn(H)),
        "selective scan": SelectiveScan(torch.randn(T, 4), torch.randn(T, 4), -fast, -torch.ones(H, 4)),
    }


@pytest.mark.parametrize("name", list(fast_decays()))
def test_fast_decays_leave_no_subnormal_entry(name):
    """A mixer's matrix holds no subnormal float32 (which a CPU multiplies about a hundred times slower): decays under
    e^MIN_EXP are 0. Without that floor the same factors give thousands of them."""
    f = fast_decays()[name]
    tiny = torch.finfo(torch.float32).tiny
    assert not ((f.matrix().abs() < tiny) & (f.matrix() != 0)).any()
    with mock.patch.object(mixers, "MIN_EXP", -math.inf):
        M = f.matrix()
    assert ((M.abs() < tiny) & (M != 0)).sum() > 100


@pytest.mark.parametrize("name", list(factors()))
def test_any_block_on_demand_is_the_whole_matrixs_block(name):
    """A block from the factors (a delta rule: its recurrence from the block's first key, only its columns carried)
    equals the same block of the whole matrix, for blocks on, below, above and across the diagonal; so do the row
    chunks the overview is swept from."""
    f = factors()[name]
    M = f.matrix()  # (H, T, T)
    assert torch.equal(M.triu(1), torch.zeros_like(M)) and (M < 0).any()  # causal, signed
    for rows, cols in BLOCKS:
        block = f.block(rows, cols, [2, 0])
        reference = M[[2, 0]][:, rows, cols]
        assert block.shape == reference.shape
        assert (block - reference).abs().max() <= 1e-6 * M.abs().max(), (rows, cols)
    for cells in (3 * 300 * 50, 300 * 72):  # a delta rule's heads all at once, then one at a time
        swept = torch.zeros_like(M)
        for heads, r0, rows in f.row_chunks(cells=cells):
            swept[heads, r0:r0 + rows.shape[1], : rows.shape[2]] = rows
        assert (swept - M).abs().max() <= 1e-6 * M.abs().max()


def pooled(M: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The overview of M (H, T, T) by blocks of b x b: the signed value of the largest |M| and the mean of M."""
    H, T, _ = M.shape
    n = -(-T // b)
    padded = np.zeros((H, n * b, n * b))
    padded[:, :T, :T] = M
    blocks = padded.reshape(H, n, b, n, b).transpose(0, 1, 3, 2, 4).reshape(H, n, n, b * b)
    largest = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]
    counts = np.minimum(b, T - np.arange(n) * b)
    return largest, blocks.sum(-1) / (counts[:, None] * counts[None, :])


@pytest.mark.parametrize("name", list(HYBRID))
def test_a_hybrids_long_trace_is_its_own_maps_on_every_layer(models, name):  # noqa: F811 (the fixture)
    """Every layer of the long trace (softmax layers through the long kernel, mixer layers from their factors) equals
    the model's own maps; a mixer layer's overview and row statistics are those of its whole matrix, and its
    self-check compares M @ values with the kernel's own output."""
    model, T = models[name], 123  # the tiny models have 128 positions
    ids = [int(i) for i in np.random.default_rng(0).integers(1000, 2000, T)]
    long = long_pass.trace_model(model, ids=ids, overview_side=25)  # blocks of 5 x 5 positions, the last of 3
    own = model.attentions_for_ids(ids)  # (L, H, T, T)
    kinds = list(model.layer_kinds())
    assert [layer.kind for layer in long.layers.values()] == kinds
    for i, layer in long.layers.items():
        H = layer.num_heads
        M = own[i, :H]
        assert np.abs(layer.weights(slice(None), slice(None)) - M).max() <= 1e-5 * np.abs(M).max()
        assert np.abs(layer.block(H - 1, 100, 3, 40) - M[H - 1, 100:140, 3:43]).max() <= 1e-5 * np.abs(M).max()
        if layer.kind == "softmax":
            continue
        assert isinstance(layer, LongMixerLayer) and layer.block_rows == layer.block_cols == 5
        largest, mean = pooled(M.astype(np.float64), layer.block_rows)
        assert np.abs(layer.overview_max - largest).max() <= 1e-5 * np.abs(M).max()
        assert np.abs(layer.overview_mean - mean).max() <= 1e-5 * np.abs(M).max()
        size = np.abs(M.astype(np.float64))
        p = size / size.sum(-1, keepdims=True)  # (H, T, T) each row of |M| normalised
        back = np.maximum(np.arange(T)[:, None] - np.arange(T)[None, :], 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            entropy = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
        np.testing.assert_allclose(layer.stat("distance"), (p * back).sum(-1).mean(-1), rtol=1e-4)
        np.testing.assert_allclose(layer.stat("entropy"), entropy.mean(-1), rtol=1e-4)
        np.testing.assert_allclose(layer.stat("first"), p[..., 0].mean(-1), rtol=1e-4, atol=1e-7)
        check = layer.meta["check"]
        if model.adapter.site("decoder", i).core is not None:
            assert list(check) == ["mixing matrix @ values vs the mixer's own output"] and not failures(layer)
    stats = long.stats()
    assert stats.distance.shape == (len(kinds), max(layer.num_heads for layer in long.layers.values()))
    assert long.nbytes < T * T * len(kinds) * 8 * 4  # less than the [H, T, T] maps would be


def test_a_wrong_mixer_fails_the_long_traces_self_check(models):  # noqa: F811 (the fixture)
    """The Gated DeltaNet without its decay: its matrix times its values is no longer the kernel's output, and the
    long trace's self-check says so (strict: it raises)."""
    model = models["qwen3_next"]
    ids = [int(i) for i in np.random.default_rng(1).integers(1000, 2000, 100)]
    model.adapter = type("NoDecay", (ADAPTERS["qwen3_next"],), {"mixing": _qwen_without_decay})(model.model)
    try:
        with pytest.raises(TraceCheckError, match="mixing matrix @ values"):
            model.long_trace(ids=ids)
    finally:
        model.adapter = adapter_for(model.model)
    assert not any(failures(layer) for layer in model.long_trace(ids=ids).layers.values())


def test_a_long_traces_budget_counts_the_mixers_factors(models):  # noqa: F811 (the fixture)
    """What a mixer layer keeps per token (its factors and row statistics) is counted before any work: a budget
    below the trace's own size is refused, one above it is not."""
    model = models["bamba"]
    ids = [int(i) for i in np.random.default_rng(2).integers(1000, 2000, 120)]
    long = model.long_trace(ids=ids)
    with pytest.raises(ValueError, match="more than the"):
        model.long_trace(ids=ids, max_bytes=long.nbytes - 1)
    assert model.long_trace(ids=ids, max_bytes=2 * long.nbytes).num_tokens == 120
