"""The app on hybrid models (Qwen3-Next: Gated DeltaNet layers beside softmax attention) and a mixer-only model
(Mamba-2), driven with AppTest: every view and every analysis section draws on a mixer layer or says why it cannot,
never an exception; the layer's kind is named on the page."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoModel

from mha_viz.parts import SECTIONS, VIEWS
from mha_viz.pretrained import load_model
from tests.app.test_app_families import app_with
from tests.renderer_json import shown_layer
from tests.tiny_causal import saved_random_models
from tests.unit.test_mixers import HYBRID

MARKS = {"qwen3_next": ["lin", "lin", "lin", "attn"], "qwen3_5_text": ["lin", "lin", "lin", "attn"],
         "minimax": ["lin", "attn", "lin"], "kimi_linear": ["lin", "attn", "lin"], "bamba": ["ssm", "attn", "ssm"],
         "bamba (more mixer heads)": ["ssm", "attn", "ssm"], "granitemoehybrid": ["ssm", "attn", "ssm"],
         "mamba2": ["ssm", "ssm"], "olmo_hybrid": ["lin", "attn", "lin", "attn"],
         "olmo_hybrid (no positions)": ["lin", "attn"], "nemotron_h": ["ssm", "attn", "ssm"],
         "nemotron_h (mixers only)": ["ssm", "attn", "ssm"], "falcon_h1": ["attn", "ssm", "attn", "ssm"],
         "falcon_h1 (gated norm)": ["attn", "ssm", "attn", "ssm"], "mamba": ["ssm", "ssm"],
         "falcon_mamba": ["ssm", "ssm"], "jamba": ["ssm", "attn", "ssm"], "lfm2": ["conv", "attn", "conv"],
         "lfm2 (conv bias)": ["conv", "attn"], "lfm2_moe": ["conv", "attn", "conv"],
         "lfm3": ["conv", "attn", "attn"]}
NAMES = {"qwen3_next": "Gated DeltaNet", "qwen3_5_text": "Gated DeltaNet", "minimax": "lightning attention",
         "kimi_linear": "Kimi Delta Attention", "olmo_hybrid": "Gated DeltaNet",
         "olmo_hybrid (no positions)": "Gated DeltaNet", "mamba": "Mamba", "falcon_mamba": "Mamba", "jamba": "Mamba",
         "lfm2": "short convolution", "lfm2 (conv bias)": "short convolution",
         "lfm2_moe": "short convolution", "lfm3": "short convolution"}  # the others: Mamba-2


def mixer_layer(name: str) -> int:
    """The first mixer layer of the family's tiny model (Falcon-H1's layer 0 is block 0's attention half)."""
    return next(i for i, mark in enumerate(MARKS[name]) if mark != "attn")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return saved_random_models({name: config for name, (_, config) in HYBRID.items()}, AutoModel, tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("name", HYBRID)
def test_every_view_draws_a_mixer_layer_or_says_why(folders, name):
    layer = mixer_layer(name)
    at = app_with(folders[name], "Heads", layer=layer)
    assert not at.exception and not at.error
    meta, drawn = shown_layer(at)  # the renderer paints the layer's exact mixing matrices, its buttons say each kind
    assert meta["layer_marks"] == MARKS[name]
    trace = load_model(folders[name]).trace("the cat sat on the mat", layer)
    step = (meta["hi"] - meta["lo"]) / 65534  # one uint16 code: the payload's resolution (mha_viz/layer_payload.py)
    np.testing.assert_allclose(drawn, trace.weights, rtol=0, atol=step + 1e-6)
    assert any(f"Layer {layer} is a {NAMES.get(name, 'Mamba-2')} layer, not softmax attention" in i.value
               for i in at.info)
    if name.startswith("falcon_h1"):  # two layers per block: said
        assert any(f"Layer {layer} is the Mamba-2 half of block 0: it runs beside layer 0" in c.value
                   for c in at.caption)
    assert any("mixing matrix" in c.value and "centred at 0" in c.value for c in at.caption)
    for view in VIEWS.menu("Pretrained"):
        if view == "Generate" or view not in at.button_group(key="view").options:
            continue  # a bare model (no LM head) cannot write; a variant's own view is offered for its models only
        at.button_group(key="view").set_value(view).run()
        assert not at.exception and not at.error, view


@pytest.mark.slow
@pytest.mark.parametrize("name", HYBRID)
def test_every_analysis_section_draws_a_mixer_layer_or_says_why(folders, name):
    at = app_with(folders[name], "Analysis", layer=mixer_layer(name))
    for section in SECTIONS.menu("Pretrained"):
        at.button_group(key="section").set_value(section).run()
        assert not at.exception and not at.error, section
        if section == "Head statistics":  # what still means something on a signed matrix: reach, decay, sign
            (table,) = at.dataframe
            assert {"reach", "half_life", "decay", "negative"} <= set(table.value.columns)
        if section == "Rollout":
            assert any("not a share of anything" in i.value for i in at.info)


@pytest.mark.slow
def test_a_model_whose_mixing_matrices_do_not_fit_at_once_draws_layer_by_layer_or_says_why(folders, monkeypatch):
    """Jamba's two Mamba layers hold 32 channel matrices each: with room for one layer's, Heads draws the layer
    alone, Overview (every layer at once) says why not and what fits, and every section draws or says why; with
    room for none, the page says so. Never an exception."""
    from mha_viz.pretrained import mixing

    text = "a red cat and a grey dog sat on the mat"  # a text no other test traced: nothing of it is in the cache
    T = len(load_model(folders["jamba"]).encode(text).ids)
    monkeypatch.setattr(mixing, "MAX_MIXER_BYTES", 4 * 32 * T * T + 1)  # one Mamba layer's matrices, not two
    at = app_with(folders["jamba"], "Heads", layer=0)
    at.text_area(key="text").set_value(text).run()
    assert not at.exception and not at.error
    _, drawn = shown_layer(at)
    assert drawn.shape == (32, T, T)
    at.button_group(key="view").set_value("Overview").run()
    assert not at.exception and any("reads every layer of this model at once, which is too large here" in i.value
                                    and "Use at most" in i.value for i in at.info)
    at.button_group(key="view").set_value("Analysis").run()
    for section in SECTIONS.menu("Pretrained"):
        at.button_group(key="section").set_value(section).run()
        assert not at.exception and not at.error, section
    other = "a grey cat and a red dog sat on the rug"  # a new text: none of it cached
    T = len(load_model(folders["jamba"]).encode(other).ids)
    monkeypatch.setattr(mixing, "MAX_MIXER_BYTES", 4 * 32 * T * T - 1)  # not even one layer
    at = app_with(folders["jamba"], "Heads", layer=0)
    at.text_area(key="text").set_value(other).run()
    assert not at.exception and any("This layer is too large to draw whole" in e.value for e in at.error)
