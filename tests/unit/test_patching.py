"""Causal patching (mha_viz.analysis.patching) and mean/resample knockout: against patches written directly with
torch hooks on the transformers models, against TransformerLens's patching functions on the same weights, exact
properties (patching what does not differ changes nothing, patching what differs restores the clean run), and known
answers on the bundled induction model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.analysis import (
    PAIRS,
    activation_patching,
    model_knockout,
    model_knockout_ranking,
    next_token_knockout,
    pairs_for,
    patch_heads,
    path_patching,
    path_patching_scan,
)
from mha_viz.analysis.patching import _pattern_hooks, _Runs
from mha_viz.pretrained import INDUCTION_MODEL, PretrainedModel, load_model
from tests.tiny_causal import tiny_causal

pytestmark = pytest.mark.usefixtures("one_thread")

CLEAN = "the cat sat on the warm mat"
CORRUPTED = "the dog sat on the warm mat"  # one token differs (position 2 after [CLS])
ANSWER, WRONG = "mat", "cat"


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tiny(request) -> PretrainedModel:
    return tiny_causal(request.param)


@pytest.fixture(scope="module")
def induction() -> PretrainedModel:
    return load_model(INDUCTION_MODEL)


def _differing(model: PretrainedModel) -> int:
    a, b = model.encode(CLEAN).ids, model.encode(CORRUPTED).ids
    (p,) = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    return p


def _metric(model: PretrainedModel, logits: torch.Tensor) -> float:
    vocab = model.tokenizer.get_vocab()
    last = logits[0, -1].double()
    return float(last[vocab[ANSWER]] - last[vocab[WRONG]])


def _ids(model: PretrainedModel, text: str) -> torch.Tensor:
    return torch.tensor([list(model.encode(text).ids)])


def _attn(model: PretrainedModel, layer: int):
    base = model.model.base_model
    return base.h[layer].attn if model.architecture == "gpt2" else base.layers[layer].self_attn


def _out_proj(model: PretrainedModel, layer: int) -> torch.nn.Module:
    a = _attn(model, layer)
    return a.c_proj if model.architecture == "gpt2" else a.o_proj


def _blocks(model: PretrainedModel):
    base = model.model.base_model
    return base.h if model.architecture == "gpt2" else base.layers


@torch.no_grad()
def _direct_head_patch(model: PretrainedModel, source: str, target: str, layer: int, head: int, position=None) -> float:
    """Head `head`'s input to the output projection of `layer` from the source run, in the target run: hooks only."""
    proj = _out_proj(model, layer)
    kept = {}
    handle = proj.register_forward_pre_hook(lambda m, args: kept.__setitem__("x", args[0].clone()))
    model.model(_ids(model, source))
    handle.remove()
    d = kept["x"].shape[-1] // model.num_heads["decoder"]
    where = slice(None) if position is None else position

    def patch(m, args):
        x = args[0].clone()
        x[0, where, head * d : (head + 1) * d] = kept["x"][0, where, head * d : (head + 1) * d]
        return (x,)

    handle = proj.register_forward_pre_hook(patch)
    try:
        return _metric(model, model.model(_ids(model, target)).logits)
    finally:
        handle.remove()


@torch.no_grad()
def _direct_resid_patch(model: PretrainedModel, source: str, target: str, layer: int, position: int) -> float:
    """The hidden state entering block `layer` at position, from the source run, in the target run."""
    hidden = model.model(_ids(model, source), output_hidden_states=True).hidden_states[layer]  # the block's input

    def patch(m, args, kwargs):
        x = (args[0] if args else kwargs["hidden_states"]).clone()
        x[0, position] = hidden[0, position]
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    handle = _blocks(model)[layer].register_forward_pre_hook(patch, with_kwargs=True)
    try:
        return _metric(model, model.model(_ids(model, target)).logits)
    finally:
        handle.remove()


@torch.no_grad()
def _plain(model: PretrainedModel, text: str) -> float:
    return _metric(model, model.model(_ids(model, text)).logits)


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_head_and_residual_patching_equal_patches_written_with_hooks(tiny, direction):
    clean, corrupted = _plain(tiny, CLEAN), _plain(tiny, CORRUPTED)
    source, target = (CLEAN, CORRUPTED) if direction == "denoise" else (CORRUPTED, CLEAN)
    heads = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, direction=direction)
    assert heads.scores.shape == (2, 4)
    assert heads.clean == pytest.approx(clean, abs=1e-5) and heads.corrupted == pytest.approx(corrupted, abs=1e-5)
    direct = np.array([[_direct_head_patch(tiny, source, target, layer, h) for h in range(4)] for layer in range(2)])
    np.testing.assert_allclose(heads.raw(), direct, atol=1e-4)
    np.testing.assert_allclose(heads.scores, (direct - corrupted) / (clean - corrupted), atol=1e-4)
    by_pos = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, direction=direction,
                                 site="head_position")
    T = len(tiny.encode(CLEAN).ids)
    assert by_pos.scores.shape == (2, 4, T)
    for layer, h, p in [(0, 1, _differing(tiny)), (1, 3, T - 1), (1, 0, 4)]:
        assert by_pos.raw()[layer, h, p] == pytest.approx(_direct_head_patch(tiny, source, target, layer, h, p), abs=1e-4)
    resid = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, direction=direction,
                                site="residual")
    assert resid.scores.shape == (2, T)
    direct = np.array([[_direct_resid_patch(tiny, source, target, layer, p) for p in range(T)] for layer in range(2)])
    np.testing.assert_allclose(resid.raw(), direct, atol=1e-4)


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_patching_what_does_not_differ_changes_nothing_and_patching_the_difference_restores_the_run(tiny, direction):
    p = _differing(tiny)
    unchanged, restored = (0.0, 1.0) if direction == "denoise" else (1.0, 0.0)
    resid = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, site="residual",
                                direction=direction)
    by_pos = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, site="head_position",
                                 direction=direction)
    # a causal model: nothing before the differing token differs, so patching it changes nothing
    np.testing.assert_allclose(resid.scores[:, :p], unchanged, atol=1e-5)
    np.testing.assert_allclose(by_pos.scores[:, :, :p], unchanged, atol=1e-5)
    # the residual stream entering layer 0 differs only at p: patching it there is the other run, exactly
    assert resid.scores[0, p] == pytest.approx(restored, abs=1e-5)
    np.testing.assert_allclose(resid.scores[0, p + 1 :], unchanged, atol=1e-5)  # layer 0's input after p: same token
    # the last layer's residual stream at the last position carries everything the LM head reads
    assert resid.scores[-1, -1] != pytest.approx(unchanged, abs=1e-3)


def test_pattern_patching_rebuilds_the_models_own_output_and_matches_a_pattern_changed_by_hand(tiny):
    run = _Runs(tiny, CLEAN, CORRUPTED, ANSWER, WRONG, None, "denoise")
    plain = run.metric_of(run.clean.ids, 2)
    for layer in range(run.L):  # every head's block rebuilt as (its own pattern) @ V: the model's own output
        patches = [(b, h, run.clean.pattern[layer][h]) for b in range(2) for h in range(run.H)]
        with _pattern_hooks(run, run.sites[layer], layer, patches):
            np.testing.assert_allclose(run.metric_of(run.clean.ids, 2), plain, atol=1e-5)
    # a uniform causal pattern in one head changes the output as computing that head by hand does
    T = run.T
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    with _pattern_hooks(run, run.sites[1], 1, [(0, 2, uniform)]):
        patched = run.metric_of(run.clean.ids, 1)[0]
    assert patched != pytest.approx(plain[0], abs=1e-4)
    scores = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, site="pattern")
    assert scores.scores.shape == (2, 4) and np.isfinite(scores.scores).all()
    assert np.abs(scores.scores[0]).max() > 1e-4  # layer 0 sees the differing token, so its patterns differ


@pytest.mark.parametrize("metric", ["logprob", "prob"])
def test_probability_metrics_are_the_answers_log_prob_and_prob(tiny, metric):
    with torch.no_grad():
        logp = [float(tiny.model(_ids(tiny, t)).logits[0, -1].double().log_softmax(-1)[tiny.tokenizer.get_vocab()[ANSWER]])
                for t in (CLEAN, CORRUPTED)]
    r = activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, metric=metric)
    expected = logp if metric == "logprob" else np.exp(logp)
    assert (r.clean, r.corrupted) == pytest.approx(tuple(expected), abs=1e-6)
    assert r.metric == metric and r.wrong is None and r.answer == ANSWER


def test_bad_inputs_are_clear_errors(tiny):
    with pytest.raises(ValueError, match="same number of tokens"):
        activation_patching(tiny, CLEAN, "the dog sat", answer=ANSWER, wrong=WRONG)
    with pytest.raises(ValueError, match="not a token"):
        activation_patching(tiny, CLEAN, CORRUPTED, answer="qqqxzzy", wrong=WRONG)
    with pytest.raises(ValueError, match="limit of 3"):
        activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, max_passes=3)
    with pytest.raises(ValueError, match="nothing to restore"):
        activation_patching(tiny, CLEAN, CLEAN, answer=ANSWER, wrong=WRONG)
    with pytest.raises(ValueError, match="site must be"):
        activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, site="mlp")
    with pytest.raises(ValueError, match="wrong token"):
        activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, metric="logit_diff")
    with pytest.raises(ValueError, match="not a head"):
        path_patching(tiny, CLEAN, CORRUPTED, sender=(0, 9), receivers=[(1, 0)], answer=ANSWER, wrong=WRONG)


def test_progress_is_reported_per_batch(tiny):
    seen = []
    activation_patching(tiny, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, site="head_position",
                        on_pass=lambda done, total: seen.append((done, total)))
    T = len(tiny.encode(CLEAN).ids)
    assert seen[-1] == (2 * 4 * T, 2 * 4 * T) and len(seen) == -(-2 * 4 * T // 16)


# ---- path patching -------------------------------------------------------------------------------------------


@torch.no_grad()
def _direct_path_patch(model: PretrainedModel, sender, receiver, through: str) -> float:
    """Wang et al.'s three runs, noising, written with hooks on the GPT-2 modules: heads frozen at the clean run."""
    H = model.num_heads["decoder"]
    concat = {}
    for name, text in (("clean", CLEAN), ("corrupted", CORRUPTED)):
        handles = [_out_proj(model, layer).register_forward_pre_hook(
            lambda m, a, key=(name, layer): concat.__setitem__(key, a[0].clone())) for layer in range(2)]
        model.model(_ids(model, text))
        for handle in handles:
            handle.remove()
    d = concat["clean", 0].shape[-1] // H

    def freeze(layer):
        def hook(m, args):
            x = concat["clean", layer].clone()
            if layer == sender[0]:
                x[..., sender[1] * d : (sender[1] + 1) * d] = concat["corrupted", layer][..., sender[1] * d : (sender[1] + 1) * d]
            return (x,)
        return hook

    cols = slice("qkv".index(through) * H * d + receiver[1] * d, "qkv".index(through) * H * d + (receiver[1] + 1) * d)
    c_attn = _attn(model, receiver[0]).c_attn
    kept = {}
    handles = [_out_proj(model, layer).register_forward_pre_hook(freeze(layer)) for layer in range(2)]
    handles.append(c_attn.register_forward_hook(lambda m, a, out: kept.__setitem__("x", out[..., cols].clone())))
    model.model(_ids(model, CLEAN))
    for handle in handles:
        handle.remove()

    def put(m, a, out):
        out = out.clone()
        out[..., cols] = kept["x"]
        return out

    handle = c_attn.register_forward_hook(put)
    try:
        return _metric(model, model.model(_ids(model, CLEAN)).logits)
    finally:
        handle.remove()


@pytest.mark.parametrize("through", ["q", "k", "v"])
def test_path_patching_equals_the_three_runs_written_with_hooks(through):
    model = tiny_causal("gpt2")
    clean, corrupted = _plain(model, CLEAN), _plain(model, CORRUPTED)
    for sender, receiver in [((0, 1), (1, 2)), ((0, 3), (1, 0))]:
        got = path_patching(model, CLEAN, CORRUPTED, sender=sender, receivers=[receiver], through=through,
                            answer=ANSWER, wrong=WRONG)
        direct = _direct_path_patch(model, sender, receiver, through)
        assert got.value == pytest.approx(direct, abs=1e-4)
        assert got.score == pytest.approx((direct - corrupted) / (clean - corrupted), abs=1e-4)
        assert abs(direct - clean) > 1e-4  # the path carries something, so the check can fail
    scan = path_patching_scan(model, CLEAN, CORRUPTED, receivers=[(1, 2)], through=through, answer=ANSWER,
                              wrong=WRONG)
    assert scan.scores.shape == (2, 4) and np.isnan(scan.scores[1]).all()  # no path from layer 1 to layer 1
    single = path_patching(model, CLEAN, CORRUPTED, sender=(0, 1), receivers=[(1, 2)], through=through,
                           answer=ANSWER, wrong=WRONG)
    assert scan.scores[0, 1] == pytest.approx(single.score, abs=1e-5)


def test_path_patching_with_grouped_query_attention_runs_and_a_late_sender_changes_nothing():
    model = tiny_causal("llama")
    for through in "qkv":
        got = path_patching(model, CLEAN, CORRUPTED, sender=(0, 1), receivers=[(1, 3)], through=through,
                            answer=ANSWER, wrong=WRONG)
        assert np.isfinite(got.score)
        late = path_patching(model, CLEAN, CORRUPTED, sender=(1, 1), receivers=[(1, 3)], through=through,
                             answer=ANSWER, wrong=WRONG)
        assert late.score == pytest.approx(1.0, abs=1e-5)  # noising: a sender in the receiver's layer cannot reach it


# ---- TransformerLens ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_in_both():
    tl = pytest.importorskip("transformer_lens")
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    model = tiny_causal("gpt2")
    c = model.model.config
    cfg = tl.HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
        d_mlp=4 * c.n_embd, d_vocab=c.vocab_size, act_fn="gelu_new", normalization_type="LN", eps=c.layer_norm_epsilon,
        positional_embedding_type="standard", default_prepend_bos=False,
    )  # fmt: skip
    hooked = tl.HookedTransformer(cfg)
    hooked.load_state_dict(convert_gpt2_weights(model.model, cfg), strict=False)
    hooked.eval()
    ids = _ids(model, CLEAN)
    with torch.no_grad():
        torch.testing.assert_close(hooked(ids), model.model(ids).logits, atol=1e-4, rtol=1e-4)
    return model, hooked


@pytest.mark.parametrize(
    ("site", "tl_name"),
    [("head", "get_act_patch_attn_head_out_all_pos"), ("residual", "get_act_patch_resid_pre"),
     ("pattern", "get_act_patch_attn_head_pattern_all_pos"), ("head_position", "get_act_patch_attn_head_out_by_pos")],
)
@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_patching_equals_transformer_lens_patching(gpt2_in_both, site, tl_name, direction):
    from transformer_lens import patching

    model, hooked = gpt2_in_both
    vocab = model.tokenizer.get_vocab()
    source, target = (CLEAN, CORRUPTED) if direction == "denoise" else (CORRUPTED, CLEAN)
    _, source_cache = hooked.run_with_cache(_ids(model, source))

    def metric(logits):
        return logits[0, -1, vocab[ANSWER]] - logits[0, -1, vocab[WRONG]]

    with torch.no_grad():
        expected = getattr(patching, tl_name)(hooked, _ids(model, target), source_cache, metric).numpy()
    if site == "head_position":
        expected = expected.transpose(0, 2, 1)  # TransformerLens: [layer, pos, head]
    ours = activation_patching(model, CLEAN, CORRUPTED, answer=ANSWER, wrong=WRONG, site=site, direction=direction)
    np.testing.assert_allclose(ours.raw(), expected, atol=2e-4)
    assert np.ptp(expected) > 1e-2  # the units differ, so the comparison means something


# ---- the bundled induction model -----------------------------------------------------------------------------


def test_pairs_of_the_induction_model_have_equal_lengths_and_flip_the_answer(induction):
    pairs = pairs_for(INDUCTION_MODEL)
    assert len(pairs) == len(PAIRS) >= 2
    for p in pairs.values():
        r = activation_patching(induction, p.clean, p.corrupted, answer=p.answer, wrong=p.wrong)
        assert r.clean > 2 and r.corrupted < r.clean - 2


def test_layer_one_induction_heads_restore_the_logit_difference(induction):
    p = PAIRS["induction: first follower changes"]
    heads = [(1, h) for h in range(4)]
    assert patch_heads(induction, p.clean, p.corrupted, heads, answer=p.answer, wrong=p.wrong) > 0.9
    assert patch_heads(induction, p.clean, p.corrupted, heads, answer=p.answer, wrong=p.wrong, direction="noise") < 0.1
    single = activation_patching(induction, p.clean, p.corrupted, answer=p.answer, wrong=p.wrong)
    assert (single.scores[1] > 0.1).all()  # every induction head carries part of it
    assert single.scores[0, 2] == pytest.approx(0.0, abs=1e-3)  # the previous-token head reads 'red' in both


def test_the_previous_token_head_reaches_the_induction_heads_through_their_keys(induction):
    p = PAIRS["induction: longer repeat"]
    receivers = [(1, h) for h in range(4)]
    scans = {t: path_patching_scan(induction, p.clean, p.corrupted, receivers=receivers, through=t, answer=p.answer,
                                   wrong=p.wrong, direction="denoise").scores for t in "qkv"}
    assert scans["k"][0, 2] > 0.8  # K-composition: the mechanism of induction
    assert abs(scans["q"][0, 2]) < 0.1 and abs(scans["v"][0, 2]) < 0.1
    assert scans["k"][0, 2] == np.nanmax(scans["k"])


# ---- mean and resample ablation ------------------------------------------------------------------------------


@torch.no_grad()
def test_mean_and_resample_ablation_set_the_heads_output_as_a_hook_would(tiny):
    text, reference = CLEAN, CORRUPTED
    layer, head = 0, 2
    proj = _out_proj(tiny, layer)
    d = tiny.model.config.hidden_size // 4
    ref_concat = tiny.trace(reference, layer).concat  # (T, H*d_v)
    for ablation, array in (("mean", ref_concat.mean(0)), ("resample", ref_concat)):
        value = torch.from_numpy(array)

        def hook(m, args, value=value):
            x = args[0].clone()
            x[..., head * d : (head + 1) * d] = value[..., head * d : (head + 1) * d]
            return (x,)

        handle = proj.register_forward_pre_hook(hook)
        try:
            direct = tiny.model.base_model(_ids(tiny, text)).last_hidden_state[0].numpy()
        finally:
            handle.remove()
        knocked = model_knockout(tiny, text, layer, [head], ablation=ablation, reference=reference)
        assert knocked.ablation == ablation
        np.testing.assert_allclose(knocked.knocked, direct, atol=1e-5)
        assert knocked.effect > 1e-3
    assert model_knockout(tiny, text, layer, [head]).ablation == "zero"
    # resampling from the text itself, or mean-ablating a text of one position, changes nothing
    same = model_knockout(tiny, text, layer, [0, 1, 2, 3], ablation="resample", reference=text)
    np.testing.assert_allclose(same.knocked, same.hidden, atol=1e-5)
    ranking = model_knockout_ranking(tiny, text, 1, ablation="mean")
    assert ranking.shape == (4,) and not np.allclose(ranking, model_knockout_ranking(tiny, text, 1))
    probs, knocked = next_token_knockout(tiny, text, 1, [0], ablation="resample", reference=reference)
    assert probs.shape == knocked.shape and not np.allclose(probs, knocked)
    with pytest.raises(ValueError, match="same token length"):
        model_knockout(tiny, text, 0, [1], ablation="resample", reference="the dog")
    with pytest.raises(ValueError, match="ablation must be"):
        model_knockout(tiny, text, 0, [1], ablation="noise")


def test_differential_heads_are_not_patched_one_query_head_at_a_time() -> None:
    """DiffLlama's head is two softmax maps and a norm: patching refuses it with the reason, not wrong numbers."""
    from transformers import AutoTokenizer, DiffLlamaConfig

    from mha_viz.analysis import activation_patching, patching_unavailable
    from mha_viz.pretrained import bundled_model_dir
    from tests.tiny_causal import random_causal_lm

    config = DiffLlamaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    model = PretrainedModel(random_causal_lm(config), AutoTokenizer.from_pretrained(bundled_model_dir()), name="diff")
    assert "differential" in patching_unavailable(model)
    with pytest.raises(ValueError, match="differential"):
        activation_patching(model, "the cat sat", "the dog sat", answer="on", wrong="in")


def test_prompts_longer_than_the_model_reads_are_cut_with_a_notice():
    """A tiny GPT-2 has 64 positions: prompts of 80 tokens are cut to their first 64, and every result says so
    (kept of how many); patch_heads, a bare number, refuses them; two long prompts of different lengths are refused
    although both would be cut to 64."""
    model = tiny_causal("gpt2")
    words = ["the", "cat", "sat", "on", "the", "warm", "mat", "and", "then", "the", "dog", "ran", "to", "the", "old", "red", "barn"]
    long_words = (words * 10)[:78]  # [CLS] + 78 + [SEP] = 80 tokens
    clean, corrupted = " ".join(long_words), " ".join(["a", *long_words[1:]])
    assert len(model.encode(clean).ids) == 64 and model.encode(clean).dropped == 16
    result = activation_patching(model, clean, corrupted, answer="cat")
    assert result.truncated == (64, 80) and len(result.tokens) == 64
    assert result.notice.startswith("The prompts are longer than the model reads: only their first 64 of 80 tokens")
    scan = path_patching_scan(model, clean, corrupted, receivers=[(1, 0)], answer="cat")
    assert scan.truncated == (64, 80) and "64 of 80" in scan.notice
    one = path_patching(model, clean, corrupted, sender=(0, 1), receivers=[(1, 0)], answer="cat")
    assert one.truncated == (64, 80) and "64 of 80" in one.notice
    with pytest.raises(ValueError, match="only their first 64 of 80 tokens would be patched"):
        patch_heads(model, clean, corrupted, [(0, 1)], answer="cat")
    with pytest.raises(ValueError, match="same number of tokens: 80 and 81"):
        activation_patching(model, clean, corrupted + " mat", answer="cat")
    short = activation_patching(model, CLEAN, CORRUPTED, answer="cat")
    assert short.truncated is None and short.notice is None
