"""Multi-head latent attention (mha_viz.variants.latent) against transformers' DeepseekV3Attention, and the facts
the MLA view shows: K and V rebuilt from the latent, concat @ W_O^T = output, and the absorption of W_UK."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

from mha_viz.attention import apply_rotary
from mha_viz.config import MHAConfig
from mha_viz.variants import LayerVariant, describe, variant_layer
from mha_viz.variants.latent import LatentAttention, absorbed_scores, rotary_table

D, H, N, DV = 32, 4, 6, 5  # d_model, heads, position-free q/k dims (d_k), value dims


def reference(q_latent: int, kv_latent: int, rope_dim: int, seed: int = 0) -> DeepseekV3Attention:
    config = DeepseekV3Config(hidden_size=D, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=q_latent or None,
                              kv_lora_rank=kv_latent, qk_rope_head_dim=rope_dim, qk_nope_head_dim=N, v_head_dim=DV,
                              attention_bias=True, rope_interleave=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config._attn_implementation = "eager"
    attention = DeepseekV3Attention(config, layer_idx=0).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in attention.parameters():  # norms and biases too, so that copying them matters
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return attention


def copy_into(ours: LatentAttention, ref: DeepseekV3Attention) -> None:
    """The reference's weights in our per-head layout: queries [rope | nope], W[h] (d_in, d)."""
    n, r = ref.qk_nope_head_dim, ref.qk_rope_head_dim

    def queries(weight: torch.Tensor) -> torch.Tensor:  # (H*(n + r), d_in) rows [nope | rope] -> (H, d_in, r + n)
        w = weight.view(H, n + r, -1)
        return torch.cat((w[:, n:], w[:, :n]), dim=1).transpose(1, 2)

    with torch.no_grad():
        if ref.q_lora_rank is None:
            ours.W_Q.copy_(queries(ref.q_proj.weight))
        else:
            ours.W_DQ.copy_(ref.q_a_proj.weight.T)
            ours.b_DQ.copy_(ref.q_a_proj.bias)
            ours.q_norm.copy_(ref.q_a_layernorm.weight)
            ours.W_UQ.copy_(queries(ref.q_b_proj.weight))
        ours.W_DKV.copy_(ref.kv_a_proj_with_mqa.weight.T)
        ours.b_DKV.copy_(ref.kv_a_proj_with_mqa.bias)
        ours.kv_norm.copy_(ref.kv_a_layernorm.weight)
        kv = ref.kv_b_proj.weight.view(H, n + DV, -1)  # (H, n + d_v, d_c)
        ours.W_UK.copy_(kv[:, :n].transpose(1, 2))
        ours.W_UV.copy_(kv[:, n:].transpose(1, 2))
        ours.W_O.copy_(ref.o_proj.weight)
        ours.b_O.copy_(ref.o_proj.bias)


def pair(q_latent: int, kv_latent: int, rope_dim: int) -> tuple[LatentAttention, DeepseekV3Attention]:
    ref = reference(q_latent, kv_latent, rope_dim)
    ours = variant_layer(MHAConfig(D, H, d_k=N, d_v=DV), LayerVariant("mla", kv_latent=kv_latent, q_latent=q_latent,
                                                                       rope_dim=rope_dim), seed=1)
    copy_into(ours, ref)
    return ours, ref


def run_reference(ref: DeepseekV3Attention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    T = x.shape[0]
    cos, sin = DeepseekV3RotaryEmbedding(ref.config)(x[None], torch.arange(T)[None])  # (1, T, r) each
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]  # (1, 1, T, T) causal
    with torch.no_grad():
        out, weights = ref(x[None], position_embeddings=(cos, sin), attention_mask=mask)
    return out[0], weights[0]


@pytest.mark.parametrize("q_latent,kv_latent,rope_dim", [(0, 8, 4), (12, 8, 4), (12, 3, 2), (0, 1, 8)])
def test_equal_to_deepseek_v3_attention(q_latent: int, kv_latent: int, rope_dim: int) -> None:
    ours, ref = pair(q_latent, kv_latent, rope_dim)
    x = torch.randn(7, D, generator=torch.Generator().manual_seed(3))
    out, weights = run_reference(ref, x)
    trace = ours(x, causal=True)
    assert trace.weights.shape == (H, 7, 7) and trace.queries.shape == (H, 7, rope_dim + N)
    np.testing.assert_allclose(trace.weights, weights.numpy(), atol=1e-5)
    np.testing.assert_allclose(trace.output, out.numpy(), atol=1e-4)
    assert trace.scale == pytest.approx(ref.scaling)
    assert np.triu(trace.weights, 1).max() == 0  # causal
    tensors = ours.attend(torch.stack((x, 2 * x)), causal=True)  # batched, as training calls it
    np.testing.assert_allclose(tensors.output[0].detach().numpy(), out.numpy(), atol=1e-4)


def test_latent_through_the_up_projections_gives_the_traced_keys_and_values() -> None:
    ours, _ = pair(12, 8, 4)
    trace = ours(torch.randn(6, D, generator=torch.Generator().manual_seed(4)), causal=True)
    latent, k_rope, W_UK, W_UV = (trace.meta[k] for k in ("kv_latent", "k_rope", "W_UK", "W_UV"))
    assert latent.shape == (6, 8) and k_rope.shape == (6, 4) and W_UK.shape == (H, 8, N) and W_UV.shape == (H, 8, DV)
    np.testing.assert_allclose(np.einsum("sl,hln->hsn", latent, W_UK), trace.keys[..., 4:], atol=1e-5)
    np.testing.assert_allclose(np.einsum("sl,hlv->hsv", latent, W_UV), trace.values, atol=1e-5)
    for h in range(H):  # one rotary key for every head
        np.testing.assert_array_equal(trace.keys[h, :, :4], k_rope)
    unit = latent / ours.kv_norm.detach().numpy()  # the latent is RMS-normalised, then scaled by the norm's weight
    np.testing.assert_allclose(np.sqrt((unit**2).mean(-1)), 1.0, rtol=1e-3)
    np.testing.assert_allclose(trace.concat @ trace.W_O.T + trace.b_O, trace.output, atol=1e-5)
    assert trace.W_K is None and trace.W_V is None and "RMSNorm" in trace.meta["unavailable"]


def test_absorbed_w_uk_gives_the_position_free_scores_but_not_through_a_rotation() -> None:
    r = 4
    ours, _ = pair(0, 8, r)
    x = torch.randn(6, D, generator=torch.Generator().manual_seed(5))
    trace = ours(x, causal=False)
    latent, W_UK = trace.meta["kv_latent"], trace.meta["W_UK"]
    q_rope, q_nope, k_rope = trace.queries[..., :r], trace.queries[..., r:], trace.keys[..., :r]
    absorbed = np.einsum("htn,hln,sl->hts", q_nope, W_UK, latent)  # (q W_UK^T) . latent: K never built
    nope = trace.scores / trace.scale - q_rope @ k_rope.transpose(0, 2, 1)  # the scores' position-free part
    np.testing.assert_allclose(absorbed, nope, atol=1e-4)
    np.testing.assert_allclose(absorbed_scores(trace), absorbed, atol=1e-5)  # what the MLA view shows
    # The rotary part: rotated q_i . k_j depends on i - j, so a fixed matrix applied before the rotation
    # (as W_UK^T is absorbed into the query) does not give it; it does only where i = j (the same turn).
    with torch.no_grad():
        q0 = ours.queries(x)[..., :r].numpy()  # (H, T, r) before rotation
        k0 = ours.latent(x)[1].numpy()  # (S, r) before rotation
    unrotated = q0 @ k0.T  # (H, T, S)
    rotated = q_rope @ k_rope.transpose(0, 2, 1)  # (H, T, S)
    diagonal = np.eye(6, dtype=bool)
    np.testing.assert_allclose(rotated[:, diagonal], unrotated[:, diagonal], atol=1e-5)
    assert np.abs(rotated[:, ~diagonal] - unrotated[:, ~diagonal]).max() > 1e-2


def test_cross_attention_turns_queries_and_keys_by_their_own_positions() -> None:
    ours, _ = pair(12, 8, 4)
    gen = torch.Generator().manual_seed(6)
    x, c = torch.randn(3, D, generator=gen), torch.randn(5, D, generator=gen)
    trace = ours(x, c)
    assert trace.weights.shape == (H, 3, 5) and trace.cross and trace.meta["kv_latent"].shape == (5, 8)
    with torch.no_grad():
        q = apply_rotary(ours.queries(x), *rotary_table(3, 4))
        k_rope = apply_rotary(ours.latent(c)[1], *rotary_table(5, 4))
    np.testing.assert_allclose(trace.queries, q.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.meta["k_rope"], k_rope.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.weights.sum(-1), 1.0, atol=1e-6)


def test_no_rotary_part_and_seeded_and_described() -> None:
    cfg, variant = MHAConfig(16, 2), LayerVariant("mla", kv_latent=3, rope_dim=0)
    a, b = variant_layer(cfg, variant, seed=7), variant_layer(cfg, variant, seed=7)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(8))
    ta, tb = a(x), b(x)
    np.testing.assert_array_equal(ta.output, tb.output)
    assert ta.meta["k_rope"].shape == (4, 0) and ta.queries.shape == (2, 4, 8)
    text = describe(cfg, variant)
    assert "latent of 3 numbers" in text and "3 + 0 = 3 numbers per token" in text
    assert "h·(d_k + r + d_v) = 2·(8 + 0 + 8) = 32" in text


@pytest.mark.parametrize("q_latent, bias, names", [
    (0, False, ["W_Q", "W_DKV", "kv_norm", "W_UK", "W_UV", "W_O"]),
    (4, True, ["W_DQ", "b_DQ", "q_norm", "W_UQ", "W_DKV", "b_DKV", "kv_norm", "W_UK", "W_UV", "W_O", "b_O"])])
def test_the_norm_modules_read_the_saved_parameters_and_add_no_state(q_latent: int, bias: bool, names) -> None:
    """The latents' RMSNorms are modules (a hook can freeze them) that read q_norm and kv_norm: the state_dict keeps
    the names layers were saved with, a state loads strictly into another layer and gives its trace, and a copy's
    norm reads the copy's weight."""
    import copy

    cfg, variant = MHAConfig(16, 2, bias=bias), LayerVariant("mla", kv_latent=4, q_latent=q_latent, rope_dim=2)
    a, b = variant_layer(cfg, variant, seed=1), variant_layer(cfg, variant, seed=2)
    assert list(a.state_dict()) == names and [n for n, _ in a.named_parameters()] == names
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for name in ("q_norm", "kv_norm")[q_latent == 0:]:
            getattr(a, name).mul_(torch.linspace(0.5, 2.0, getattr(a, name).shape[0]))  # not the ones they start as
    b.load_state_dict(a.state_dict(), strict=True)
    np.testing.assert_array_equal(b(x).output, a(x).output)
    c = copy.deepcopy(a)
    with torch.no_grad():
        c.kv_norm.mul_(3.0)
    assert c.kv_rmsnorm.weight is c.kv_norm and a.kv_rmsnorm.weight is a.kv_norm
    np.testing.assert_allclose(c(x).meta["kv_latent"], 3.0 * a(x).meta["kv_latent"], rtol=1e-5, atol=1e-6)


def test_figures_draw_a_configurable_and_a_real_deepseek_trace() -> None:
    """The view's figures read what both kinds of trace carry: meta kv_latent and k_rope, keys and values."""
    from transformers import AutoModel, AutoTokenizer

    from mha_viz.figures.latent import latent_cache_figure, rebuilt_kv_figure, up_projections_figure
    from mha_viz.pretrained import PretrainedModel, bundled_model_dir
    from tests.tiny_causal import random_model
    from tests.unit.test_families import FAMILIES

    ours, _ = pair(12, 8, 4)
    mine = ours(torch.randn(5, D, generator=torch.Generator().manual_seed(9)), causal=True)
    model = PretrainedModel(random_model(AutoModel, FAMILIES["deepseek_v3"][1]()),
                            AutoTokenizer.from_pretrained(bundled_model_dir()), name="tiny-deepseek_v3")
    real = model.trace("the cat sat on the mat", 0)
    for trace in (mine, real):
        latent, k_rope, r = trace.meta["kv_latent"], trace.meta["k_rope"], trace.meta["rope_dim"]
        S = len(trace.key_tokens)
        fig = latent_cache_figure(latent, k_rope, trace.key_tokens)
        assert [d.z.shape for d in fig.data] == [latent.shape, (S, r)] and latent.shape[0] == S
        fig = rebuilt_kv_figure(trace.keys[1], trace.values[1], r, trace.key_tokens, 1)
        assert [d.z.shape for d in fig.data] == [trace.keys[1].shape, trace.values[1].shape]
    fig = up_projections_figure(mine.meta["W_UK"][2], mine.meta["W_UV"][2], 2)
    np.testing.assert_array_equal(fig.data[0].z, mine.meta["W_UK"][2].astype(np.float32))
    with pytest.raises(ValueError, match="k_rope"):
        latent_cache_figure(mine.meta["kv_latent"], mine.meta["k_rope"][:3], mine.key_tokens)


def test_stacked_mla_panels_leave_room_for_the_axis_above_and_the_title_below() -> None:
    from mha_viz.figures.common import LINE_EM, PANEL_TITLE_PX
    from mha_viz.figures.latent import AXIS_BELOW_PX, latent_cache_figure, rebuilt_kv_figure, up_projections_figure

    rng = np.random.default_rng(0)
    tokens = [f"t{i}" for i in range(13)]
    for fig in (latent_cache_figure(rng.normal(size=(13, 8)), rng.normal(size=(13, 4)), tokens, compact=True),
                up_projections_figure(rng.normal(size=(8, 16)), rng.normal(size=(8, 16)), 0, compact=True),
                rebuilt_kv_figure(rng.normal(size=(13, 20)), rng.normal(size=(13, 16)), 4, tokens, 0, compact=True)):
        layout = fig.layout
        plots_px = layout.height - layout.margin.t - layout.margin.b
        gap_px = (layout.yaxis.domain[0] - layout.yaxis2.domain[1]) * plots_px  # the first panel sits on top
        lines = max(a.text.count("<br>") + 1 for a in layout.annotations)
        assert gap_px >= AXIS_BELOW_PX + lines * LINE_EM * PANEL_TITLE_PX - 1, (gap_px, lines)
        assert layout.coloraxis.colorbar.orientation == "h"  # the stacked panels and their titles get the full width
        assert all(len(line) <= 34 for a in layout.annotations for line in a.text.split("<br>"))
