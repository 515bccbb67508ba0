"""The visibility X-ray (mha_viz.analysis.visibility): on tiny random models of sixteen families (causal, encoders,
sliding windows on every layer, alternating or local/global, windows both ways, chunked attention, ALiBi, latent
attention) each layer's reach measured by probing the model equals the reach its config declares; on 21 bugs
planted by patching one layer's mask in the test (dropped, a window off by one either way, a window lost or added, a
chunk boundary shifted, a future key let through, the first key or a query's own hidden, a causal mask on an encoder),
exactly that layer is flagged, at the first pair the bug changes; the bundled trained models' peaked heads are not
mistaken for missing reach."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from mha_viz.analysis import probe_kernels, visibility
from mha_viz.pretrained import PretrainedModel, bundled_model_dir, load_model
from tests.app.test_app_families import CONFIGS
from tests.tiny_causal import random_model, tiny_causal

T = 12
SMALL = {"vocab_size": 30522, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 64}
MORE = {  # family -> (auto class, config) of the families test_app_families does not build
    "mistral": (AutoModelForCausalLM, lambda: tf.MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=4)),
    "gpt_neo": (AutoModelForCausalLM, lambda: tf.GPTNeoConfig(
        vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
        window_size=4, max_position_embeddings=64)),
    "qwen2": (AutoModelForCausalLM, lambda: tf.Qwen2Config(**SMALL, num_key_value_heads=2, use_sliding_window=True,
                                                            sliding_window=4, max_window_layers=1)),
    "phi3": (AutoModelForCausalLM, lambda: tf.Phi3Config(**SMALL, num_key_value_heads=2, sliding_window=4,
                                                          pad_token_id=0)),
    "starcoder2": (AutoModelForCausalLM, lambda: tf.Starcoder2Config(**SMALL, num_key_value_heads=2, sliding_window=4,
                                                                      bos_token_id=0, eos_token_id=0)),
    "modernbert": (AutoModel, lambda: tf.ModernBertConfig(
        vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        local_attention=8, global_attn_every_n_layers=3, max_position_embeddings=64, pad_token_id=0)),
}
RULES = {  # family -> each layer's declared rule
    "gpt2": ["causal", "causal"], "llama": ["causal", "causal"], "minilm": ["both ways"] * 6,
    "mistral": ["causal, window 4"] * 2, "gemma2": ["causal, window 4", "causal"],
    "gemma3": ["causal, window 4", "causal"], "cohere2": ["causal, window 4", "causal"],
    "gpt_oss": ["causal, window 4", "causal"], "llama4_text": ["causal, chunks of 4", "causal"],
    "bloom": ["causal", "causal"], "deepseek_v3": ["causal", "causal"], "gpt_neo": ["causal", "causal, window 4"],
    "qwen2": ["causal", "causal, window 4"], "phi3": ["causal, window 4"] * 2, "starcoder2": ["causal, window 4"] * 2,
    "modernbert": ["both ways", "both ways, window 4", "both ways, window 4"],
}  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models() -> dict[str, PretrainedModel]:
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    out = {"gpt2": tiny_causal("gpt2"), "llama": tiny_causal("llama"), "minilm": load_model(None)}
    for name in ("gemma2", "gemma3", "cohere2", "gpt_oss", "llama4_text", "bloom", "deepseek_v3"):
        out[name] = PretrainedModel(random_model(AutoModelForCausalLM, CONFIGS[name][0]()), tokenizer, name=name)
    for name, (auto, config) in MORE.items():
        out[name] = PretrainedModel(random_model(auto, config()), tokenizer, name=name)
    return out


def expected(rule: str, start: int = 0) -> np.ndarray:
    """(T, T) bool: the reach a rule means, written out here position by position (chunks counted from start)."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    both = rule.startswith("both ways")
    reach = np.ones((T, T), dtype=bool) if both else j <= i
    if "window 4" in rule:
        reach &= np.abs(i - j) <= 4 if both else i - j < 4  # 4 keys each way; or the query and the 3 keys before it
    if "chunks of 4" in rule:
        reach &= (i - start) // 4 == (j - start) // 4
    return reach


POSITIONS = {  # family -> what each layer itself does with positions, from its config (the first layer's; Llama 4's
    # second is a NoPE layer)
    "gpt2": "none (positions are added to the input)", "minilm": "none (positions are added to the input)",
    "gpt_neo": "none (positions are added to the input)", "bloom": "ALiBi", "llama4_text": "rotary",
}  # every other family: "rotary"; and Cohere 2's full-attention layers none (its code rotates on sliding layers only)
WHOLE_MODULE = {"bloom", "gpt_neo"}  # families whose modules do not call transformers' AttentionInterface


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("name", RULES)
def test_every_layers_measured_reach_is_the_declared_one(models, name, kernel):
    m = models[name]
    if kernel not in probe_kernels(m):  # no sdpa: Gemma 2's soft cap, gpt-oss's sinks, Bloom, GPT-Neo
        with pytest.raises(ValueError, match="no sdpa kernel"):
            visibility(m, T, kernel=kernel)
        return
    v = visibility(m, T, kernel=kernel)
    assert [r.rule for r in v.layers] == RULES[name] and v.disagreeing == ()
    for r in v.layers:
        assert np.array_equal(r.measured, expected(r.rule)) and np.array_equal(r.declared, expected(r.rule))
        assert r.verdict == "as declared"
        words = {("llama4_text", 1): "none (NoPE layer)", ("cohere2", 1): "none (NoPE: Cohere 2's full-attention layers)"
                 }.get((name, r.layer), POSITIONS.get(name, "rotary"))
        assert r.positions == words and r.reads_positions == (not words.startswith("none"))  # measured, not read
        if name in WHOLE_MODULE:  # probed whole, on the model's own kernel
            assert r.heads is None and v.kernel == "eager"
        else:  # probed through the kernel, head by head: every head reaches what the layer does
            assert r.heads.shape == (m.model.config.num_attention_heads, T, T) and (r.heads == r.measured).all()
    if name not in WHOLE_MODULE:
        assert v.kernel == kernel
    assert m.model.config._attn_implementation == "eager"  # the model's own implementation is back


def test_the_model_computes_as_before_during_and_after_a_probe(models):
    """The probe's attention function runs the real kernel for every call but the probed one: a forward pass while it
    is set (another session's, say) gives the model's own logits, and so does one after."""
    sys = __import__("sys")
    probe = sys.modules["mha_viz.analysis.visibility"]
    m = models["llama"]
    ids = torch.arange(1, 11)[None]
    with torch.no_grad():
        before = m.model(input_ids=ids).logits
        with probe._probing(m.model, "sdpa", [m.adapter.site("decoder", 0).attention]) as switched:
            during = m.model(input_ids=ids).logits
        after = m.model(input_ids=ids).logits
    assert switched and torch.allclose(during, before, atol=1e-5) and torch.equal(after, before)


def test_an_unknown_kernel_is_refused(models):
    with pytest.raises(ValueError, match="sdpa, eager"):
        visibility(models["gpt2"], T, kernel="flash_attention_2")


def on_mask(change: Callable[[np.ndarray], np.ndarray]):
    """A forward pre-hook that rewrites the attention mask a module receives: change maps the allowed (T, T) pairs to
    the bug's (the mask's own form kept: additive float or boolean)."""
    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None:  # no mask: every pair allowed (an encoder), or causal by the kernel's flag (sdpa), additive
            hidden = args[0] if args else kwargs["hidden_states"]
            T = hidden.shape[1]
            hidden_pairs = torch.ones(T, T).triu(1).bool() if getattr(module, "is_causal", False) else torch.zeros(T, T)
            mask = hidden.new_zeros(1, 1, T, T).masked_fill(hidden_pairs.bool(), torch.finfo(hidden.dtype).min)
        allowed = mask == 0 if mask.is_floating_point() else mask
        new = torch.as_tensor(change(allowed[0, 0].numpy().copy()))[None, None].expand_as(allowed)
        fill = torch.zeros((), dtype=mask.dtype) if mask.is_floating_point() else None
        kwargs["attention_mask"] = (torch.where(new, fill, torch.finfo(mask.dtype).min).to(mask.dtype)
                                    if fill is not None else new)
        return args, kwargs
    return hook


def dropped(allowed):  # the layer attends everywhere
    return np.ones_like(allowed)


def wider(allowed):  # a window off by one: one more key back
    return allowed | np.eye(len(allowed), k=-4, dtype=bool)


def narrower(allowed):  # a window off by one: one key fewer
    return allowed & ~np.eye(len(allowed), k=-3, dtype=bool)


def unwindowed(allowed):  # a sliding layer given full causal attention
    return np.tril(np.ones_like(allowed))


def shifted(allowed):  # chunk boundaries one position late
    i, j = np.arange(len(allowed))[:, None], np.arange(len(allowed))[None, :]
    return (j <= i) & ((i + 3) // 4 == (j + 3) // 4)


def causal(allowed):  # an encoder layer given a causal mask
    return np.tril(allowed)


def self_hidden(allowed):  # every query but the first kept from its own key
    out = allowed & ~np.eye(len(allowed), dtype=bool)
    out[0, 0] = allowed[0, 0]  # the first query has no other key
    return out


def leak(allowed):  # a causal mask off by one: the next key let through
    return allowed | np.eye(len(allowed), k=1, dtype=bool)


def windowed(allowed):  # a global layer given a sliding window of 4
    i, j = np.arange(len(allowed))[:, None], np.arange(len(allowed))[None, :]
    return allowed & (i - j < 4)


def windowed_both_ways(allowed):  # a global encoder layer given a window of 4 each way
    i, j = np.arange(len(allowed))[:, None], np.arange(len(allowed))[None, :]
    return allowed & (np.abs(i - j) <= 4)


def sink_missing(allowed):  # the first key hidden from every later query
    out = allowed.copy()
    out[1:, 0] = False
    return out



BUGS = [  # (family, layer, bug, the first (query, key) it changes)
    ("gpt2", 1, dropped, (0, 1)),
    ("llama", 0, dropped, (0, 1)),
    ("bloom", 1, dropped, (0, 1)),
    ("mistral", 0, wider, (4, 0)),
    ("mistral", 1, narrower, (3, 0)),
    ("gemma3", 0, unwindowed, (4, 0)),
    ("gpt_oss", 0, wider, (4, 0)),
    ("llama4_text", 0, shifted, (1, 0)),
    ("minilm", 3, causal, (0, 1)),
    ("gpt2", 0, leak, (0, 1)),
    ("qwen2", 1, narrower, (3, 0)),
    ("phi3", 1, wider, (4, 0)),
    ("starcoder2", 0, unwindowed, (4, 0)),
    ("gpt_neo", 1, narrower, (3, 0)),
    ("cohere2", 0, wider, (4, 0)),
    ("gemma2", 1, windowed, (4, 0)),
    ("llama", 1, sink_missing, (1, 0)),
    ("deepseek_v3", 1, dropped, (0, 1)),
    ("bloom", 0, self_hidden, (1, 1)),
    ("modernbert", 1, causal, (0, 1)),
    ("modernbert", 0, windowed_both_ways, (0, 5)),
]


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("name, layer, bug, first", BUGS, ids=[f"{b[0]}-{b[1]}-{b[2].__name__}" for b in BUGS])
def test_a_planted_mask_bug_is_flagged_at_its_layer(models, name, layer, bug, first, kernel):
    m = models[name]
    if kernel not in probe_kernels(m):
        pytest.skip(f"{name} has no sdpa kernel")
    part = "encoder" if m.adapter.kind == "encoder" else "decoder"
    handle = m.adapter.site(part, layer).attention.register_forward_pre_hook(on_mask(bug), with_kwargs=True)
    try:
        v = visibility(m, T, kernel=kernel)
    finally:
        handle.remove()
    assert v.disagreeing == (layer,)
    (flagged,) = [r for r in v.layers if r.layer == layer]
    assert flagged.first_difference == first and f"query {first[0]}" in flagged.verdict
    assert np.array_equal(flagged.measured, bug(expected(flagged.rule)))  # the probe sees the bug's exact reach


def one_head_windowed(module, args, kwargs):
    """A forward pre-hook: head 1 alone kept to a causal window of 4 (the mask given one [head, query, key] plane a
    head, as an additive mask)."""
    hidden = args[0] if args else kwargs["hidden_states"]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j <= i).expand(module.config.num_attention_heads, T, T).clone()
    allowed[1] &= i - j < 4
    kwargs["attention_mask"] = torch.zeros(1, *allowed.shape, dtype=hidden.dtype).masked_fill(
        ~allowed, torch.finfo(hidden.dtype).min)
    return args, kwargs


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_head_whose_reach_differs_is_named(models, name, kernel):
    """Per head where it differs: a mask that windows head 1 alone leaves the layer's reach (any head's) causal, so
    only the heads say it, and the verdict names head 1 and the pairs it misses."""
    m = models[name]
    handle = m.adapter.site("decoder", 1).attention.register_forward_pre_hook(one_head_windowed, with_kwargs=True)
    try:
        v = visibility(m, T, kernel=kernel)
    finally:
        handle.remove()
    (flagged,) = [r for r in v.layers if not r.as_declared]
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    assert flagged.layer == 1 and flagged.first_difference is None and flagged.differing_heads == (1,)
    assert np.array_equal(flagged.heads[1], (j <= i) & (i - j < 4)) and np.array_equal(flagged.heads[0], j <= i)
    missed = int(((j <= i) & (i - j >= 4)).sum())
    assert f"heads not reaching every pair the layer reaches (pairs missed): 1 ({missed})" in flagged.verdict


def rotary_given(module, args, kwargs):  # a NoPE layer given rotary: the module's own switch flipped
    return None


def no_rotary(module, args, kwargs):  # a rotary layer given cos 1 and sin 0: positions ignored
    cos, sin = kwargs["position_embeddings"]
    kwargs["position_embeddings"] = (torch.ones_like(cos), torch.zeros_like(sin))
    return args, kwargs


def distance_bias(module, args, kwargs):  # a position-free layer given a bias by distance (ALiBi where none is declared)
    mask = kwargs.get("attention_mask")
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    if mask is None:  # sdpa's causal flag
        allowed = j <= i
    else:  # the same pairs however often the hook runs on its own output
        allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    low = torch.finfo(torch.float32).min
    kwargs["attention_mask"] = torch.where(allowed, -0.5 * (i - j).abs().float(), low).expand(1, 1, T, T)
    return args, kwargs


def no_alibi(module, args, kwargs):  # Bloom's ALiBi bias dropped
    kwargs["alibi"] = torch.zeros_like(kwargs["alibi"])
    return args, kwargs


POSITION_BUGS = [  # (family, layer, hook, what the layer then does with key order)
    ("llama4_text", 1, rotary_given, True),
    ("llama", 0, no_rotary, False),
    ("gpt2", 1, distance_bias, True),
    ("bloom", 0, no_alibi, False),
]


@pytest.mark.parametrize("name, layer, bug, reads", POSITION_BUGS, ids=[f"{b[0]}-{b[1]}-{b[2].__name__}" for b in
                                                                       POSITION_BUGS])
def test_a_planted_position_bug_is_flagged_at_its_layer(models, name, layer, bug, reads):
    """Not reach but positions: a layer that reads key order where its config declares none, or ignores it where it
    declares rotary or ALiBi, is flagged at that layer, its reach unchanged."""
    m = models[name]
    site = m.adapter.site("decoder", layer).attention
    if bug is rotary_given:
        site.use_rope = True
        handle = None
    else:
        handle = site.register_forward_pre_hook(bug, with_kwargs=True)
    try:
        v = visibility(m, T)
    finally:
        if handle is None:
            site.use_rope = False
        else:
            handle.remove()
    assert v.disagreeing == (layer,)
    (flagged,) = [r for r in v.layers if r.layer == layer]
    assert flagged.reads_positions is reads and flagged.first_difference is None
    assert f"the order of its keys {'moves' if reads else 'does not move'} its output" in flagged.verdict


PAD = 3  # left padding: the first 3 positions


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "gemma3", "llama4_text", "bloom", "minilm", "modernbert"])
def test_left_padding_is_hidden_from_every_query(models, name, kernel):
    m = models[name]
    if kernel not in probe_kernels(m):
        pytest.skip(f"{name} has no sdpa kernel")
    v = visibility(m, T, kernel=kernel, padding=PAD)
    assert v.disagreeing == ()
    for r in v.layers:
        want = expected(r.rule.split(", the first")[0], start=PAD)  # Llama 4's chunks start at the first token
        want[:, :PAD] = False
        assert np.array_equal(r.measured[PAD:], want[PAD:]) and r.rule.endswith(f"the first {PAD} positions padding")


def padding_flipped(allowed):  # the padding mask applied from the wrong end: the last PAD keys hidden, the first seen
    out = allowed.copy()
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    unpadded = (j <= i) if not allowed[PAD:, PAD:].all() else np.ones((T, T), dtype=bool)  # causal, or an encoder
    out[:, :PAD] = unpadded[:, :PAD]
    out[:, T - PAD:] = False
    return out


@pytest.mark.parametrize("name, layer", [("gpt2", 1), ("llama", 0), ("minilm", 2)])
def test_padding_on_the_wrong_side_is_flagged_at_its_layer(models, name, layer):
    m = models[name]
    part = "encoder" if m.adapter.kind == "encoder" else "decoder"
    handle = m.adapter.site(part, layer).attention.register_forward_pre_hook(on_mask(padding_flipped),
                                                                              with_kwargs=True)
    try:
        v = visibility(m, T, padding=PAD, kernel="eager")
    finally:
        handle.remove()
    assert v.disagreeing == (layer,)
    (flagged,) = [r for r in v.layers if r.layer == layer]
    assert flagged.first_difference == (PAD, 0) and "query 3 sees key 0" in flagged.verdict
    assert not flagged.measured[PAD:, T - PAD:].any()  # the text's last keys lost


def test_a_length_the_model_cannot_read_is_refused(models):
    with pytest.raises(ValueError, match="from 2 to"):
        visibility(models["gpt2"], 10_000)


@pytest.mark.parametrize("name", RULES)
def test_a_longer_input_and_another_seed_stay_as_declared(models, name):
    assert visibility(models[name], 60, seed=3).disagreeing == ()


@pytest.mark.parametrize("name", ["mha-viz/induction-2l", "mha-viz/recall-16k", "mha-viz/hybrid-2l"])
def test_trained_models_peaked_heads_are_not_mistaken_for_missing_reach(name):
    """Trained heads put almost all their weight on a few keys: probed on their own input, the other keys would move a
    query's output by less than float32 resolves and read as unreached. The probe's input is the same vector at every
    position, and each key is pushed far both ways, so every layer of the bundled trained models is as declared."""
    report = visibility(load_model(name), 128)
    assert report.disagreeing == () and report.layers
    if name == "mha-viz/recall-16k":  # rotary, then a NoPE layer
        assert [r.reads_positions for r in report.layers] == [True, False]
