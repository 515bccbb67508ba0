"""Score attribution on a tiny random Gemma 3n (tests.app.test_app_families CONFIGS["gemma3n_text"]): two AltUp
streams mixed by router coefficients, LAuReL, per-layer inputs, and layers 2 and 3 reading the keys layers 0 and 1
computed (KV sharing). The terms sum to the module's own pre-softmax score, recomputed here from what it received;
a source's share, computed here from the modules' own outputs, taken out of the active prediction by a hook (or out
of the key layer's, the keys recomputed here) gives the row score_attribution removes it from; a dropped source
breaks the sum."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest
import torch
from transformers.models.gemma3n.modeling_gemma3n import apply_rotary_pos_emb

from mha_viz.analysis import score_attribution
from mha_viz.pretrained import PretrainedModel

TEXT = "the cat sat on the mat . the cat sat on the mat ."
H, KV, D_K = 4, 2, 8  # the tiny config's heads, key-value heads, head size

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def m() -> PretrainedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.app.test_app_families import CONFIGS
    from tests.tiny_causal import random_model

    return PretrainedModel(random_model(AutoModelForCausalLM, CONFIGS["gemma3n_text"][0]()),
                           AutoTokenizer.from_pretrained(bundled_model_dir()), name="gemma3n_text")


def layers(m: PretrainedModel) -> torch.nn.ModuleList:
    return m.model.model.layers


def run(m: PretrainedModel, modules: list[torch.nn.Module], pre: dict | None = None) -> tuple[dict, tuple]:
    """One forward pass on TEXT: each module's first call (its positional and keyword arguments, its output) and the
    model's own attention weights; pre: module -> a forward pre-hook changing its input."""
    seen: dict = {}

    def called(mod: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        seen.setdefault(mod, [args, kwargs])

    def returned(mod: torch.nn.Module, args: tuple, out: object) -> None:
        if len(seen[mod]) == 2:
            seen[mod].append(out)

    handles = [mod.register_forward_pre_hook(called, with_kwargs=True) for mod in modules]
    handles += [mod.register_forward_hook(returned) for mod in modules]
    handles += [mod.register_forward_pre_hook(hook) for mod, hook in (pre or {}).items()]
    try:
        with torch.no_grad():
            out = m.model(input_ids=torch.tensor([m.encode(TEXT).ids]), use_cache=False, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return seen, out.attentions


def own_scores(m: PretrainedModel, layer: int) -> torch.Tensor:
    """(H, T, T) scaling * q k^T of the layer: from what its attention received (hidden_states, position_embeddings)
    through its q_proj, q_norm and rotary; its keys the same way through k_proj and k_norm, or (KV-shared) the keys
    the module read from the shared states. No mask."""
    attention = layers(m)[layer].self_attn
    (_, kwargs, _), = run(m, [attention])[0].values()
    x, (cos, sin) = kwargs["hidden_states"], kwargs["position_embeddings"]  # (1, T, d)
    with torch.no_grad():
        q = apply_rotary_pos_emb(attention.q_norm(attention.q_proj(x).view(1, x.shape[1], H, D_K)), cos, sin, 2)
        if attention.is_kv_shared_layer:
            key = getattr(attention, "kv_shared_layer_index", None)  # older transformers key them by layer
            k = kwargs["shared_kv_states"][attention.layer_type if key is None else key][0]  # (1, KV, T, d_k): rotated
        else:
            k = apply_rotary_pos_emb(attention.k_norm(attention.k_proj(x).view(1, x.shape[1], KV, D_K)), cos, sin, 2)
            k = k.transpose(1, 2)
        k = k.repeat_interleave(H // KV, 1)  # (1, H, T, d_k)
        return (attention.scaling * q.transpose(1, 2) @ k.transpose(-1, -2))[0]  # (H, T, T)


def coefficients(m: PretrainedModel, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer's AltUp coefficients as its modules computed them: (T, K, K) prediction R (P_j = X_j + sum_i R[j, i]
    X_i) and (T, K) correction g (X'_j = P_j + g_j (y - P_a))."""
    altup = layers(m)[layer].altup
    seen, _ = run(m, [altup.prediction_coefs, altup.correction_coefs])
    R = seen[altup.prediction_coefs][2][0]  # (T, K * K)
    return R.view(R.shape[0], 2, 2), 1 + seen[altup.correction_coefs][2][0]


def into_next(m: PretrainedModel, layer: int, y: torch.Tensor) -> torch.Tensor:
    """(T, d): what a vector y (T, d) added to layer's active stream after its attention (before correct) becomes in
    layer + 1's active prediction: X'_j = g_j y, then P_a = X'_a + sum_i R[a, i] X'_i (active stream 0)."""
    _, g = coefficients(m, layer)
    R, _ = coefficients(m, layer + 1)
    return (g[:, 0] + (R[:, 0] * g).sum(-1))[:, None] * y


def head_share(m: PretrainedModel, layer: int, head: int) -> torch.Tensor:
    """(T, d) head layer.head's share of layer + 1's active prediction: its block of the concat times its columns of
    W_O, through post_attention_layernorm at its scale on the whole output, over sqrt(2), then correct and predict."""
    block = layers(m)[layer]
    out, post = block.self_attn.o_proj, block.post_attention_layernorm
    seen, _ = run(m, [out, post])
    concat, whole = seen[out][0][0][0], seen[post][0][0][0]  # (T, H * d_v), (T, d)
    cols = slice(head * D_K, (head + 1) * D_K)
    s = torch.sqrt(whole.pow(2).mean(-1, keepdim=True) + post.eps)  # (T, 1)
    return into_next(m, layer, post.weight * (concat[:, cols] @ out.weight[:, cols].T) / s / math.sqrt(2))


def token_share_of_layer_1(m: PretrainedModel) -> torch.Tensor:
    """(T, d) the token's share of layer 1's active prediction. Layer 0 reads only the token: its streams X (K, T,
    d) and predictions P are all token, and so is LAuReL's output; the token's part of y is (P_a + LAuReL) / sqrt(2);
    then correct and layer 1's predict."""
    block = layers(m)[0]
    seen, _ = run(m, [block, block.laurel])
    X = seen[block][0][0][:, 0]  # (K, T, d)
    R0, g0 = coefficients(m, 0)
    R1, _ = coefficients(m, 1)
    P = X + torch.einsum("tji,itd->jtd", R0, X)
    y = (P[0] + seen[block.laurel][2][0]) / math.sqrt(2)
    X1 = P + g0.T[..., None] * (y - P[0])  # (K, T, d)
    return X1[0] + torch.einsum("ti,itd->td", R1[:, 0], X1)


def test_the_terms_sum_to_the_modules_own_score_for_every_layer_head_and_two_queries(m):
    T = len(m.encode(TEXT).ids)
    for layer in range(4):
        own = own_scores(m, layer)
        for head, query in itertools.product(range(H), (T // 2, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            window = layer % 2 == 0  # sliding layers (and the shared layers reading them): the last 4 keys
            assert sa.keys == tuple(range(query - 3 if window else 0, query + 1))
            sums = sa.terms.sum((1, 2))  # (keys,)
            assert np.abs(sums - own[head, query, list(sa.keys)].double().numpy()).max() <= 1e-5
            assert max(sa.check.values()) <= 1e-5  # every freezing, the sources' sum at every step
            assert sa.check["sum of sources vs stream"] <= 1e-5
            if layer >= 2:  # KV-shared: the keys' sources are layer L - 2's (its own stream: fewer sources)
                assert sa.key_sources == sa.sources[:len(sa.key_sources) - 1] + ("bias",)
                assert sa.removed.shape == (len(sa.sources) + len(sa.key_sources) - 2, T)
            else:
                assert sa.key_sources is None
            # negative control: the source with the largest part of a score (a row or a column), dropped
            rows, columns = np.abs(sa.terms.sum(2)).max(0), np.abs(sa.terms.sum(1)).max(0)  # (sources,) each
            kept = (np.delete(sa.terms, rows.argmax(), axis=1) if rows.max() >= columns.max()
                    else np.delete(sa.terms, columns.argmax(), axis=2))
            assert np.abs(kept.sum((1, 2)) - sums).max() > 1e-3


def test_sources_are_the_token_each_head_the_mlp_and_the_per_layer_input_in_order(m):
    sa = score_attribution(m, TEXT, layer=1, head=0, query=3)
    assert sa.sources == ("token", "0.0", "0.1", "0.2", "0.3", "0 MLP", "0 per-layer input", "bias")
    assert sa.norm == "RMSNorm" and (sa.norm_scales > 0).all()


@pytest.mark.parametrize(("layer", "source"), [(1, "token"), (1, "0.2"), (2, "1.1")])
def test_a_removed_sources_row_is_the_model_with_it_taken_out_of_the_active_prediction(m, layer, source):
    """removed[a]: the source's share (computed here) taken out of the layer's active prediction by a pre-hook on its
    input_layernorm gives the unmodified model's own weights. Layer 2 reads layer 0's keys: only its queries move."""
    T = len(m.encode(TEXT).ids)
    src = token_share_of_layer_1(m) if source == "token" else head_share(m, layer - 1, int(source.split(".")[1]))
    _, attentions = run(m, [], {layers(m)[layer].input_layernorm: lambda mod, args: (args[0] - src,)})
    for head in range(H):
        sa = score_attribution(m, TEXT, layer=layer, head=head, query=T - 1)
        expected = attentions[layer][0, head, T - 1].double().numpy()
        assert np.abs(sa.removed[sa.sources.index(source)] - expected).max() <= 1e-5
        assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered


def test_a_kv_shared_layers_key_source_removed_recomputes_the_key_layers_keys(m):
    """Layer 3 reads layer 1's keys. Head 0.2's share of layer 1's active prediction (computed here) taken out of it:
    layer 1's keys recomputed through its input_layernorm, k_proj, k_norm and rotary, against layer 3's own queries
    (its module on what it received), causal softmax; the row is removed's for that key source."""
    T = len(m.encode(TEXT).ids)
    one, three = layers(m)[1], layers(m)[3]
    seen, _ = run(m, [one.input_layernorm, three.self_attn])
    x = seen[one.input_layernorm][0][0] - head_share(m, 0, 2)  # (1, T, d) layer 1's active prediction without it
    kwargs = seen[three.self_attn][1]
    cos, sin = kwargs["position_embeddings"]
    a = one.self_attn
    with torch.no_grad():
        k = apply_rotary_pos_emb(a.k_norm(a.k_proj(one.input_layernorm(x)).view(1, T, KV, D_K)), cos, sin, 2)
        q = apply_rotary_pos_emb(three.self_attn.q_norm(three.self_attn.q_proj(kwargs["hidden_states"])
                                                        .view(1, T, H, D_K)), cos, sin, 2)
        scores = q.transpose(1, 2)[0] @ k.transpose(1, 2)[0].repeat_interleave(H // KV, 0).transpose(-1, -2)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        rows = torch.softmax(scores.masked_fill(~causal, -torch.inf), -1)  # (H, T, T) scaling 1
    for head in range(H):
        sa = score_attribution(m, TEXT, layer=3, head=head, query=T - 1)
        expected = rows[head, T - 1].double().numpy()
        at = len(sa.sources) - 1 + sa.key_sources.index("0.2")  # the key side's rows follow the query side's
        assert np.abs(sa.removed[at] - expected).max() <= 1e-5
        assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered


def test_shares_past_the_memory_budget_are_refused_before_the_forward_pass(m, monkeypatch):
    """Every source's float64 share of the K streams is held at once: past MAX_SHARES_BYTES the split is refused with
    its size, a shorter text or an earlier layer suggested; the same call within the budget splits."""
    module = sys.modules["mha_viz.analysis.score_streams_altup"]
    T, d, K = len(m.encode(TEXT).ids), m.model.config.hidden_size, m.model.config.altup_num_inputs
    need = (1 + 4 + 2) * K * T * d * 8  # layer 1: the token, layer 0's 4 heads, its MLP and per-layer input
    monkeypatch.setattr(module, "MAX_SHARES_BYTES", need - 1)
    with pytest.raises(ValueError, match="shorter text or an earlier layer"):
        score_attribution(m, TEXT, layer=1, head=0, query=3)
    monkeypatch.setattr(module, "MAX_SHARES_BYTES", need)
    assert score_attribution(m, TEXT, layer=1, head=0, query=3).check["sum of sources vs stream"] <= 1e-5
