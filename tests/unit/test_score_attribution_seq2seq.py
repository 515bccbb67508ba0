"""Score attribution in encoder-decoders, on tiny random T5 (pre-norm RMSNorm, a relative position bias, no score
scaling) and BART (post-norm LayerNorms, learned positions read at position + 2, embed_scale): for every layer and head
of the encoder's and the decoder's self-attention, at two queries, the (query source x key source) terms plus the bias
sum to the module's own score, recomputed here from what the attention module received through its own q and k Linear
layers and T5's own compute_bias; the sources sum to the stream; a removed source's row is the unmodified model's own
weights with that source subtracted from the layer's block input; dropping the largest source breaks the sum. Their
cross-attention splits the same way, decoder sources against the encoder output's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BartConfig

from mha_viz.analysis import score_attribution
from mha_viz.analysis.score_streams_seq2seq import stack_stream
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import random_model
from tests.unit.test_pretrained_tiny import CONFIGS, ENC_DEC, V

TEXT = "the cat sat on the mat . the cat sat on the mat ."
DECODER_TEXT = "a dog lay on a rug by the door"
NAMES = ("t5", "bart")
BUILD = {"t5": CONFIGS["t5"],  # BART with its embeddings scaled by sqrt(d_model), as BART-large
         "bart": lambda: BartConfig(vocab_size=V, bos_token_id=101, decoder_start_token_id=102, scale_embedding=True,
                                    **ENC_DEC)}
PARTS = ("encoder", "decoder")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    return {name: PretrainedModel(random_model(AutoModel, BUILD[name]()), tokenizer, name=name) for name in NAMES}


def stack(m: PretrainedModel, part: str) -> torch.nn.Module:
    return m.model.encoder if part == "encoder" else m.model.decoder


def block(m: PretrainedModel, part: str, layer: int) -> torch.nn.Module:
    return stack(m, part).block[layer] if m.architecture == "t5" else stack(m, part).layers[layer]


def attention(m: PretrainedModel, part: str, layer: int) -> torch.nn.Module:
    return block(m, part, layer).layer[0].SelfAttention if m.architecture == "t5" else block(m, part, layer).self_attn


def run(m: PretrainedModel, hooks: dict[torch.nn.Module, object]) -> object:
    """The unmodified model's forward pass on TEXT and DECODER_TEXT (shifted right) with forward pre-hooks (with
    kwargs) on modules; output_attentions."""
    ids = torch.tensor([m.encode(TEXT).ids])
    decoder_ids = torch.tensor([m.encode(DECODER_TEXT, decoder=True).ids])
    handles = [module.register_forward_pre_hook(hook, with_kwargs=True) for module, hook in hooks.items()]
    try:
        with torch.no_grad():
            return m.model(input_ids=ids, decoder_input_ids=decoder_ids, output_attentions=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()


def own_scores(m: PretrainedModel, part: str, layer: int) -> torch.Tensor:
    """(H, T, T) the layer's pre-softmax scores, no mask: its module's scaling * q k^T on what the module received
    (hooked here), through its own q and k Linear layers, plus T5's relative position bias from the stack's own
    compute_bias (layer 0 computes it for every layer)."""
    seen = {}
    a = attention(m, part, layer)
    run(m, {a: lambda mod, args, kwargs: seen.update(x=args[0] if args else kwargs["hidden_states"])})
    x = seen["x"]  # (1, T, d)
    t5 = m.architecture == "t5"
    T, H = x.shape[1], a.n_heads if t5 else a.num_heads
    with torch.no_grad():
        projections = (a.q, a.k) if t5 else (a.q_proj, a.k_proj)
        q, k = (f(x).view(1, T, H, -1).transpose(1, 2)[0] for f in projections)  # (H, T, d_k) each
        bias = attention(m, part, 0).compute_bias(T, T)[0] if t5 else 0  # (H, T, T)
        return a.scaling * q @ k.transpose(-1, -2) + bias


def attentions_without(m: PretrainedModel, part: str, layer: int, src: torch.Tensor) -> torch.Tensor:
    """(H, T, T) the unmodified model's own weights of part's layer with src (T, d) subtracted from the layer's block
    input by a forward pre-hook."""
    def without(module, args, kwargs):
        if args:
            return (args[0] - src,) + args[1:], kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"] - src}

    outputs = run(m, {block(m, part, layer): without})
    return outputs[f"{part}_attentions"][layer][0]


@pytest.mark.parametrize("name, part", list(itertools.product(NAMES, PARTS)))
def test_the_terms_sum_to_the_models_own_score_and_a_removal_is_a_forward_pass(models, name, part):
    m = models[name]
    T = len(m.encode(TEXT if part == "encoder" else DECODER_TEXT).ids)
    moved = 0.0
    for layer in range(m.num_layers[part]):
        own = own_scores(m, part, layer)
        stream = stack_stream(m, m.encode(TEXT).ids, m.encode(DECODER_TEXT, decoder=True).ids, part, layer)
        removals = {}
        for head, query in itertools.product(range(own.shape[0]), (1, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query, part=part, decoder_text=DECODER_TEXT)
            assert sa.keys == tuple(range(T if part == "encoder" else query + 1))  # the decoder's: causal
            sums = sa.terms.sum((1, 2)) + sum(sa.other.values())  # (keys,) q . k terms and the position bias
            assert np.abs(sums - own[head, query, list(sa.keys)].double().numpy()).max() <= 1e-5
            assert sa.check["sum of sources vs stream"] <= 1e-5
            assert sa.check["frozen norm vs the attention's input"] <= 1e-5
            # a removal: the source that moves this row most, against a hooked forward pass without it
            i = int(np.argmax(np.abs(sa.removed - sa.weights).max(1)))
            source = sa.sources[i]
            if source not in removals:
                removals[source] = attentions_without(m, part, layer, stream.sources[source])
            expected = removals[source][head, query].double().numpy()
            assert np.abs(sa.removed[i] - expected).max() <= 1e-5
            moved = max(moved, float(np.abs(expected - sa.weights).max()))
            # negative control: the source that adds most, dropped from both sides, no longer adds up
            terms = sa.terms.sum((1, 2))
            share = np.abs(sa.terms.sum(2) + sa.terms.sum(1) - np.diagonal(sa.terms, axis1=1, axis2=2)).max(0)
            j = int(np.argmax(share))
            kept = np.delete(np.delete(sa.terms, j, axis=1), j, axis=2).sum((1, 2))
            assert np.abs(kept - terms).max() > 1e-3
    assert moved > 1e-3  # the removals mattered: the rows compared are not the unchanged one


def test_t5s_token_source_is_its_embedding_and_the_decoder_reads_cross_attention_heads(models):
    m = models["t5"]
    enc, dec = m.encode(TEXT).ids, m.encode(DECODER_TEXT, decoder=True).ids
    stream = stack_stream(m, enc, dec, "decoder", 1)
    with torch.no_grad():
        token = m.model.shared(torch.tensor([dec]))[0]
    assert torch.allclose(stream.sources["token"], token, atol=1e-6)
    sa = score_attribution(m, TEXT, layer=1, head=0, query=3, part="decoder", decoder_text=DECODER_TEXT)
    assert sa.sources == ("token", "0.0", "0.1", "0.2", "0.3", "0 cross.0", "0 cross.1", "0 cross.2", "0 cross.3",
                          "0 MLP", "bias")  # no positions: T5's are the relative bias, a term outside q . k
    assert list(sa.other) == ["relative position bias"] and sa.norm == "RMSNorm"
    assert sa.tokens == tuple(m.encode(DECODER_TEXT, decoder=True).tokens)


def test_the_encoder_is_the_default_part_and_bad_parts_and_keys_are_refused(models):
    m = models["t5"]
    T = len(m.encode(TEXT).ids)
    default = score_attribution(m, TEXT, layer=1, head=2, query=T - 1)
    encoder = score_attribution(m, TEXT, layer=1, head=2, query=T - 1, part="encoder")
    assert default.keys == tuple(range(T)) and np.array_equal(default.terms, encoder.terms)
    with pytest.raises(ValueError, match="part must be one of"):
        score_attribution(m, TEXT, layer=0, head=0, query=1, part="middle")
    with pytest.raises(ValueError, match=f"key {T} is not a position of the {T}-token input"):  # the encoder's keys
        score_attribution(m, TEXT, layer=0, head=0, query=1, key=T, part="cross", decoder_text=DECODER_TEXT)


def cross_attention(m: PretrainedModel, layer: int) -> torch.nn.Module:
    decoder = block(m, "decoder", layer)
    return decoder.layer[1].EncDecAttention if m.architecture == "t5" else decoder.encoder_attn


def own_cross_scores(m: PretrainedModel, layer: int) -> torch.Tensor:
    """(H, T, S) the cross-attention's scores: its module's scaling * q k^T, q from the decoder states it received
    and k from the encoder states (key_value_states), through its own q and k Linear layers (T5: no bias)."""
    seen = {}
    a = cross_attention(m, layer)
    run(m, {a: lambda mod, args, kwargs: seen.update(x=args[0] if args else kwargs["hidden_states"],
                                                    context=kwargs["key_value_states"])})
    t5 = m.architecture == "t5"
    H = a.n_heads if t5 else a.num_heads
    with torch.no_grad():
        q_proj, k_proj = (a.q, a.k) if t5 else (a.q_proj, a.k_proj)
        q = q_proj(seen["x"]).view(1, seen["x"].shape[1], H, -1).transpose(1, 2)[0]  # (H, T, d_k)
        k = k_proj(seen["context"]).view(1, seen["context"].shape[1], H, -1).transpose(1, 2)[0]  # (H, S, d_k)
        return a.scaling * q @ k.transpose(-1, -2)


def cross_without(m: PretrainedModel, layer: int, side: str, src: torch.Tensor) -> torch.Tensor:
    """(H, T, S) the unmodified model's own cross-attention weights of layer with src taken out of one side: "query"
    from the decoder's stream where the layer's cross-attention step reads it (a pre-hook on T5's cross sublayer, on
    BART's encoder_attn); "key" from the encoder's output before its final norm, as this layer's keys read it (a
    pre-hook on the layer's cross-attention module giving it final_layer_norm(output - src) as key_value_states,
    the output hooked at T5's final_layer_norm's input, at BART's last encoder layer's output)."""
    t5 = m.architecture == "t5"
    if side == "query":
        module = block(m, "decoder", layer).layer[1] if t5 else cross_attention(m, layer)
        outputs = run(m, {module: lambda mod, args, kwargs: ((args[0] - src,) + args[1:], kwargs)})
        return outputs.cross_attentions[layer][0]
    seen = {}
    final = m.model.encoder.final_layer_norm if t5 else torch.nn.Identity()
    handle = (final.register_forward_pre_hook(lambda mod, args: seen.update(x=args[0])) if t5 else
              m.model.encoder.layers[-1].register_forward_hook(lambda mod, args, output: seen.update(x=output)))
    try:
        run(m, {})
    finally:
        handle.remove()
    with torch.no_grad():
        keys = final(seen["x"] - src)  # (1, S, d)
    with_keys = {cross_attention(m, layer): lambda mod, args, kwargs: (args, {**kwargs, "key_value_states": keys})}
    outputs = run(m, with_keys)
    return outputs.cross_attentions[layer][0]


@pytest.mark.parametrize("name", NAMES)
def test_cross_attention_splits_decoder_sources_against_encoder_sources(models, name):
    """Queries from the decoder's stream, keys from the encoder's output: for every layer and head, at two queries,
    the (decoder source x encoder source) terms sum to the module's own score; a query source's removal and a key
    source's removal each equal a hooked forward pass without it; dropping the largest key source breaks the sum."""
    m = models[name]
    ids, decoder_ids = m.encode(TEXT).ids, m.encode(DECODER_TEXT, decoder=True).ids
    T, S = len(decoder_ids), len(ids)
    encoder = stack_stream(m, ids, decoder_ids, "encoder", m.num_layers["encoder"])
    moved = 0.0
    for layer in range(m.num_layers["cross"]):
        own = own_cross_scores(m, layer)
        decoder = stack_stream(m, ids, decoder_ids, "decoder", layer, "cross")
        assert f"{layer}.0" in decoder.sources  # the layer's own self-attention heads come before its cross step
        removals = {}
        for head, query in itertools.product(range(own.shape[0]), (1, T - 1)):
            sa = score_attribution(m, TEXT, layer=layer, head=head, query=query, part="cross",
                                   decoder_text=DECODER_TEXT)
            assert sa.keys == tuple(range(S)) and sa.key_tokens == m.encode(TEXT).tokens
            assert sa.sources == (*decoder.sources, "bias") and sa.key_sources == (*encoder.sources, "bias")
            assert sa.terms.shape == (S, len(sa.sources), len(sa.key_sources))
            sums = sa.terms.sum((1, 2)) + sum(sa.other.values())
            assert np.abs(sums - own[head, query].double().numpy()).max() <= 1e-5
            assert sa.check["sum of sources vs stream"] <= 1e-5
            assert sa.check["frozen norm vs the attention's input"] <= 1e-5
            assert sa.check["frozen final norm vs the encoder's output"] <= 1e-5
            n = len(sa.sources) - 1  # removed: the query sources' rows, then the key sources'
            for side, rows, names, stream in (("query", sa.removed[:n], sa.sources, decoder),
                                              ("key", sa.removed[n:], sa.key_sources, encoder)):
                i = int(np.argmax(np.abs(rows - sa.weights).max(1)))
                if (side, names[i]) not in removals:
                    removals[side, names[i]] = cross_without(m, layer, side, stream.sources[names[i]])
                expected = removals[side, names[i]][head, query].double().numpy()
                assert np.abs(rows[i] - expected).max() <= 1e-5
                moved = max(moved, float(np.abs(expected - sa.weights).max()))
            share = np.abs(sa.terms.sum(1)).max(0)  # (key sources,) each one's largest part of a key's score
            j = int(np.argmax(share))
            assert np.abs(np.delete(sa.terms, j, axis=2).sum((1, 2)) - sa.terms.sum((1, 2))).max() > 1e-3
    assert moved > 1e-3


def test_barts_embeddings_are_token_and_position_through_the_frozen_embeddings_norm(models):
    """BART's first sources, computed here: the token embedding times sqrt(d_model) and the learned position
    embedding at row position + 2, each through layernorm_embedding frozen at its scale on their sum (centred,
    times gamma, over s); the norm's beta (and later W_O biases) in "biases (norms, W_O)"."""
    m = models["bart"]
    ids = m.encode(TEXT).ids
    T, encoder = len(ids), m.model.encoder
    with torch.no_grad():
        token = encoder.embed_tokens.weight[list(ids)].double() * m.model.config.d_model ** 0.5  # (T, d)
        position = encoder.embed_positions.weight[2:T + 2].double()  # (T, d)
    norm = encoder.layernorm_embedding
    x = token + position
    s = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps)  # (T, 1)
    stream = stack_stream(m, ids, m.encode(DECODER_TEXT, decoder=True).ids, "encoder", 0)
    assert list(stream.sources) == ["token", "position", "biases (norms, W_O)"]
    for name, part in (("token", token), ("position", position)):
        expected = norm.weight.double() * (part - part.mean(-1, keepdim=True)) / s
        assert (stream.sources[name].double() - expected.detach()).abs().max() <= 1e-5
    sa = score_attribution(m, TEXT, layer=1, head=0, query=3, part="decoder", decoder_text=DECODER_TEXT)
    assert sa.sources == ("token", "position", "0.0", "0.1", "0.2", "0.3", "0 cross.0", "0 cross.1", "0 cross.2",
                          "0 cross.3", "0 MLP", "biases (norms, W_O)", "bias")
    assert sa.other == {} and sa.norm == "no norm"
