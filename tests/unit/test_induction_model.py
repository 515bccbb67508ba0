"""The bundled causal model mha-viz/induction-2l: integrity, offline loading, what its heads learned (a
previous-token head in layer 0, induction heads in layer 1), and every existing view working on it."""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import asdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

import mha_viz
from mha_viz.analysis import (
    attention_rollout,
    detect_heads,
    model_knockout,
    next_token_knockout,
    trace_head_stats,
)
from mha_viz.export import trace_from_npz, trace_to_npz
from mha_viz.figures import heads_figure, output_path_figure, overview_figure
from mha_viz.pretrained import (
    INDUCTION_MODEL,
    INDUCTION_SHA256,
    ModelIntegrityError,
    ModelNotInstalledError,
    PretrainedModel,
    induction_model_dir,
    load_model,
    loading,
)
from mha_viz.training.induction import GENERATED_FILES, VOCABULARY, Recipe, sample_batch, train

PROMPT = "red fox blue sky green tree red"  # "red" again: an induction head looks at what followed it, "fox"

pytestmark = pytest.mark.usefixtures("one_thread")


@cache
def bundled_induction() -> PretrainedModel:
    return load_model(INDUCTION_MODEL)


@pytest.fixture(scope="module")
def model() -> PretrainedModel:
    return bundled_induction()


def test_the_weights_have_the_recorded_sha256_and_the_folder_is_small():
    folder = induction_model_dir()
    assert folder == Path(mha_viz.__file__).parent / "models" / "induction-2l"
    assert loading.file_sha256(folder / "model.safetensors") == INDUCTION_SHA256
    assert {f.name for f in folder.iterdir()} == {*GENERATED_FILES, "README.md"}
    assert sum(f.stat().st_size for f in folder.iterdir()) < 1_000_000


def test_the_folder_is_package_data():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["mha_viz"]
    assert all(any(Path("mha_viz", name).match(f"mha_viz/{p}") for p in patterns)
               for name in (f"models/induction-2l/{f}" for f in (*GENERATED_FILES, "README.md")))


def test_it_loads_offline_without_asking_the_hub(monkeypatch):
    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading, "_ask_hub", no_hub)
    monkeypatch.setattr(loading, "_load_hub", no_hub)
    m = load_model(INDUCTION_MODEL)
    assert m.name == INDUCTION_MODEL == mha_viz.INDUCTION_MODEL == "mha-viz/induction-2l"
    assert (m.architecture, m.kind, m.num_layers, m.num_heads) == ("gpt2", "decoder", {"decoder": 2}, {"decoder": 4})
    assert m.max_tokens == 128 and m.unavailable is None and m.next_token_unavailable is None
    assert m.model.config._attn_implementation == "eager" and not m.model.training


def test_the_name_means_the_bundled_model_even_next_to_a_folder_of_that_name(tmp_path, monkeypatch):
    (tmp_path / "mha-viz" / "induction-2l").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert load_model(INDUCTION_MODEL).name == INDUCTION_MODEL


def test_changed_or_missing_weights_are_refused(tmp_path, monkeypatch):
    copy = tmp_path / "induction-2l"
    shutil.copytree(induction_model_dir(), copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of the last weight
    (copy / "model.safetensors").write_bytes(bytes(weights))
    monkeypatch.setattr(loading, "shipped_model_dir", lambda name: copy)
    with pytest.raises(ModelIntegrityError, match=f"expected {INDUCTION_SHA256}"):
        load_model(INDUCTION_MODEL)
    monkeypatch.setattr(loading, "shipped_model_dir", lambda name: tmp_path / "nowhere")
    with pytest.raises(ModelNotInstalledError, match="train_induction_model.py"):
        load_model(INDUCTION_MODEL)


def test_the_tokenizer_reads_lowercase_words_after_a_bos_token(model):
    assert model.tokenizer.get_vocab() == {word: i for i, word in enumerate(VOCABULARY)}
    assert model.tokens("Red FOX, blue sky zebra") == ["<bos>", "red", "fox", ",", "blue", "sky", "<unk>"]
    assert model.model.config.vocab_size == len(VOCABULARY) and model.model.config.bos_token_id == 0


def test_the_mlps_add_exactly_zero(model):
    blocks = model.model.transformer.h
    assert model.model.config.n_inner == 1
    assert all(torch.all(p == 0) for block in blocks for p in block.mlp.parameters())
    outputs = []
    handles = [b.mlp.register_forward_hook(lambda module, args, out: outputs.append(out)) for b in blocks]
    try:
        model.attentions(PROMPT)
    finally:
        for handle in handles:
            handle.remove()
    assert len(outputs) == 2 and all(torch.all(out == 0) for out in outputs)


def test_the_recorded_recipe_is_the_default_recipe():
    recorded = json.loads((induction_model_dir() / "recipe.json").read_text())
    assert recorded == asdict(Recipe())


def test_a_previous_token_head_in_layer_0_and_induction_heads_in_layer_1(model):
    for seed in (0, 1):
        scores = detect_heads(model, seed=seed)
        assert scores["previous"][0].max() >= 0.9  # head 2
        assert scores["induction"][1].max() >= 0.9  # every head of layer 1, in fact
        assert scores["induction"][0].max() < 0.1 and scores["previous"][1].max() < 0.1  # not the other way round
        assert scores["duplicate"].max() < 0.1


def test_it_completes_a_repeat_by_looking_at_what_followed_the_earlier_occurrence(model):
    g = model.generate(PROMPT, 4)
    assert g.tokens == ("fox", "blue", "sky", "green")
    ids = torch.tensor([list(g.prompt_ids)])
    hf = model.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    assert tuple(hf[0, ids.shape[1] :].tolist()) == g.token_ids
    fox = g.key_tokens(0).index("fox")
    best = int(np.argmax(detect_heads(model)["induction"][1]))
    assert np.argmax(g.steps[0].attentions[1, best]) == fox and g.steps[0].attentions[1, best, fox] > 0.9
    assert g.steps[0].probs[g.token_ids[0]] > 0.9


def test_the_copied_words_logit_comes_from_the_layer_1_heads(model):
    a = model.logit_attribution(PROMPT)
    assert a.token == "fox" and a.check["sum of terms vs logit"] <= 1e-3 and a.norm == "LayerNorm"
    assert a.heads[1].sum() > 0.8 * a.logit and a.heads[1].min() > 0
    assert abs(a.terms["layer 0 MLP"]) < 1e-5 and abs(a.terms["layer 1 MLP"]) < 1e-5  # zero MLPs, float32 rounding


def test_the_induction_circuit_needs_both_layers(model):
    fox = model.tokenizer.convert_tokens_to_ids("fox")
    probs, without_layer_1 = next_token_knockout(model, PROMPT, 1, range(4))
    previous_head = int(np.argmax(detect_heads(model)["previous"][0]))
    _, without_previous_head = next_token_knockout(model, PROMPT, 0, [previous_head])
    assert probs[fox] > 0.9 and without_layer_1[fox] < 0.05 and without_previous_head[fox] < 0.05


def test_every_existing_view_works_on_it(model):
    text = "red fox blue sky red fox"
    reference = model.attentions(text)  # (2, 4, 7, 7)
    assert reference.shape == (2, 4, 7, 7)
    for layer, t in enumerate(model.traces(text)):
        assert max(t.meta["check"].values()) <= 1e-5 and np.abs(t.weights - reference[layer]).max() <= 1e-6
        alone = model.trace(text, layer)
        np.testing.assert_allclose(alone.concat, t.concat, atol=1e-6)
        np.testing.assert_allclose(t.concat @ t.W_O.T + t.b_O, t.output, atol=1e-5)
        assert t.causal and t.query_tokens == ("<bos>", "red", "fox", "blue", "sky", "red", "fox")
        assert trace_head_stats(t, special=["<bos>"]).num_heads == 4
        np.testing.assert_array_equal(trace_from_npz(trace_to_npz(t)).weights, t.weights)
        heads_figure(t), output_path_figure(t)
    overview_figure(reference)
    np.testing.assert_allclose(attention_rollout(reference).sum(-1), 1.0, atol=1e-9)  # (2, 7, 7), rows of 1
    assert model_knockout(model, text, 1, [0, 1, 2, 3]).effect > 0.1


def test_training_is_deterministic_and_keeps_the_mlps_at_zero():
    recipe = Recipe(steps=3, batch_size=4, seq_len=16, max_segment=7, d_model=16, num_heads=2)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    first, second = train(recipe).state_dict(), train(recipe).state_dict()
    other = train(Recipe(**{**asdict(recipe), "seed": 1})).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["transformer.wte.weight"], other["transformer.wte.weight"])
    assert all(torch.all(v == 0) for k, v in first.items() if ".mlp." in k)
    assert torch.get_num_threads() == threads and torch.are_deterministic_algorithms_enabled() == deterministic


def test_each_training_sequence_repeats_one_random_segment():
    recipe = Recipe(batch_size=16)
    tokens, copied = sample_batch(recipe, torch.Generator().manual_seed(0))
    assert tokens.shape == copied.shape == (16, 128) and torch.all(tokens[:, 0] == 0) and torch.all(tokens[:, 1:] >= 2)
    for row, predictable in zip(tokens, copied, strict=True):
        positions = torch.nonzero(predictable).flatten()  # b+1 .. b+s-1 in token positions, s - 1 of them
        start, s = int(positions[0]) - 1, len(positions) + 1
        assert torch.equal(positions, torch.arange(start + 1, start + s))
        copies = [a for a in range(1, start - s + 2) if torch.equal(row[a : a + s], row[start : start + s])]
        assert copies  # the same s words earlier, not overlapping the copy
    assert len({int(c.sum()) for c in copied}) > 5  # segment lengths vary
