"""Score attribution (mha_viz.analysis.score_attribution) on the bundled induction-2l (GPT-2) and tiny random GPT-2
and LLaMA (rotary, grouped-query, biases): the (query source x key source) terms sum to the model's own pre-softmax
score, recomputed here from the model's own modules; the sources sum to the residual stream; a source taken out
gives the row a hooked forward pass of the unmodified model gives; and a dropped source breaks the sum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import Qwen3Config
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from mha_viz.analysis import score_attribution
from mha_viz.pretrained import PretrainedModel, load_model
from tests.tiny_causal import NAMES, random_causal_lm, tiny_causal

TEXT = "the cat sat on the mat . the cat sat on the mat ."

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    induction = load_model("mha-viz/induction-2l")
    qwen3 = PretrainedModel(random_causal_lm(Qwen3Config(  # QK-norm: an RMSNorm on each query and key head
        vocab_size=30522, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64)), induction.tokenizer, name="tiny-qwen3")
    return {"induction-2l": induction, "qwen3": qwen3, **{name: tiny_causal(name) for name in NAMES}}


def blocks(m: PretrainedModel) -> torch.nn.ModuleList:
    return m.model.transformer.h if m.architecture == "gpt2" else m.model.model.layers


def own_scores(m: PretrainedModel, text: str, layer: int) -> torch.Tensor:
    """(H, T, T) scale * q k^T of the layer, from what its attention module received (hooked here) through the
    model's own projections and rotary function; no mask."""
    seen = {}
    attention = blocks(m)[layer].attn if m.architecture == "gpt2" else blocks(m)[layer].self_attn
    handle = attention.register_forward_pre_hook(lambda mod, args, kwargs: seen.update(args=args, kwargs=kwargs),
                                                 with_kwargs=True)
    try:
        with torch.no_grad():
            m.model(input_ids=torch.tensor([m.encode(text).ids]), use_cache=False)
    finally:
        handle.remove()
    x = seen["args"][0] if seen["args"] else seen["kwargs"]["hidden_states"]  # (1, T, d)
    with torch.no_grad():
        if m.architecture == "gpt2":
            q, k, _ = attention.c_attn(x).split(m.model.config.n_embd, dim=-1)  # (1, T, d) each
            H = m.model.config.n_head
            q, k = (t.view(1, -1, H, t.shape[-1] // H).transpose(1, 2) for t in (q, k))  # (1, H, T, d_k)
            scale = q.shape[-1] ** -0.5
        else:
            H, KV = m.model.config.num_attention_heads, m.model.config.num_key_value_heads
            q, k = attention.q_proj(x), attention.k_proj(x)  # (1, T, H * d_k), (1, T, KV * d_k)
            if m.architecture.startswith("olmo"):  # OLMo 2 and 3: one norm across every head, before the split
                q, k = attention.q_norm(q), attention.k_norm(k)
            q = q.view(1, x.shape[1], H, -1).transpose(1, 2)  # (1, H, T, d_k)
            k = k.view(1, x.shape[1], KV, -1).transpose(1, 2)  # (1, KV, T, d_k)
            if getattr(attention, "q_norm", None) is not None and not m.architecture.startswith("olmo"):
                q, k = attention.q_norm(q), attention.k_norm(k)  # Qwen 3: a norm on each head
            cos, sin = seen["kwargs"]["position_embeddings"]
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            k = k.repeat_interleave(H // KV, dim=1)  # (1, H, T, d_k)
            scale = attention.scaling
        return (scale * q @ k.transpose(-1, -2))[0]  # (H, T, T)


@pytest.mark.parametrize("name", ["induction-2l", "qwen3", *NAMES])
def test_the_terms_sum_to_the_models_own_score_for_every_head_and_key(models, name):
    m = models[name]
    T = len(m.encode(TEXT).ids)
    for layer in range(len(blocks(m))):
        own = own_scores(m, TEXT, layer)
        for head in range(own.shape[0]):
            for query in (0, T // 2, T - 1):
                sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
                assert sa.keys == tuple(range(query + 1))  # causal: every key up to the query
                sums = sa.terms.sum((1, 2))  # (keys,)
                assert np.abs(sums - own[head, query, :query + 1].double().numpy()).max() <= 1e-5
                assert sa.check["sum of sources vs stream"] <= 1e-5
                assert sa.check["frozen norm vs the attention's input"] <= 1e-5
                assert sa.total(query) == pytest.approx(float(own[head, query, query]), abs=1e-5)
                assert np.isclose(sa.weights.sum(), 1, atol=1e-5) and (sa.weights[query + 1:] == 0).all()
                # negative control: the source that adds most, dropped from both sides, no longer adds up
                share = np.abs(sa.terms.sum(2) + sa.terms.sum(1) - np.diagonal(sa.terms, axis1=1, axis2=2)).max(0)
                i = int(np.argmax(share))  # (sources,) each one's largest part of a key's score
                kept = np.delete(np.delete(sa.terms, i, axis=1), i, axis=2).sum((1, 2))
                assert np.abs(kept - sums).max() > 1e-3


def test_sources_name_the_stream_in_order_with_positions_where_the_model_learns_them(models):
    gpt2 = score_attribution(models["gpt2"], TEXT, layer=1, head=0, query=3)
    assert gpt2.sources == ("token", "position", "0.0", "0.1", "0.2", "0.3", "0 attention bias", "0 MLP", "bias")
    llama = score_attribution(models["llama"], TEXT, layer=1, head=0, query=3)  # rotary: no position source
    assert llama.sources == ("token", "0.0", "0.1", "0.2", "0.3", "0 attention bias", "0 MLP", "bias")
    assert score_attribution(models["llama"], TEXT, layer=0, head=3, query=3).sources == ("token", "bias")
    induction = score_attribution(models["induction-2l"], TEXT, layer=1, head=0, query=3)
    assert "0 MLP" not in induction.sources  # attention only: its MLPs add nothing, and are left out
    assert gpt2.removed.shape == (len(gpt2.sources) - 1, len(gpt2.tokens))  # every source but "bias" taken out
    assert llama.norm == "RMSNorm" and gpt2.norm == "LayerNorm" and (gpt2.norm_scales > 0).all()


def stream_source(m: PretrainedModel, text: str, source: str) -> torch.Tensor:
    """(T, d) one source of the residual stream, computed here: the token or position embeddings (GPT-2), or head
    L.H's output, its block of the concat (hooked at the output projection) times its columns of W_O."""
    ids = torch.tensor([m.encode(text).ids])
    if source == "token":
        return m.model.get_input_embeddings()(ids)[0].detach()
    if source == "position":
        return m.model.transformer.wpe.weight[:ids.shape[1]].detach()
    layer, head = map(int, source.split("."))
    out = blocks(m)[layer].attn.c_proj
    concat = received(m, out, text)
    d_v = concat.shape[-1] // m.model.config.n_head
    block = slice(head * d_v, (head + 1) * d_v)
    return concat[:, block] @ out.weight[block].detach()  # GPT-2's Conv1D: (in, out)


def received(m: PretrainedModel, module: torch.nn.Module, text: str = TEXT) -> torch.Tensor:
    """(T, n) what module received on text (a forward pre-hook): an output projection's is its layer's concat."""
    seen = []
    handle = module.register_forward_pre_hook(lambda mod, args: seen.append(args[0][0]))
    try:
        with torch.no_grad():
            m.model(input_ids=torch.tensor([m.encode(text).ids]), use_cache=False)
    finally:
        handle.remove()
    return seen[0]


def call_of(m: PretrainedModel, attention: torch.nn.Module) -> dict:
    """The keyword arguments attention was called with on TEXT (hidden_states, position_embeddings, ...)."""
    seen = {}
    handle = attention.register_forward_pre_hook(lambda mod, args, kwargs: seen.update(kwargs), with_kwargs=True)
    try:
        with torch.no_grad():
            m.model(input_ids=torch.tensor([m.encode(TEXT).ids]), use_cache=False)
    finally:
        handle.remove()
    return seen


def attentions_without(m: PretrainedModel, block: torch.nn.Module, src: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The unmodified model's own attention weights (one (1, H, T, T) per layer) on TEXT, with src (T, d) taken out
    of block's input by a forward pre-hook."""
    def without(module, args, kwargs):
        if args:
            return (args[0] - src,) + args[1:], kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"] - src}

    handle = block.register_forward_pre_hook(without, with_kwargs=True)
    try:
        with torch.no_grad():
            return m.model(input_ids=torch.tensor([m.encode(TEXT).ids]), use_cache=False,
                           output_attentions=True).attentions
    finally:
        handle.remove()


@pytest.mark.parametrize("source", ["token", "position", "0.2", "0.3"])
def test_a_removed_sources_row_is_a_hooked_forward_pass_without_it(models, source):
    """removed[a]: the row with the source taken out of layer 1's input, against the unmodified model's own
    attention weights with a pre-hook on block 1 subtracting the source computed by this test."""
    m = models["induction-2l"]
    T = len(m.encode(TEXT).ids)
    src = stream_source(m, TEXT, source)

    attentions = attentions_without(m, blocks(m)[1], src)
    for head in range(4):
        sa = score_attribution(m, TEXT, layer=1, head=head, query=T - 4)
        expected = attentions[1][0, head, T - 4].double().numpy()
        assert np.abs(sa.removed[sa.sources.index(source)] - expected).max() <= 1e-5
        assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered: 10x the tolerance


def test_an_induction_heads_winning_key_is_made_by_the_previous_token_heads_output(models):
    """induction-2l at the second 'on': each layer-1 head puts most of its weight on the token after the first 'on',
    and the largest term of that key's score reads head 0.2's output on the key side (the previous-token head:
    K-composition); the score's margin over the runner-up is the difference of the two tables."""
    m = models["induction-2l"]
    tokens = m.encode(TEXT).tokens
    query = len(tokens) - 4  # the second "on"
    target = tokens.index("on") + 1  # the token after the first "on"
    for head in range(4):
        sa = score_attribution(m, TEXT, layer=1, head=head, query=query)
        assert sa.winner == target and sa.weights[target] > 0.9
        _, key_source, term = sa.largest(target, 1)[0]
        assert key_source == "0.2" and term > 0
        key_side = sa.table(target).sum(0)  # (sources,) each key source's share, over every query source
        assert sa.sources[int(np.argmax(key_side))] == "0.2"
        runner = max((j for j in sa.keys if j != target), key=lambda j: sa.scores[sa.keys.index(j)])
        margin = sa.versus(target, runner).sum()
        assert margin == pytest.approx(sa.scores[sa.keys.index(target)] - sa.scores[sa.keys.index(runner)], abs=1e-5)


def test_one_key_bad_positions_and_unsupported_layers_are_refused_with_reasons(models):
    m = models["llama"]
    one = score_attribution(m, TEXT, layer=1, head=2, query=5, key=3)
    every = score_attribution(m, TEXT, layer=1, head=2, query=5)
    assert one.keys == (3,) and np.allclose(one.table(3), every.table(3))
    with pytest.raises(ValueError, match="does not see key 6"):
        score_attribution(m, TEXT, layer=1, head=2, query=5, key=6)
    with pytest.raises(ValueError, match="not among the explained keys"):
        one.table(4)
    for bad, match in (({"layer": 2}, "not a layer"), ({"head": 4}, "not a head"), ({"query": 99}, "not a position")):
        with pytest.raises(ValueError, match=match):
            score_attribution(m, TEXT, **{"layer": 1, "head": 0, "query": 2, **bad})


@pytest.mark.parametrize("name", ["olmo2", "olmo3"])
def test_olmos_norms_after_each_sublayer_and_across_heads_are_frozen(name):
    """OLMo 2 and 3: no norm before the attention, an RMSNorm across every head's queries (and keys) at once, and
    one on each attention output before the stream adds it. For every layer and head, the terms add up to the
    module's own scale * q . k recomputed here (OLMo 3's layer 0: a window of 4 keys). Head 0.1's source, computed
    here from the concat, W_O and the post-attention norm's scale, and the token embeddings, each taken out of block
    1's input by a hook, give the unmodified model's own weights as removed[a]."""
    from transformers import AutoModelForCausalLM

    from tests.tiny_causal import random_model
    from tests.unit.test_families import FAMILIES as CONFIGS

    m = PretrainedModel(random_model(AutoModelForCausalLM, CONFIGS[name][1]()), load_model("mha-viz/induction-2l")
                        .tokenizer, name=name)
    T = len(m.encode(TEXT).ids)
    for layer in range(2):
        own = own_scores(m, TEXT, layer)
        for head, query in itertools.product(range(4), (T // 2, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            window = name == "olmo3" and layer == 0
            assert sa.keys == tuple(range(query - 3 if window else 0, query + 1)) and sa.norm == "no norm"
            assert np.abs(sa.terms.sum((1, 2)) - own[head, query, list(sa.keys)].double().numpy()).max() <= 1e-5
            assert sa.check["sum of sources vs stream"] <= 1e-5
            assert sa.check["frozen post-attention norms vs the norms"] <= 1e-5
    attention, post = blocks(m)[0].self_attn, blocks(m)[0].post_attention_layernorm
    concat, out = received(m, attention.o_proj), received(m, post)  # the post-attention norm's input: o_proj's output
    d_v = concat.shape[-1] // 4
    block = slice(d_v, 2 * d_v)  # head 1
    s = torch.sqrt(out.pow(2).mean(-1, keepdim=True) + post.variance_epsilon)  # (T, 1) the norm's scale
    sources = {"0.1": post.weight * (concat[:, block] @ attention.o_proj.weight[:, block].T) / s,
               "token": m.model.get_input_embeddings()(torch.tensor(m.encode(TEXT).ids))}
    for source, src in sources.items():
        attentions = attentions_without(m, blocks(m)[1], src.detach())
        for head in range(4):
            sa = score_attribution(m, TEXT, layer=1, head=head, query=T - 1)
            expected = attentions[1][0, head, T - 1].double().numpy()
            assert np.abs(sa.removed[sa.sources.index(source)] - expected).max() <= 1e-5
            assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered


def test_olmo_hybrids_softmax_layers_add_up_over_its_gated_deltanet_heads():
    """OLMo hybrid: OLMo 3's attention between Gated DeltaNet layers, every layer's output normed before the stream
    adds it. Its softmax layers' terms add up to the checked scores, over the earlier mixer heads as sources."""
    from transformers import AutoModelForCausalLM

    from tests.tiny_causal import random_model
    from tests.unit.test_mixers import config_of

    m = PretrainedModel(random_model(AutoModelForCausalLM, config_of("olmo_hybrid")),
                        load_model("mha-viz/induction-2l").tokenizer, name="olmo_hybrid")
    T = len(m.encode(TEXT).ids)
    for layer, head in itertools.product((1, 3), range(4)):
        sa = score_attribution(m, TEXT, layer=layer, head=head, query=T - 1)
        assert sa.check["sum of terms vs score"] <= 1e-5 and sa.check["sum of sources vs stream"] <= 1e-5
        assert sa.check["frozen post-attention norms vs the norms"] <= 1e-5 and "0.3" in sa.sources
    with pytest.raises(ValueError, match="not softmax attention"):
        score_attribution(m, TEXT, layer=2, head=0, query=3)


def test_falcon_h1s_block_of_two_halves_is_split_over_both():
    """Falcon-H1: each block runs attention (traced layer 2b) and a Mamba-2 mixer (2b + 1) side by side on the same
    normed input, the attention reading it times attention_in_multiplier. Layer 2's terms add up to the module's own
    scale * q . k recomputed here (q_proj, k_proj times key_multiplier, its rotary); the sources are block 0's
    attention heads, its Mamba-2 heads and one MLP for the block; a head of each half, computed here from its
    projection's input, taken out of block 1's input gives the unmodified model's own weights as removed[a]."""
    from transformers import AutoModelForCausalLM
    from transformers.models.falcon_h1.modeling_falcon_h1 import apply_rotary_pos_emb as falcon_rotary

    from tests.tiny_causal import random_model
    from tests.unit.test_mixers import config_of

    m = PretrainedModel(random_model(AutoModelForCausalLM, config_of("falcon_h1")),
                        load_model("mha-viz/induction-2l").tokenizer, name="falcon_h1")
    cfg, layers = m.model.config, m.model.model.layers
    T = len(m.encode(TEXT).ids)
    attention = layers[1].self_attn
    seen = call_of(m, attention)
    x = seen["hidden_states"]  # (1, T, d): a_in * input_layernorm(block input)
    with torch.no_grad():
        q = attention.q_proj(x).view(1, T, 4, -1).transpose(1, 2)  # (1, H, T, d_k)
        k = (attention.k_proj(x).view(1, T, 2, -1).transpose(1, 2) * attention.key_multiplier).repeat_interleave(2, 1)
        q, k = falcon_rotary(q, k, *seen["position_embeddings"])
        own = (attention.scaling * q @ k.transpose(-1, -2))[0]  # (H, T, T)
    for head, query in itertools.product(range(4), (T // 2, T - 1)):
        sa = score_attribution(m, TEXT, layer=2, head=head, query=query)
        assert sa.sources == ("embeddings", "0.0", "0.1", "0.2", "0.3", "1.0", "1.1", "1.2", "1.3", "block 0 MLP",
                              "bias")
        assert np.abs(sa.terms.sum((1, 2)) - own[head, query, list(sa.keys)].double().numpy()).max() <= 1e-5
        assert sa.check["sum of sources vs stream"] <= 1e-5 and sa.check["frozen norm vs the attention's input"] <= 1e-5
    d_v = 8
    sources = {  # head 1 of each half: its block of the concat times its columns of the projection, times a_out, s_out
        "0.1": cfg.attention_out_multiplier * received(m, layers[0].self_attn.o_proj)[:, d_v:2 * d_v]
        @ layers[0].self_attn.o_proj.weight[:, d_v:2 * d_v].T,
        "1.1": cfg.ssm_out_multiplier * received(m, layers[0].mamba.out_proj)[:, d_v:2 * d_v]
        @ layers[0].mamba.out_proj.weight[:, d_v:2 * d_v].T}
    for source, src in sources.items():
        attentions = attentions_without(m, layers[1], src.detach())
        for head in range(4):
            sa = score_attribution(m, TEXT, layer=2, head=head, query=T - 1)
            expected = attentions[1][0, head, T - 1].double().numpy()
            assert np.abs(sa.removed[sa.sources.index(source)] - expected).max() <= 1e-5
            assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered


@pytest.mark.parametrize("name", ["cohere", "lfm3", "minimax"])
def test_more_families_norms_add_up_to_the_modules_own_scores(name):
    """Cohere: a LayerNorm on each query and key head with the head's own weight, rotary on interleaved pairs, the
    attention and MLP in parallel. LFM3: convolution layers, then attention with QK-norm, each layer's output normed
    again before the stream adds it (sandwich norms). MiniMax: lightning attention layers, and blocks that normalise
    the stream itself, n2 = post_norm(alpha_a n1 + beta_a attention(n1)), x' = alpha_m n2 + beta_m MLP(n2), with
    factors other than 1 here. Every softmax layer's terms add up to the module's own scale * q . k, recomputed here
    with the family's own rotary function. On Cohere and MiniMax, the token's part of block 1's input, computed here
    (on MiniMax through block 0's two norms at their scales), taken out by a hook gives the unmodified model's own
    weights as removed[0]."""
    import importlib

    from transformers import AutoModelForCausalLM

    from tests.tiny_causal import random_model
    from tests.unit.test_families import FAMILIES as CAUSAL
    from tests.unit.test_mixers import config_of

    config = CAUSAL[name][1]() if name == "cohere" else config_of(name)  # skipped where transformers lacks the family
    if name == "minimax":
        config.update({"full_attn_alpha_factor": 0.7, "full_attn_beta_factor": 1.3, "linear_attn_alpha_factor": 0.8,
                       "linear_attn_beta_factor": 1.2, "mlp_alpha_factor": 0.9, "mlp_beta_factor": 1.1})
    m = PretrainedModel(random_model(AutoModelForCausalLM, config), load_model("mha-viz/induction-2l").tokenizer,
                        name=name)
    rotary = importlib.import_module(f"transformers.models.{name}.modeling_{name}").apply_rotary_pos_emb
    ids = torch.tensor([m.encode(TEXT).ids])
    T, H, KV = ids.shape[1], config.num_attention_heads, config.num_key_value_heads
    layers = m.model.model.layers
    for layer, kind in enumerate(m.layer_kinds("decoder")):
        if kind != "softmax":
            continue
        attention = layers[layer].self_attn
        seen = call_of(m, attention)
        x = seen["hidden_states"]  # (1, T, d)
        q_norm, k_norm = (getattr(attention, n, torch.nn.Identity()) for n in ("q_norm", "k_norm"))
        with torch.no_grad():  # the norm on each head, before the transpose
            q = q_norm(attention.q_proj(x).view(1, T, H, -1)).transpose(1, 2)  # (1, H, T, d_k)
            k = k_norm(attention.k_proj(x).view(1, T, KV, -1)).transpose(1, 2)  # (1, KV, T, d_k)
            q, k = rotary(q, k, *seen["position_embeddings"])
            own = (attention.scaling * q @ k.repeat_interleave(H // KV, 1).transpose(-1, -2))[0]  # (H, T, T)
        for head, query in itertools.product(range(H), (T // 2, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            assert np.abs(sa.terms.sum((1, 2)) - own[head, query, list(sa.keys)].double().numpy()).max() <= 1e-5
            assert sa.check["sum of sources vs stream"] <= 1e-5
            assert sa.check["frozen post-attention norms vs the norms"] <= 1e-5
    if name == "lfm3":
        return
    token = m.model.get_input_embeddings()(ids)[0].detach()  # (T, d)
    if name == "minimax":  # through block 0's input norm and post-attention norm, each at its scale on its input
        block = layers[0]
        for norm, factor in ((block.input_layernorm, 0.8), (block.post_attention_layernorm, 0.9)):  # alpha_a, alpha_m
            s = torch.sqrt(received(m, norm).pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)  # (T, 1)
            token = factor * norm.weight.detach() * token / s
    attentions = attentions_without(m, layers[1], token)
    for head in range(H):
        sa = score_attribution(m, TEXT, layer=1, head=head, query=T - 1)
        expected = attentions[1][0, head, T - 1].double().numpy()
        assert sa.sources[0] == "token" and np.abs(sa.removed[0] - expected).max() <= 1e-5
        assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered


FAMILIES = ("bloom", "gpt_oss", "cohere2", "llama4_text", "gemma2", "gemma3", "diffllama", "deepseek_v3")  # ALiBi;
# parallel attention and MLP; Llama 4: a weightless QK-norm and chunks on layer 0, a NoPE layer with a temperature per
# position on layer 1; Gemma 2: soft-capped scores and a norm on each attention output; Gemma 3: that norm and QK-norm;
# DiffLlama: differential pairs, each query head one of a pair's two maps; DeepSeek-V3: latent attention (MLA), no
# W_Q, W_K per head, its latent's norm frozen inside the module


@pytest.fixture(scope="module")
def families() -> dict[str, PretrainedModel]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.app.test_app_families import CONFIGS
    from tests.tiny_causal import random_model

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    return {name: PretrainedModel(random_model(AutoModelForCausalLM, CONFIGS[name][0]()), tokenizer, name=name)
            for name in (*FAMILIES, "deepseek_v32")}


@pytest.mark.parametrize("name", FAMILIES)
def test_other_families_terms_sum_to_their_checked_scores(families, name):
    """The sum of terms against the score the trace rebuilds, which score_attribution holds to the model's own
    weights before it splits anything (ALiBi's bias is a term of its own, outside q . k)."""
    m = families[name]
    T = len(m.encode(TEXT).ids)
    for layer, head in itertools.product(range(2), range(4)):
        sa = score_attribution(m, TEXT, layer=layer, head=head, query=T - 1)
        assert sa.check["sum of terms vs score"] <= 1e-5 and sa.check["sum of sources vs stream"] <= 1e-5
        assert sa.check["frozen norm vs the attention's input"] <= 1e-5
        assert sa.check["frozen post-attention norms vs the norms"] <= 1e-5
        assert (name == "bloom") == ("ALiBi" in sa.other) and (name == "gemma2") == ("soft cap" in sa.other)
        window = name in ("gpt_oss", "cohere2", "gemma2", "gemma3") and layer == 0  # a window of 4: the last 4 keys
        chunk = name == "llama4_text" and layer == 0  # chunks of 4: the keys of the query's chunk
        start = T - 4 if window else (T - 1) // 4 * 4 if chunk else 0
        assert sa.keys == tuple(range(start, T))


def test_a_sparse_layer_is_split_over_the_keys_its_indexer_keeps(families):
    """DeepSeek-V3.2: latent attention over the top 3 keys its indexer ranks for each query. The explained keys are
    the kept ones, as the trace holds them; the terms add up; a removal reruns the module, indexer included, so the
    token embeddings taken out of block 1's input by a hook give the unmodified model's own weights."""
    m = families["deepseek_v32"]
    T = len(m.encode(TEXT).ids)
    trace = m.trace(TEXT, layer=1)
    attentions = attentions_without(m, m.model.model.layers[1],
                                    m.model.get_input_embeddings()(torch.tensor(m.encode(TEXT).ids)).detach())
    for head, query in itertools.product(range(4), (T // 2, T - 1)):
        sa = score_attribution(m, TEXT, layer=1, head=head, query=query)
        assert sa.keys == tuple(np.flatnonzero(trace.meta["kept"][query])) and len(sa.keys) == 3
        assert sa.check["sum of terms vs score"] <= 1e-5 and sa.check["sum of sources vs stream"] <= 1e-5
        expected = attentions[1][0, head, query].double().numpy()
        assert sa.sources[0] == "token" and np.abs(sa.removed[0] - expected).max() <= 1e-5
        assert np.abs(expected - sa.weights).max() > 1e-4  # the source mattered


def test_a_hybrids_attention_layer_is_split_into_its_mixer_heads():
    """hybrid-2l: a Gated DeltaNet layer, then softmax attention with QK-norm and an output gate. Layer 1's scores
    split over the token and each mixer head's output (their out_proj blocks, as logit attribution splits them), and
    add up; at the repeated "a" every head finds "big" through a mixer head on the key side. Layer 0 has no scores."""
    m = load_model("mha-viz/hybrid-2l")
    text = "the red fox saw a big owl by the lake . the red fox saw a"
    T = len(m.encode(text).ids)
    for head in range(m.adapter.site("decoder", 1).num_heads):
        sa = score_attribution(m, text, layer=1, head=head, query=T - 1)
        assert sa.check["sum of terms vs score"] <= 1e-5 and sa.check["sum of sources vs stream"] <= 1e-5
        assert sa.sources[:2] == ("token", "0.0") and m.tokens(text)[sa.winner] == "big"
        query_side, key_side, _ = sa.largest(sa.winner, 1)[0]
        assert query_side == "token" and key_side.startswith("0.")  # a layer-0 mixer head carries the key
    with pytest.raises(ValueError, match="linear mixer, not softmax attention"):
        score_attribution(m, text, layer=0, head=0, query=3)


@pytest.mark.parametrize("kind", ["mha", "gqa", "window", "moh"])
def test_the_configurable_layer_splits_by_token_and_position(kind):
    """A single layer whose input is token vectors plus the positional encoding: the terms add up to its own scores,
    and taking a part out equals the layer run without it, computed here the app's way (positional off: the token
    part alone)."""
    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_score_attribution, configurable_trace
    from mha_viz.variants import LayerVariant

    cfg, variant = MHAConfig(32, 4), LayerVariant(kind, kv_heads=2) if kind == "gqa" else LayerVariant(kind)
    own = configurable_trace(TEXT, cfg, causal=True, variant=variant)
    tokens_only = configurable_trace(TEXT, cfg, causal=True, positional=False, variant=variant)
    T = own.weights.shape[1]
    for head, query in itertools.product(range(4), (0, T // 2, T - 1)):
        sa = configurable_score_attribution(TEXT, cfg, head=head, query=query, causal=True, variant=variant)
        assert sa.sources == ("token", "position", "bias") and sa.check["parts vs the input"] <= 1e-5
        keys = list(sa.keys)
        assert np.abs(sa.terms.sum((1, 2)) - own.scores[head, query, keys]).max() <= 1e-5
        assert np.abs(sa.removed[1] - tokens_only.weights[head, query]).max() <= 1e-6  # position taken out
        assert np.allclose(sa.weights, own.weights[head, query], atol=1e-7)


def configurable_layer(cfg, variant):
    """The configurable layer the app builds (seed 0) and its input x = token vectors + positional encoding (T, d)."""
    from mha_viz.text import embed_text
    from mha_viz.variants import variant_layer

    return variant_layer(cfg, variant, seed=0), embed_text(TEXT, cfg.d_model, seed=0)[1]


def causal_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> np.ndarray:
    """(H, T, T) scale * q k^T of per-head q, k (H, T, d), float64, -inf above the diagonal."""
    s = scale * q.double() @ k.double().transpose(-1, -2)
    return s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf")).numpy()


def mla_scores(m, x: torch.Tensor) -> np.ndarray:
    """MLA's scores written out here from its parameters (module docstring of mha_viz.variants.latent): the latents
    RMS-normalised, queries and keys [rotary | position-free] with rotate_half pairs (i, i + r/2) turned by
    pos / 10000^(2i/r)."""
    r, L, T = m.variant.rope_dim, m.variant.kv_latent, x.shape[0]

    def rms(v, w):  # v / sqrt(mean(v^2) + eps) * w
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def bias(b):
        return 0 if b is None else b

    with torch.no_grad():
        if m.W_Q is not None:
            q = torch.einsum("td,hde->hte", x, m.W_Q)
        else:
            q = torch.einsum("tc,hce->hte", rms(x @ m.W_DQ + bias(m.b_DQ), m.q_norm), m.W_UQ)
        ckv = x @ m.W_DKV + bias(m.b_DKV)  # (T, L + r)
        k_nope = torch.einsum("tc,hcn->htn", rms(ckv[:, :L], m.kv_norm), m.W_UK)  # (H, T, n)
        k = torch.cat((ckv[:, L:].expand(q.shape[0], T, r), k_nope), dim=-1)  # (H, T, r + n)
        angles = torch.arange(T)[:, None] / 10000.0 ** (torch.arange(0, r, 2) / r)  # (T, r/2)
        cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()

        def turn(v):  # the first r dims rotated: v cos + rotate_half(v) sin
            a, b = v[..., :r // 2], v[..., r // 2:r]
            return torch.cat((v[..., :r] * cos + torch.cat((-b, a), -1) * sin, v[..., r:]), -1)

        return causal_scores(turn(q), turn(k), m.scale)


def dropped_part_breaks_the_sum(sa) -> bool:
    """Leaving out the part with the largest share (its row and column of terms) moves the sum by more than 1e-3."""
    share = np.abs(sa.terms.sum(2) + sa.terms.sum(1) - np.diagonal(sa.terms, axis1=1, axis2=2)).max(0)
    j = int(np.argmax(share))
    kept = np.delete(np.delete(sa.terms, j, axis=1), j, axis=2).sum((1, 2))
    return bool(np.abs(kept - sa.terms.sum((1, 2))).max() > 1e-3)


@pytest.mark.parametrize("params", [{}, {"q_latent": 4, "kv_latent": 8, "rope_dim": 6}])
def test_a_configurable_mla_layer_splits_with_its_latent_norms_frozen(params):
    """MLA: the latent's RMSNorm (and the query latent's) frozen at its scales on x makes queries and keys affine in
    x. For every head and a few queries the terms add up to the scores written out here from the layer's parameters;
    taking the position part out equals the layer run without positional encoding; a dropped part breaks the sum.
    Without the layer given (no norm to freeze) the split is refused."""
    from mha_viz.analysis.score_attribution import input_score_attribution
    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_score_attribution, configurable_trace
    from mha_viz.text import positional_encoding
    from mha_viz.variants import LayerVariant

    cfg, variant = MHAConfig(32, 4, bias=True), LayerVariant("mla", **params)
    m, x = configurable_layer(cfg, variant)
    own = mla_scores(m, x)
    tokens_only = configurable_trace(TEXT, cfg, causal=True, positional=False, variant=variant)
    T = x.shape[0]
    for head, query in itertools.product(range(4), (1, T // 2, T - 1)):
        sa = configurable_score_attribution(TEXT, cfg, head=head, query=query, causal=True, variant=variant)
        assert sa.sources == ("token", "position", "bias") and sa.keys == tuple(range(query + 1))
        assert np.abs(sa.terms.sum((1, 2)) - own[head, query, :query + 1]).max() <= 1e-5
        assert np.abs(sa.removed[1] - tokens_only.weights[head, query]).max() <= 1e-6  # position taken out
        assert dropped_part_breaks_the_sum(sa)
    position = positional_encoding(T, cfg.d_model)
    with pytest.raises(ValueError, match="not affine in its input"):  # the norms not frozen
        input_score_attribution(lambda v: m(v, causal=True), {"token": x - position, "position": position}, head=0,
                                query=T - 1)


def test_a_configurable_differential_layers_two_maps_are_split_each():
    """Differential attention: head h + H is differential head h's second map, as DiffLlama's query heads. Each map's
    terms add up to its scores written out here from the layer's W_Q, W_K, b_Q, b_K; the two rows recombined with the
    layer's lambda are the trace's differential weights; taking the position part out equals the maps of the layer
    run without positional encoding; a dropped part breaks the sum."""
    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_score_attribution, configurable_trace
    from mha_viz.variants import LayerVariant

    cfg, variant = MHAConfig(32, 4, bias=True), LayerVariant("diff")
    m, x = configurable_layer(cfg, variant)
    with torch.no_grad():
        q = torch.einsum("td,hde->hte", x, m.W_Q) + m.b_Q[:, None]  # (4, T, d_k): every map's queries
        k = torch.einsum("td,hde->hte", x, m.W_K) + m.b_K[:, None]
        lam = float(m.lambda_full())
    own = causal_scores(q, k, cfg.d_k ** -0.5)  # (4, T, T): map 1 of head h is query head h, map 2 head h + 2
    trace = configurable_trace(TEXT, cfg, causal=True, variant=variant)
    tokens_only = configurable_trace(TEXT, cfg, causal=True, positional=False, variant=variant)
    H, T = trace.weights.shape[:2]
    assert H == 2
    for head, query in itertools.product(range(H), (1, T // 2, T - 1)):
        maps = [configurable_score_attribution(TEXT, cfg, head=h, query=query, causal=True, variant=variant)
                for h in (head, head + H)]
        for i, sa in enumerate(maps):
            assert sa.head == head + i * H and sa.sources == ("token", "position", "bias")
            assert np.abs(sa.terms.sum((1, 2)) - own[head + i * H, query, :query + 1]).max() <= 1e-5
            assert np.abs(sa.removed[1] - tokens_only.maps[i, head, query]).max() <= 1e-6  # position taken out
            assert dropped_part_breaks_the_sum(sa)
        assert np.abs(maps[0].weights - lam * maps[1].weights - trace.weights[head, query]).max() <= 1e-6
    with pytest.raises(ValueError, match=r"head 4 is not a head of this layer \(0..3\)"):
        configurable_score_attribution(TEXT, cfg, head=2 * H, query=3, causal=True, variant=variant)


@pytest.mark.parametrize("kind", ["mla", "diff"])
def test_trained_mla_and_differential_layers_add_up(kind):
    """A trained layer of either variant is split the configurable layer's way: its terms add up to its own trace's
    scores (a differential head's two maps: map_scores), and dropping a part breaks the sum."""
    from mha_viz.sources import trained_score_attribution
    from mha_viz.training import train
    from mha_viz.variants import LayerVariant

    layer = train("prev-match", 4, 32, steps=30, seed=0, variant=LayerVariant(kind)).layer
    own = layer.trace()
    H, T = own.weights.shape[:2]
    scores = own.scores if own.map_scores is None else own.map_scores.reshape(2 * H, T, T)  # map 2 of h: h + H
    for head in range(len(scores)):
        sa = trained_score_attribution(layer, None, head=head, query=T - 1)
        assert np.abs(sa.terms.sum((1, 2)) - scores[head, T - 1, list(sa.keys)]).max() <= 1e-5
        assert dropped_part_breaks_the_sum(sa)


def test_a_post_norm_encoder_is_split_through_its_frozen_norms():
    """MiniLM (BERT's layout: a LayerNorm after the embeddings and after each sublayer, none before attention): for
    every layer and head, the terms add up to the module's own scale * q . k, recomputed here from what its
    attention received and its query and key Linear layers; a removed source's row is that attention on its input
    without the source, recomputed here; dropping the largest source breaks the sum."""
    m = load_model(None)
    text = "The animal didn't cross the street because it was too tired"
    ids = torch.tensor([m.encode(text).ids])
    T = ids.shape[1]
    layers = m.model.encoder.layer
    seen = {}
    handles = [layer.attention.self.register_forward_pre_hook(
        lambda mod, args, kwargs, i=i: seen.__setitem__(i, args[0] if args else kwargs["hidden_states"]),
        with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            m.model(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
    for layer in range(len(layers)):
        s = layers[layer].attention.self
        H, d = s.num_attention_heads, s.attention_head_size

        def scores(x, s=s, H=H, d=d):  # (H, T, T) scale * q k^T of the module on x (1, T, d_model)
            q, k = (f(x).view(1, T, H, d).transpose(1, 2)[0] for f in (s.query, s.key))
            return q @ k.transpose(-1, -2) / d ** 0.5

        with torch.no_grad():
            own = scores(seen[layer])
        for head, query in itertools.product(range(0, H, 5), (0, T - 1)):
            sa = score_attribution(m, text, layer=layer, head=head, query=query)
            assert sa.keys == tuple(range(T)) and sa.check["sum of sources vs stream"] <= 1e-5
            assert np.abs(sa.terms.sum((1, 2)) - own[head, query].double().numpy()).max() <= 1e-5
            i = int(np.argmax(np.abs(sa.removed - sa.weights).max(1)))  # the source whose removal moves the row most
            source = sa.sources[i]
            stream = score_attribution_sources(m, text, layer)[source]
            with torch.no_grad():
                row = torch.softmax(scores(seen[layer] - stream[None]), -1)[head, query]
            assert np.abs(sa.removed[i] - row.double().numpy()).max() <= 1e-5
            share = np.abs(sa.terms.sum(2) + sa.terms.sum(1) - np.diagonal(sa.terms, axis1=1, axis2=2)).max(0)
            j = int(np.argmax(share))
            kept = np.delete(np.delete(sa.terms, j, axis=1), j, axis=2).sum((1, 2))
            assert np.abs(kept - sa.terms.sum((1, 2))).max() > 1e-3


def score_attribution_sources(m, text, layer):
    """The encoder stream's sources at layer's input, as score attribution splits it (each (T, d))."""
    from mha_viz.analysis.score_streams_normed import EncoderStream

    return EncoderStream(m, m.encode(text).ids, layer).sources


def test_a_trained_layer_finds_a_position_by_position_and_a_letter_by_token():
    """A layer trained on "previous + same letter": the heads that put their weight on the previous token do it
    through the (position x position) term, those that find the latest token with the same letter through
    (token x token). The terms add up to the layer's own scores; the "position taken out" row is the layer run on
    the token embeddings alone, computed here."""
    from mha_viz.sources import trained_score_attribution
    from mha_viz.training import train
    from mha_viz.training.tasks import get_task

    layer = train("prev-match", 4, 32, steps=600, seed=0).layer
    own = layer.trace()
    tokens = layer.probe()
    T = len(tokens)
    query = T - 1
    same_letter = max(j for j in range(query) if tokens[j][0] == tokens[query][0])
    kinds = set()
    model = layer.model()
    vocab = get_task(layer.task).vocab
    ids = torch.tensor([vocab.index(t) for t in tokens])
    with torch.no_grad():
        alone = model.attention(model.tok_emb(ids), causal=True, query_tokens=tokens)  # no position embedding
    for head in range(4):
        sa = trained_score_attribution(layer, None, head=head, query=query)
        assert sa.sources == ("token", "position", "bias") and sa.check["parts vs the input"] <= 1e-5
        assert np.abs(sa.terms.sum((1, 2)) - own.scores[head, query, list(sa.keys)]).max() <= 1e-5
        top = sa.largest(sa.winner, 1)[0][:2]
        if sa.winner == query - 1:
            assert top == ("position", "position")
            kinds.add("previous")
        elif sa.winner == same_letter:
            assert top == ("token", "token")
            kinds.add("same letter")
        assert np.abs(sa.removed[1] - alone.weights[head, query]).max() <= 1e-6  # position taken out
    assert kinds == {"previous", "same letter"}  # the trained layer has both kinds of head


def test_a_differential_heads_two_maps_are_split_each():
    """DiffLlama: query heads i and i + H are differential head i's two softmax maps, and weights = map_1 - lambda
    map_2. Each map's scores split and add up; their rows, recombined with the model's lambda, are the trace's
    differential weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.app.test_app_families import CONFIGS
    from tests.tiny_causal import random_model

    m = PretrainedModel(random_model(AutoModelForCausalLM, CONFIGS["diffllama"][0]()),
                        AutoTokenizer.from_pretrained(bundled_model_dir()), name="diffllama")
    trace = m.trace(TEXT, 1)
    H, T = trace.weights.shape[:2]
    for head in range(H):
        first, second = (score_attribution(m, TEXT, layer=1, head=h, query=T - 1) for h in (head, head + H))
        for sa, map_scores in ((first, trace.map_scores[0, head]), (second, trace.map_scores[1, head])):
            assert np.abs(sa.terms.sum((1, 2)) - map_scores[T - 1, list(sa.keys)]).max() <= 1e-5
        combined = first.weights - trace.lambdas[head] * second.weights
        assert np.abs(combined - trace.weights[head, T - 1]).max() <= 1e-5


def test_latent_attention_is_split_through_its_module_and_a_removal_is_a_forward_pass():
    """DeepSeek-V3 (MLA): no W_Q, W_K per head; with the pre-attention norm and the latent's norms frozen, the module's
    queries and keys are affine in its input, so each source is run through the module itself. The terms add up, and
    a removed source's row equals the unmodified model's own weights with a pre-hook on block 1 subtracting it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.app.test_app_families import CONFIGS
    from tests.tiny_causal import random_model

    m = PretrainedModel(random_model(AutoModelForCausalLM, CONFIGS["deepseek_v3"][0]()),
                        AutoTokenizer.from_pretrained(bundled_model_dir()), name="deepseek_v3")
    T = len(m.encode(TEXT).ids)
    from mha_viz.analysis.score_streams import Stream

    stream = Stream(m, m.encode(TEXT).ids, 1)
    assert stream.inner  # the latent's norm(s), frozen
    moved = 0.0
    for source in ("token", "0.1"):
        attentions = attentions_without(m, m.model.model.layers[1], stream.sources[source].float())
        for head in range(2):
            sa = score_attribution(m, TEXT, layer=1, head=head, query=T - 1)
            assert sa.check["sum of terms vs score"] <= 1e-5
            expected = attentions[1][0, head, T - 1].double().numpy()
            assert np.abs(sa.removed[sa.sources.index(source)] - expected).max() <= 1e-5
            moved = max(moved, float(np.abs(expected - sa.weights).max()))
    assert moved > 1e-3  # the removals mattered: the rows compared are not the unchanged one


@pytest.mark.parametrize("name", ["roberta", "xlm-roberta", "distilbert", "electra"])
def test_other_post_norm_encoders_add_up(name):
    """BERT's layout elsewhere: RoBERTa and XLM-R (positions after the padding id), DistilBERT (no token types, its own
    norm names), ELECTRA (smaller embeddings projected after their norm): every layer and head adds up to the scores
    the trace rebuilds and checks against the model's own weights."""
    from transformers import AutoModel, AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.tiny_causal import random_model
    from tests.unit.test_families import FAMILIES as ENCODERS

    m = PretrainedModel(random_model(AutoModel, ENCODERS[name][1]()), AutoTokenizer.from_pretrained(bundled_model_dir()),
                        name=name)
    T = len(m.encode(TEXT).ids)
    for layer, head in itertools.product(range(2), range(4)):
        sa = score_attribution(m, TEXT, layer=layer, head=head, query=T - 1)
        assert sa.keys == tuple(range(T)) and sa.sources[0] == "token" and "position" in sa.sources
        assert sa.check["sum of terms vs score"] <= 1e-5 and sa.check["sum of sources vs stream"] <= 1e-5


def encoder(name: str, config) -> PretrainedModel:
    """A tiny random encoder (seeded, eager) with the bundled tokenizer."""
    from transformers import AutoModel, AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.tiny_causal import random_model

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    return PretrainedModel(random_model(AutoModel, config), tokenizer, name=name)


def calls(m: PretrainedModel, modules, hook: str = "pre", change=None) -> tuple[dict, object]:
    """One forward pass of m on TEXT with output_attentions: {module: [(args, kwargs) of each call]} (hook "pre") or
    {module: [output of each call]} (hook "post"), and the model's outputs. change(module, call, x) -> x: what a
    pre-hook gives the module instead of its first input on that call (None: nothing changed)."""
    seen = {module: [] for module in modules}

    def pre(module, args, kwargs):
        seen[module].append((args, kwargs))
        if change is None:
            return None
        x = args[0] if args else kwargs["hidden_states"]
        x = change(module, len(seen[module]) - 1, x)
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    def post(module, args, output):
        seen[module].append(output)

    handles = [module.register_forward_pre_hook(pre, with_kwargs=True) if hook == "pre"
               else module.register_forward_hook(post) for module in dict.fromkeys(modules)]
    try:
        with torch.no_grad():
            outputs = m.model(input_ids=torch.tensor([m.encode(TEXT).ids]), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return seen, outputs


def adds_up_and_breaks_without_its_largest_source(sa, own: torch.Tensor) -> None:
    """sa's terms sum to own (keys,) within 1e-5, its sources to the stream; dropping the source whose terms add most
    to a key's score, from both sides, breaks the sum (the negative control)."""
    sums = sa.terms.sum((1, 2))  # (keys,)
    assert np.abs(sums - own.double().numpy()).max() <= 1e-5
    assert sa.check["sum of sources vs stream"] <= 1e-5
    share = np.abs(sa.terms.sum(2) + sa.terms.sum(1) - np.diagonal(sa.terms, axis1=1, axis2=2)).max(0)
    i = int(np.argmax(share))
    kept = np.delete(np.delete(sa.terms, i, axis=1), i, axis=2).sum((1, 2))
    assert np.abs(kept - sums).max() > 1e-3


def test_a_pre_norm_encoder_is_split_through_its_norms_and_rotary():
    """ModernBERT: the normed embeddings, then per layer x + attn(attn_norm(x)) (attn_norm the identity on layer 0)
    and + mlp(mlp_norm(.)); one fused Wqkv, rotary, a sliding window on layer 1. For every layer and head, at two
    queries, the terms add up to the module's own scale * q . k, recomputed here from what it received through its
    Wqkv and transformers' rotary function; a removed source's row is the unmodified model's own attention weights
    with a pre-hook on the block subtracting the source, computed here (the embeddings module's output, or head
    0.h's block of the concat through its columns of Wo)."""
    from transformers import ModernBertConfig
    from transformers.models.modernbert.modeling_modernbert import apply_rotary_pos_emb

    m = encoder("modernbert", ModernBertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, global_attn_every_n_layers=2, local_attention=4, attention_bias=True,
        norm_bias=True, pad_token_id=0, bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102))
    base = m.model
    T, H, d = len(m.encode(TEXT).ids), 4, 8
    attentions = [layer.attn for layer in base.layers]
    received, _ = calls(m, attentions)
    for layer, attention in enumerate(attentions):
        args, kwargs = received[attention][0]
        x = args[0] if args else kwargs["hidden_states"]  # (1, T, 32): attn_norm's output
        with torch.no_grad():
            q, k, _ = attention.Wqkv(x).view(1, T, 3, H, d).unbind(2)  # (1, T, H, d) each
            q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), *kwargs["position_embeddings"])
            own = d ** -0.5 * q[0] @ k[0].transpose(-1, -2)  # (H, T, T)
        for head, query in itertools.product(range(H), (0, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            window = layer == 1  # local_attention 4: keys |i - j| <= 2
            assert sa.keys == (tuple(j for j in range(T) if abs(j - query) <= 2) if window else tuple(range(T)))
            adds_up_and_breaks_without_its_largest_source(sa, own[head, query, list(sa.keys)])
    sa = score_attribution(m, TEXT, layer=1, head=0, query=T - 1)
    assert sa.sources == ("embeddings", "0.0", "0.1", "0.2", "0.3", "0 attention bias", "0 MLP", "bias")
    assert score_attribution(m, TEXT, layer=0, head=0, query=3).sources == ("embeddings", "bias")

    outs, _ = calls(m, [base.embeddings], "post")
    concat, _ = calls(m, [attentions[0].Wo])
    block = concat[attentions[0].Wo][0][0][0][0]  # (T, 32): layer 0's concat
    W_O = attentions[0].Wo.weight.detach()  # (32, 32)
    sources = {"embeddings": outs[base.embeddings][0][0],
               **{f"0.{h}": block[:, h * d:(h + 1) * d] @ W_O[:, h * d:(h + 1) * d].T for h in range(H)}}
    moved = 0.0
    for name, src in sources.items():
        _, without = calls(m, [base.layers[1]], change=lambda module, call, x, src=src: x - src)
        for head in range(H):
            sa = score_attribution(m, TEXT, layer=1, head=head, query=T - 1)
            expected = without.attentions[1][0, head, T - 1].double().numpy()
            assert np.abs(sa.removed[sa.sources.index(name)] - expected).max() <= 1e-5
            moved = max(moved, float(np.abs(expected - sa.weights).max()))
    assert moved > 1e-3  # the removals mattered


def test_albert_is_split_call_by_call_through_its_shared_layer():
    """ALBERT: one layer's modules run as every layer (3 calls), after embeddings of size 16 normed and projected to
    32. For every layer and head, at two queries, the terms add up to the shared module's own scale * q . k on that
    call's input (its query and key Linear layers); layer 0's "token" source is the token embedding through the
    embeddings' LayerNorm frozen at its scale (measured here) and the projection, and its removal is the module on
    its input without it; a later layer's removal is the module on its input without the stream's source."""
    from transformers import AlbertConfig

    m = encoder("albert", AlbertConfig(vocab_size=30522, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                                       num_attention_heads=4, intermediate_size=64, max_position_embeddings=64))
    base = m.model
    a = base.encoder.albert_layer_groups[0].albert_layers[0].attention  # every layer's
    T, H, d = len(m.encode(TEXT).ids), 4, 8
    received, _ = calls(m, [a])
    embedded, _ = calls(m, [base.embeddings.LayerNorm])

    def scores(x):  # (H, T, T) the module's scale * q k^T on x (1, T, 32)
        q, k = (f(x).view(1, T, H, d).transpose(1, 2)[0] for f in (a.query, a.key))
        return a.scaling * q @ k.transpose(-1, -2)

    assert len(received[a]) == 3
    for layer in range(3):
        x = received[a][layer][0][0]  # (1, T, 32): this call's input
        with torch.no_grad():
            own = scores(x)
        for head, query in itertools.product(range(H), (0, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            assert sa.keys == tuple(range(T))
            adds_up_and_breaks_without_its_largest_source(sa, own[head, query])
            source = "token" if layer == 0 else sa.sources[int(np.argmax(np.abs(sa.removed - sa.weights).max(1)))]
            if layer == 0:  # the token embedding through the frozen LayerNorm and the projection, computed here
                norm, project = base.embeddings.LayerNorm, base.encoder.embedding_hidden_mapping_in
                e = embedded[norm][0][0][0][0]  # (T, 16): the embeddings' sum
                token = base.embeddings.word_embeddings(torch.tensor(m.encode(TEXT).ids))
                s = (e.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (T, 1)
                src = (norm.weight * (token - token.mean(-1, keepdim=True)) / s) @ project.weight.T
            else:
                src = score_attribution_sources(m, TEXT, layer)[source]
            with torch.no_grad():
                row = torch.softmax(scores(x - src[None]), -1)[head, query]
            assert np.abs(sa.removed[sa.sources.index(source)] - row.double().numpy()).max() <= 1e-5
            assert np.abs(row.double().numpy() - sa.weights).max() > 1e-3  # the source mattered


def deberta(layers: int = 2, **extra) -> PretrainedModel:
    """A tiny random DeBERTa-v2 with both position terms (c2p and p2c), extra its config's other settings."""
    from transformers import DebertaV2Config

    return encoder("deberta-v2", DebertaV2Config(
        vocab_size=30522, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, relative_attention=True, pos_att_type=["p2c", "c2p"], **extra))


def deberta_scores(s, x: torch.Tensor, kwargs: dict, relative: bool = True) -> torch.Tensor:
    """(H, T, T) a DeBERTa attention module's own pre-softmax scores on x (1, T, d): q . k / sqrt(3 d_k) from its
    query_proj and key_proj, plus (relative) its own disentangled_attention_bias (c2p and p2c) on the call's kwargs."""
    q, k = (s.transpose_for_scores(f(x), s.num_attention_heads) for f in (s.query_proj, s.key_proj))  # (H, T, d_k)
    content = q @ k.transpose(-1, -2) / (3 * s.attention_head_size) ** 0.5
    if not relative:
        return content
    return content + s.disentangled_attention_bias(q, k, kwargs["relative_pos"], kwargs["rel_embeddings"], 3)


def frozen_through(norm: torch.nn.LayerNorm, received: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v (T, d) through norm frozen at its scale on what it received (T, d), its shift left out:
    gamma (v - mean v) / sqrt(var(received) + eps)."""
    s = (received.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (T, 1)
    return norm.weight * (v - v.mean(-1, keepdim=True)) / s


@pytest.mark.parametrize("shared", [True, False])
def test_debertas_position_terms_are_a_source_split_by_query_and_key_source(shared):
    """DeBERTa-v2: score = (q . k + c2p + p2c) / sqrt(3 d), c2p linear in the query and p2c in the key (with shared
    or separate position projections). For every layer and head, at two queries, the table (its "relative position"
    column the c2p terms by query source, its row the p2c terms by key source) adds up to the module's own score,
    recomputed here from what it received through its query_proj, key_proj and its own disentangled_attention_bias,
    and other is empty; removing a source reruns the module without it (c2p and p2c included), and "relative position"
    taken out is the content score's softmax. Layer 0's token source is recomputed here through the frozen norm."""
    extra = ({"share_att_key": True, "position_buckets": 8, "max_relative_positions": 32,
              "norm_rel_ebd": "layer_norm", "position_biased_input": False} if shared
             else {"max_relative_positions": 16})
    m = deberta(**extra)
    base = m.model
    T, H = len(m.encode(TEXT).ids), 4
    modules = [layer.attention.self for layer in base.encoder.layer]
    received, _ = calls(m, modules)
    embedded, _ = calls(m, [base.embeddings.LayerNorm])
    for layer, s in enumerate(modules):
        args, kwargs = received[s][0]
        x = args[0] if args else kwargs["hidden_states"]  # (1, T, 32)
        with torch.no_grad():
            own = deberta_scores(s, x, kwargs)
        for head, query in itertools.product(range(H), (0, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            assert sa.keys == tuple(range(T)) and sa.other == {} and sa.sources[-2:] == ("relative position", "bias")
            adds_up_and_breaks_without_its_largest_source(sa, own[head, query])
            r = sa.sources.index("relative position")
            assert np.abs(sa.terms[:, r, r]).max() == 0 and np.abs(sa.terms[:, r]).max() > 1e-3  # p2c by key source
            assert np.abs(sa.terms[:, :, r]).max() > 1e-3  # c2p by query source
            with torch.no_grad():
                content = torch.softmax(deberta_scores(s, x, kwargs, relative=False), -1)[head, query]
            assert np.abs(sa.removed[r] - content.double().numpy()).max() <= 1e-5
            if layer == 0:  # the token embedding through the embeddings' LayerNorm frozen at its scale, computed here
                norm = base.embeddings.LayerNorm
                token = base.embeddings.word_embeddings(torch.tensor(m.encode(TEXT).ids))
                source, src = "token", frozen_through(norm, embedded[norm][0][0][0][0], token)
            else:
                source = sa.sources[int(np.argmax(np.abs(sa.removed[:r] - sa.weights).max(1)))]
                src = score_attribution_sources(m, TEXT, layer)[source]
            with torch.no_grad():
                row = torch.softmax(deberta_scores(s, x - src[None], kwargs), -1)[head, query]
            assert np.abs(sa.removed[sa.sources.index(source)] - row.double().numpy()).max() <= 1e-5
            assert np.abs(row.double().numpy() - sa.weights).max() > 1e-3  # the source mattered


DEBERTAS = {  # DeBERTa-v2 layouts whose stream passes more than its LayerNorms
    "projected": {"embedding_size": 16, "type_vocab_size": 2, "max_relative_positions": 16},  # embed_proj
    "conv": {"conv_kernel_size": 3, "max_relative_positions": 16},  # a conv layer after layer 0
    "both": {"embedding_size": 16, "conv_kernel_size": 3, "position_biased_input": False, "share_att_key": True,
             "position_buckets": 8, "max_relative_positions": 32, "norm_rel_ebd": "layer_norm"},  # xlarge's layout
}


@pytest.mark.parametrize("name", list(DEBERTAS))
def test_a_debertas_embedding_projection_and_conv_layer_are_split_through(name):
    """DeBERTa-v2 whose embeddings are projected before their LayerNorm (embedding_size != hidden_size) or that has a
    conv layer (conv_kernel_size: layer 1 reads LayerNorm(layer 0's output + tanh(conv(layer 0's input))), as
    DeBERTa-v2-xlarge and xxlarge), or both. For every layer of three and every head, at two queries, the terms add up
    to the module's own score (query_proj, key_proj, its own disentangled_attention_bias) and dropping the largest
    source breaks the sum. Recomputed here from the model's own modules: the token source at layers 0 and 1 (the
    token embedding through embed_proj and every LayerNorm on the way, each frozen at its scale on what it received),
    the conv source at layer 1 (the conv layer's own conv and activation on layer 0's input, through its frozen
    LayerNorm); removing either is the module rerun on its input without it."""
    from transformers.activations import ACT2FN

    m = deberta(layers=3, **DEBERTAS[name])
    e, enc = m.model.embeddings, m.model.encoder
    assert (e.embed_proj is not None) == ("embedding_size" in DEBERTAS[name])
    assert (enc.conv is not None) == ("conv_kernel_size" in DEBERTAS[name])
    T, H = len(m.encode(TEXT).ids), 4
    modules = [layer.attention.self for layer in enc.layer]
    norms = [e.LayerNorm, enc.layer[0].attention.output.LayerNorm, enc.layer[0].output.LayerNorm,
             *([] if enc.conv is None else [enc.conv.LayerNorm])]  # the norms between the token and layer 1
    received, _ = calls(m, [*modules, *norms])

    def first_input(module):  # (1, T, n): what module received on its first call
        args, kwargs = received[module][0]
        return args[0] if args else kwargs["hidden_states"]

    with torch.no_grad():
        token = e.word_embeddings(torch.tensor(m.encode(TEXT).ids))  # (T, e)
        if e.embed_proj is not None:
            token = token @ e.embed_proj.weight.T  # (T, 32): projected before the norm
        own_sources = {0: {"token": frozen_through(e.LayerNorm, first_input(e.LayerNorm)[0], token)}}
        token = own_sources[0]["token"]
        for norm in norms[1:]:
            token = frozen_through(norm, first_input(norm)[0], token)
        own_sources[1] = {"token": token}
        if enc.conv is not None:  # the conv branch on layer 0's input, through the conv layer's frozen LayerNorm
            x0 = first_input(modules[0])  # (1, T, 32)
            branch = ACT2FN[enc.conv.conv_act](enc.conv.conv(x0.transpose(1, 2)).transpose(1, 2))[0]  # (T, 32)
            own_sources[1]["conv"] = frozen_through(enc.conv.LayerNorm, first_input(enc.conv.LayerNorm)[0], branch)
    for layer, s in enumerate(modules):
        x, kwargs = first_input(s), received[s][0][1]  # (1, T, 32) and the call's relative positions
        with torch.no_grad():
            own = deberta_scores(s, x, kwargs)
        split = score_attribution_sources(m, TEXT, layer)
        for source, src in own_sources.get(layer, {}).items():  # the stream's source is the one computed here
            assert (split[source] - src).abs().max() <= 1e-5
        assert ("conv" in split) == (enc.conv is not None and layer > 0)
        moved = dict.fromkeys(own_sources.get(layer, {}), 0.0)  # how far each source's removal moves a row
        for head, query in itertools.product(range(H), (0, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query)
            assert sa.keys == tuple(range(T)) and sa.sources[-2:] == ("relative position", "bias")
            assert ("position" in sa.sources) == DEBERTAS[name].get("position_biased_input", True)
            assert ("token type" in sa.sources) == ("type_vocab_size" in DEBERTAS[name])
            adds_up_and_breaks_without_its_largest_source(sa, own[head, query])
            for source, src in own_sources.get(layer, {}).items():
                with torch.no_grad():
                    row = torch.softmax(deberta_scores(s, x - src[None], kwargs), -1)[head, query].double().numpy()
                assert np.abs(sa.removed[sa.sources.index(source)] - row).max() <= 1e-5
                moved[source] = max(moved[source], float(np.abs(row - sa.weights).max()))
        assert all(change > 1e-3 for change in moved.values()), moved  # each source mattered to some row
