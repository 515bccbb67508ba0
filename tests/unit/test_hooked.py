"""A TransformerLens HookedTransformer (random weights from a config, no download) opened by load_model: every traced
intermediate equals TransformerLens's own cache, and head masks equal hook_z zeroed by hand."""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest
import torch

from mha_viz.pretrained import HookedModel, ModelLoadError, hooked_weights, induction_model_dir, load_model
from mha_viz.sources import ModelSource

transformer_lens = pytest.importorskip("transformer_lens")
TEXT = "red fox blue sky red fox green tree"
CONFIGS = {
    "standard": {"positional_embedding_type": "standard", "use_attn_result": True},
    "rotary, grouped-query": {"positional_embedding_type": "rotary", "rotary_dim": 6, "n_key_value_heads": 2,
                              "normalization_type": "RMS", "use_attn_result": True},
    "shortformer, local window, soft-cap": {
        "positional_embedding_type": "shortformer", "attn_types": ["local", "global"], "window_size": 3,
        "use_local_attn": True, "scale_attn_by_inverse_layer_idx": True, "attn_scores_soft_cap": 4.0,
        "normalization_type": "LNPre", "use_attn_result": True},
}


def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(induction_model_dir())  # 169 tokens, <bos> = 0


def hooked(with_tokenizer: bool = True, **overrides: Any) -> Any:
    """A 2-layer, 4-head HookedTransformer with seeded random weights (biases too, so they count)."""
    tok = tokenizer()
    kwargs = {"n_layers": 2, "d_model": 32, "n_ctx": 64, "d_head": 8, "n_heads": 4, "d_vocab": len(tok),
              "act_fn": "gelu", "seed": 0, **overrides}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "HookedTransformer is deprecated" (3.9 says so)
        model = transformer_lens.HookedTransformer(transformer_lens.HookedTransformerConfig(**kwargs),
                                                   tokenizer=tok if with_tokenizer else None)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split(".")[-1].startswith("b_"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


@pytest.fixture(scope="module", params=list(CONFIGS))
def pair(request: pytest.FixtureRequest) -> tuple[Any, HookedModel, dict]:
    """(the HookedTransformer, load_model of it, its cache on TEXT)."""
    ht = hooked(**CONFIGS[request.param])
    model = load_model(ht)
    _, cache = ht.run_with_cache(ht.to_tokens(TEXT))
    return ht, model, {name: t[0].detach().numpy() for name, t in cache.items()}


def close(a: np.ndarray, b: np.ndarray, atol: float = 1e-5) -> bool:
    return a.shape == b.shape and np.allclose(a, b, atol=atol)


def test_every_layer_equals_transformer_lens_cache(pair: tuple[Any, HookedModel, dict]) -> None:
    ht, model, cache = pair
    assert isinstance(model, HookedModel) and model.kind == "decoder" and model.parts == ("decoder",)
    assert model.tokens(TEXT) == ht.to_str_tokens(TEXT)  # [BOS] + tokens, TransformerLens's prepend_bos
    traces = model.traces(TEXT)
    assert len(traces) == ht.cfg.n_layers
    for layer, trace in enumerate(traces):
        c = {name.removeprefix(f"blocks.{layer}."): t for name, t in cache.items() if name.startswith(f"blocks.{layer}.")}
        assert close(trace.weights, c["attn.hook_pattern"])  # (H, T, T)
        assert close(trace.head_outputs, c["attn.hook_z"].transpose(1, 0, 2))  # (H, T, d_v) from [T, H, d_v]
        assert close(trace.concat, c["attn.hook_z"].reshape(len(trace.query_tokens), -1))
        assert close(trace.head_contributions(), c["attn.hook_result"].transpose(1, 0, 2), 1e-4)  # (H, T, d_model)
        assert close(trace.output, c["hook_attn_out"])
        assert close(trace.concat @ trace.W_O.T + trace.b_O, trace.output, 1e-4)
        finite = np.isfinite(c["attn.hook_attn_scores"])
        assert np.array_equal(np.isfinite(trace.scores), finite)  # the same keys hidden (causal, window)
        assert np.allclose(trace.scores[finite], c["attn.hook_attn_scores"][finite], atol=1e-4)
        rotated = c.get("attn.hook_rot_q", c["attn.hook_q"])
        assert close(trace.queries, rotated.transpose(1, 0, 2))
        attn = ht.blocks[layer].attn
        assert close(trace.W_Q, attn.W_Q.detach().numpy()) and close(trace.W_K, attn.W_K.detach().numpy())
        assert trace.scale == pytest.approx(1 / attn.attn_scale)
        assert max(trace.meta["check"].values()) < 1e-5
        assert trace.meta["layer"] == layer and trace.causal
        single = model.trace(TEXT, layer)
        assert np.array_equal(single.weights, trace.weights) and np.array_equal(single.output, trace.output)
    assert close(model.attentions(TEXT), np.stack([cache[f"blocks.{i}.attn.hook_pattern"] for i in range(2)]))


def test_grouped_query_and_window_layers_are_read_as_configured() -> None:
    gqa = load_model(hooked(**CONFIGS["rotary, grouped-query"])).trace(TEXT, 0)
    assert gqa.kv_heads == (0, 0, 1, 1)
    for x in (gqa.keys, gqa.values, gqa.W_K):  # query heads 0 and 1 read K/V head 0, heads 2 and 3 K/V head 1
        assert np.array_equal(x[0], x[1]) and np.array_equal(x[2], x[3]) and not np.allclose(x[0], x[2])
    window = load_model(hooked(**CONFIGS["shortformer, local window, soft-cap"])).traces(TEXT)
    assert window[0].meta["window"] == 3 and "window" not in window[1].meta
    assert np.array_equal(window[0].weights, np.triu(window[0].weights, -2))  # 3 keys: i-2 ... i
    assert window[0].weights[:, 5, 1].max() == 0 and window[1].weights[:, 5, 1].min() > 0
    assert window[0].softcap == 4.0 and np.abs(window[0].scores[np.isfinite(window[0].scores)]).max() <= 4.0


def test_next_token_probs_and_head_masks_equal_transformer_lens_with_hook_z_zeroed() -> None:
    ht = hooked(**CONFIGS["rotary, grouped-query"])
    model = load_model(ht)
    tokens = ht.to_tokens(TEXT)
    with torch.no_grad():
        logits = ht(tokens)[0, -1]
    assert close(model.next_token_probs(TEXT), logits.softmax(-1).numpy(), 1e-6)

    def zero_heads(z: torch.Tensor, hook: Any) -> torch.Tensor:
        z = z.clone()
        z[:, :, [1, 3]] = 0.0
        return z

    with torch.no_grad():
        knocked = ht.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", zero_heads)])[0, -1]
    probs = model.next_token_probs(TEXT, head_masks={0: [1, 0, 1, 0]})
    assert close(probs, knocked.softmax(-1).numpy(), 1e-6)
    assert not np.allclose(probs, logits.softmax(-1).numpy(), atol=1e-4)  # the knockout changed something
    hidden = model.final_hidden(TEXT, head_masks={0: [1, 0, 1, 0]})  # (T, d_model): what the unembedding reads
    assert close(hidden[-1] @ ht.W_U.detach().numpy() + ht.b_U.detach().numpy(), knocked.numpy(), 1e-4)
    masked = model.trace(TEXT, 0, head_mask=[1, 0, 1, 0])
    assert not masked.head_outputs[[1, 3]].any() and masked.head_outputs[[0, 2]].any()
    assert max(masked.meta["check"].values()) < 1e-5


def test_model_source_takes_a_hooked_model() -> None:
    model = load_model(hooked(), max_tokens=5)
    source = ModelSource(model, TEXT, "decoder")
    assert source.num_layers == 2 and source.causal_lm
    trace = source.trace(1)
    assert len(trace.query_tokens) == 5 and trace.meta["truncated"] == len(model.tokenizer.tokenize(TEXT)) + 1 - 5
    assert source.attentions().shape == (2, 4, 5, 5)
    assert source.with_text("red fox").trace(0).query_tokens == ("<bos>", "red", "fox")
    from mha_viz.analysis import detect_heads

    assert detect_heads(model)["induction"].shape == (2, 4)


def test_hooked_weights_is_transformer_lens_layout() -> None:
    ht = hooked(**CONFIGS["shortformer, local window, soft-cap"])
    w = hooked_weights(load_model(ht))
    assert w["W_Q"].shape == (2, 4, 32, 8) and w["W_O"].shape == (2, 4, 8, 32) and w["b_O"].shape == (2, 32)
    assert np.array_equal(w["W_V"][1], ht.blocks[1].attn.W_V.detach().numpy())
    assert w["W_E"].shape == (ht.cfg.d_vocab, 32) and w["W_pos"].shape == (64, 32) and w["W_U"].shape == (32, ht.cfg.d_vocab)
    assert w["normalization"] == "LNPre" and w["ln_folded"]
    rotary = hooked_weights(hooked(**CONFIGS["rotary, grouped-query"]))
    assert rotary["W_pos"] is None and not rotary["ln_folded"] and rotary["W_K"].shape == (2, 4, 32, 8)


def test_what_cannot_be_traced_is_refused_clearly() -> None:
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        load_model(hooked(with_tokenizer=False))
    assert load_model(hooked(with_tokenizer=False), tokenizer=tokenizer()).tokens("red") == ["<bos>", "red"]
    with pytest.raises(ModelLoadError, match="alibi"):
        load_model(hooked(positional_embedding_type="alibi"))
    with pytest.raises(ModelLoadError, match="adjacent pairs"):
        load_model(hooked(positional_embedding_type="rotary", rotary_dim=8, rotary_adjacent_pairs=True))
    with pytest.raises(ModelLoadError, match="d_vocab"):
        load_model(hooked(d_vocab=50, with_tokenizer=False), tokenizer=tokenizer())
    with pytest.raises(ValueError, match="tokenizer is for a HookedTransformer"):
        load_model("gpt2", tokenizer=tokenizer())
    model = HookedModel(hooked(), prepend_bos=False)
    assert model.tokens("red fox") == ["red", "fox"]
    with pytest.raises(IndexError):
        model.trace(TEXT, 2)
    with pytest.raises(ValueError, match="4 finite values"):
        model.next_token_probs(TEXT, head_masks={0: [1, 0]})


@pytest.mark.slow
def test_importing_mha_viz_pretrained_does_not_import_transformer_lens() -> None:
    code = "import sys, mha_viz.pretrained, mha_viz; mha_viz.load_model; print('transformer_lens' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_greedy_generation_writes_what_transformer_lens_generate_writes() -> None:
    ht = hooked(**CONFIGS["shortformer, local window, soft-cap"])
    model = load_model(ht)
    gen = model.generate("red fox blue", 6)
    tokens = ht.to_tokens("red fox blue")  # (1, 4)
    with torch.no_grad():
        theirs = ht.generate(tokens, max_new_tokens=6, do_sample=False, stop_at_eos=False, verbose=False)
    assert gen.token_ids == tuple(theirs[0, tokens.shape[1]:].tolist())
    assert gen.prompt_ids == tuple(tokens[0].tolist()) and gen.windows == (3, None)
    last = model.attentions_for_ids(gen.input_ids(2))[:, :, -1]  # (L, H, keys): the query that predicted step 2
    assert close(gen.steps[2].attentions, last, 1e-6)
    assert close(gen.steps[0].probs, model.next_token_probs("red fox blue"), 1e-6)


@pytest.mark.parametrize("normalization", ["LN", "RMS"])
def test_head_weights_fold_the_norms_as_transformer_lens_processes_them(normalization: str) -> None:
    """HookedModel.head_weights folds each block's ln1 and ln_final (random weights and biases, so they count) into
    the matrices exactly as TransformerLens's process_weights_ does (fold_ln, center_writing_weights)."""
    import copy

    ht = hooked(normalization_type=normalization)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in ht.named_parameters():
            if "ln" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    ours = load_model(ht).head_weights()
    processed = copy.deepcopy(ht)
    processed.process_weights_(fold_ln=True, center_writing_weights=True, center_unembed=False)
    theirs = hooked_weights(processed)
    assert ours.norm == {"LN": "LayerNorm", "RMS": "RMSNorm"}[normalization]
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "W_E", "W_pos", "W_U", "b_U"):
        np.testing.assert_allclose(getattr(ours, name), theirs[name], atol=2e-5, err_msg=name)
    value_bias = np.einsum("lhv,lhvd->ld", ours.b_V, ours.W_O)  # TransformerLens moves b_V into b_O (fold_value_biases)
    np.testing.assert_allclose(ours.b_O + value_bias, theirs["b_O"], atol=2e-5)
    assert not np.allclose(ours.W_Q, hooked_weights(ht)["W_Q"], atol=1e-3)  # folding changed something


def test_logit_attribution_adds_up_to_the_logit_and_equals_transformer_lens_per_head(pair) -> None:
    """Each head's direct contribution equals TransformerLens's own (stack_head_results with apply_ln, the final
    norm's scale at that position, times W_U[:, token]), and all terms add up to the model's logit."""
    ht, model, _ = pair
    with torch.no_grad():
        logits, cache = ht.run_with_cache(ht.to_tokens(TEXT))
    for position in (3, -1):
        a = model.logit_attribution(TEXT, position=position)
        assert a.token_id == int(logits[0, position].argmax())
        assert abs(a.total - a.logit) < 1e-4 and a.logit == pytest.approx(float(logits[0, position, a.token_id]), abs=1e-5)
        assert a.residual_error < 1e-4
        stacked = cache.stack_head_results(layer=-1, pos_slice=position, apply_ln=True)  # (L*H, 1, d)
        theirs = (stacked[:, 0] @ ht.W_U[:, a.token_id]).detach().numpy().reshape(a.heads.shape)
        np.testing.assert_allclose(a.heads, theirs, atol=1e-4)


def test_a_failed_check_speaks_up_for_a_hooked_model_too(monkeypatch) -> None:
    """A HookedModel whose soft-cap reading is wrong (1.0 where the model has none) warns, or with strict raises."""
    from mha_viz import TraceCheckError, TraceCheckWarning

    model = load_model(hooked(**CONFIGS["standard"]))
    monkeypatch.setattr(HookedModel, "_softcap", lambda self: 1.0)
    with pytest.warns(TraceCheckWarning, match=r"decoder layer 0: .*weights vs hook_pattern: max \|difference\|"):
        model.trace(TEXT, 0)
    with pytest.raises(TraceCheckError, match="tolerance"):
        model.traces(TEXT, strict=True)
    strict = load_model(hooked(**CONFIGS["standard"]), strict=True)
    assert strict.strict is True
    with pytest.raises(TraceCheckError):
        strict.trace(TEXT, 1)


def test_should_stop_ends_a_hooked_generation_between_tokens_keeping_the_tokens_written() -> None:
    model = load_model(hooked(**CONFIGS["shortformer, local window, soft-cap"]))
    full = model.generate("red fox blue", 6)
    asked: list[int] = []
    cut = model.generate("red fox blue", 6, should_stop=lambda: asked.append(1) or len(asked) > 1)
    assert cut.stop_reason == "stopped" and cut.token_ids == full.token_ids[:2] and len(asked) == 2
    assert close(cut.steps[1].attentions, full.steps[1].attentions, 0)
