"""Models bigger than one device: half precision, and accelerate's device_map with CPU and disk offload.

A tiny random LLaMA with its LM head (4 layers, wide MLPs so that a layer weighs 1.6 MB) is saved to a folder
and loaded three ways: in memory, with max_memory set so that some layers stay on the CPU and the rest are
offloaded to disk, and in float16 / bfloat16. Offloaded traces, knockout, next-token probabilities, logit
attribution and generation must equal the in-memory model's; half precision traces come back as float32.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoModelForCausalLM, AutoTokenizer

from mha_viz.pretrained import ModelLoadError, PretrainedModel, bundled_model_dir, load_model, loading
from mha_viz.pretrained import adapter as adapter_module

TEXT = "the quick brown fox jumps over the lazy dog"
FIELDS = ("weights", "queries", "keys", "values", "scores", "head_outputs", "concat", "output", "W_O", "W_Q", "W_K",
          "W_V", "b_O")

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs accelerate")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = tf.LlamaConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=4096, max_position_embeddings=64, attention_bias=True, tie_word_embeddings=False,
        bos_token_id=101, eos_token_id=102, pad_token_id=0,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2 if p.dim() > 1 else p + torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def in_memory(folder: Path) -> PretrainedModel:
    return load_model(folder)


@pytest.fixture(scope="module")
def offloaded(folder: Path) -> PretrainedModel:
    return load_model(folder, device_map="auto", max_memory={"cpu": "10MB"}, offload_folder=folder / "offload")


def test_layers_really_land_on_the_cpu_and_on_disk(offloaded):
    placed = offloaded.model.hf_device_map
    layers = {name: device for name, device in placed.items() if ".layers." in name}
    assert "cpu" in layers.values() and "disk" in layers.values(), placed
    disk = next(name for name, device in layers.items() if device == "disk")
    o_proj = offloaded.model.get_submodule(disk).self_attn.o_proj
    assert o_proj.weight.device.type == "meta" and o_proj._hf_hook.offload  # read from disk when it runs


def test_offloaded_traces_equal_the_in_memory_ones(in_memory, offloaded):
    for layer in range(4):
        a, b = in_memory.trace(TEXT, layer), offloaded.trace(TEXT, layer)
        for field in FIELDS:
            np.testing.assert_allclose(getattr(b, field), getattr(a, field), atol=1e-6, err_msg=f"layer {layer} {field}")
        assert max(b.meta["check"].values()) <= 1e-5 and b.meta["model_dtype"] == "float32"
    np.testing.assert_allclose(offloaded.attentions(TEXT), in_memory.attentions(TEXT), atol=1e-6)


def test_knockout_attribution_and_generation_work_offloaded(in_memory, offloaded):
    off = {3: [0, 1, 0, 1]}
    np.testing.assert_allclose(offloaded.next_token_probs(TEXT, head_masks=off),
                               in_memory.next_token_probs(TEXT, head_masks=off), atol=1e-6)
    knocked = offloaded.final_hidden(TEXT, head_masks=off)
    np.testing.assert_allclose(knocked, in_memory.final_hidden(TEXT, head_masks=off), atol=1e-5)
    assert np.abs(knocked - offloaded.final_hidden(TEXT)).max() > 1e-3
    a, b = in_memory.logit_attribution(TEXT), offloaded.logit_attribution(TEXT)
    np.testing.assert_allclose(b.heads, a.heads, atol=1e-6)
    assert b.check["sum of terms vs logit"] <= 1e-4 and b.token_id == a.token_id
    assert offloaded.generate(TEXT, 3).tokens == in_memory.generate(TEXT, 3).tokens


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float16, 3e-3), ("bfloat16", 3e-2)])
def test_half_precision_traces_come_back_as_float32(folder, in_memory, dtype, tolerance):
    half = load_model(folder, dtype=dtype)
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    assert half.model.dtype == getattr(torch, name)
    full = in_memory.trace(TEXT, 2)
    t = half.trace(TEXT, 2)
    assert t.meta["model_dtype"] == name and all(getattr(t, f).dtype == np.float32 for f in FIELDS)
    assert max(t.meta["check"].values()) <= tolerance  # half precision's own rounding, measured
    assert np.abs(t.weights - full.weights).max() <= tolerance
    assert np.abs(t.weights - full.weights).max() > 0  # really computed in half precision


def test_a_trace_hooks_only_the_layer_it_shows(in_memory, monkeypatch):
    """No other layer's q, k, v is recorded; the all-layer overview records none."""
    recorded = []

    class Counting(adapter_module.Recorder):
        def __enter__(self):
            recorded.append(self.site)
            return super().__enter__()

    monkeypatch.setattr(adapter_module, "Recorder", Counting)
    in_memory.trace(TEXT, 2)
    assert [site.attention for site in recorded] == [in_memory.model.model.layers[2].self_attn]
    recorded.clear()
    in_memory.attentions(TEXT)
    assert recorded == []


def test_bad_placements_are_refused(folder, monkeypatch):
    with pytest.raises(ValueError, match="dtype must be a floating point torch dtype"):
        load_model(folder, dtype="int8")
    with pytest.raises(ValueError, match="max_memory and offload_folder need a device_map"):
        load_model(folder, max_memory={"cpu": "1GB"})
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="device_map needs the accelerate package"):
        load_model(folder, device_map="auto")


def test_a_wrapped_model_is_cast_to_float32_unless_told_otherwise(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert PretrainedModel(model, tokenizer, dtype=None).model.dtype == torch.bfloat16
    assert PretrainedModel(model, tokenizer).model.dtype == torch.float32
