"""A hybrid model in Chromium: a tiny random Qwen3-Next (three Gated DeltaNet layers, then gated softmax attention)
saved to a folder. At 390, 1024, 1400 and 2560 px the layer buttons name each layer's kind, every head of the mixer
layer is painted, nothing runs past the page, axe finds no serious or critical violation, and the arrow keys step to
the next layer. With --update-assets, the README's picture (assets/hybrid-layers.png): its Overview, mixing matrices
of the linear layers beside the softmax layer's heads."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from harness.browser import renderers, wait_for_heads, wait_for_query
from mha_viz.pretrained import bundled_model_dir
from tests.axe import axe_path, axe_violations, summary
from tests.browser.test_recall_browser import open_by_button
from tests.tiny_causal import random_causal_lm, saved_random_models
from tests.unit.test_mixers import HYBRID, slow_decays

TEXT = "The cat sat on the mat. The dog sat on the rug. The cat saw the dog and the dog saw the cat."
LAYERS = '[data-mha-viz="renderer"] .mv-layers button'


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    model = random_causal_lm(HYBRID["qwen3_next"][1]())
    slow_decays(model)
    with torch.no_grad():  # weights as trained models keep them (the tests' N(0, 0.2) saturates the gates at 32 wide)
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(0.5)
    path = tmp_path_factory.mktemp("hybrid") / "qwen3-next-tiny"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(path)
    return str(path)


def assert_renderers_fit_and_axe_clean(page, width: int) -> None:
    """Nothing runs past the page or its renderer's box, and axe finds no serious or critical violation."""
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    for root in renderers(page):
        assert root["right"] <= root["left"] + root["width"] + 1, root
    if axe_path() is not None:
        violations = axe_violations(page)
        assert violations == [], summary(violations)


def open_model(browser, server: str, folder: str, width: int, view: str = "Heads", height: int = 1200):
    page = browser.new_page(viewport={"width": width, "height": height}, is_mobile=width == 390)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(f"{server}/?mode=Pretrained&view={view}&layer=0&text={urllib.parse.quote(TEXT)}")
    if width < 600:  # the sidebar starts closed on a phone
        page.locator('[data-testid="stExpandSidebarButton"]').click()
    model = page.get_by_label("Model (Hugging Face id or local folder)", exact=True)
    model.fill(folder)
    model.press("Enter")
    if width < 600:
        page.locator('[data-testid="stSidebarCollapseButton"] button').click()
    return page


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_a_hybrid_models_layers_say_their_kind_fit_and_work_by_keyboard(server: str, browser, folder: str,
                                                                         width: int) -> None:
    page = open_model(browser, server, folder, width)
    try:
        wait_for_heads(page, 4)
        page.get_by_text("Layer 0 is a Gated DeltaNet layer").wait_for()
        assert page.locator(LAYERS).all_inner_texts() == ["0 lin", "1 lin", "2 lin", "3 attn"]
        assert_renderers_fit_and_axe_clean(page, width)
        page.locator(f'{LAYERS}[aria-pressed="true"]').focus()
        page.keyboard.press("ArrowRight")
        wait_for_query(page, "layer=1")
        page.get_by_text("Layer 1 is a Gated DeltaNet layer").wait_for()
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_the_bundled_hybrids_button_opens_its_gated_deltanet_layer(server: str, browser, width: int) -> None:
    """mha-viz/hybrid-2l (lesson 8's model) from its sidebar button, by keyboard: Heads on its own haystack, the
    Gated DeltaNet layer's four mixing matrices painted, the layer buttons naming both kinds, the page fitting."""
    page = open_by_button(browser, server, "hybrid-2l (Gated DeltaNet + attention)", "hybrid-2l", width, height=1200)
    try:
        wait_for_heads(page, 4)
        page.get_by_text("Layer 0 is a Gated DeltaNet layer").wait_for()
        assert page.locator(LAYERS).all_inner_texts() == ["0 lin", "1 attn"]
        assert_renderers_fit_and_axe_clean(page, width)
    finally:
        assert page.errors == []
        page.close()


def test_layers_with_more_mixer_heads_than_attention_heads_paint_their_own_heads(server: str, browser,
                                                                                tmp_path_factory) -> None:
    """Bamba with 8 Mamba-2 heads a layer beside 4 attention heads: each layer paints its own heads, no more."""
    from transformers import AutoModelForCausalLM

    config = {"ragged": HYBRID["bamba (more mixer heads)"][1]}
    folder = saved_random_models(config, AutoModelForCausalLM, tmp_path_factory)["ragged"]
    page = open_model(browser, server, folder, 1400)
    try:
        page.get_by_text("Layer 0 is a Mamba-2 layer").wait_for(timeout=120_000)
        wait_for_heads(page, 8)
        assert page.locator(LAYERS).all_inner_texts() == ["0 ssm", "1 attn", "2 ssm"]
        page.locator(LAYERS).nth(1).click()
        wait_for_query(page, "layer=1")
        deadline = time.monotonic() + 60
        while [r["heads"] for r in renderers(page)] != [4]:  # the attention layer's own 4, not 8 with 4 empty
            assert time.monotonic() < deadline, renderers(page)
            time.sleep(0.1)
        page.get_by_text("4 heads (numbered from 0)").wait_for()
    finally:
        assert page.errors == []
        page.close()


@pytest.fixture(scope="module")
def jamba(tmp_path_factory: pytest.TempPathFactory) -> str:
    from transformers import AutoModelForCausalLM

    return saved_random_models({"jamba": HYBRID["jamba"][1]}, AutoModelForCausalLM, tmp_path_factory)["jamba"]


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_a_model_without_mixer_heads_paints_a_matrix_per_channel_and_fits(server: str, browser, jamba: str,
                                                                          width: int) -> None:
    """Jamba's Mamba layers have no heads: each of d_inner = 32 channels is a head of width 1, 32 matrices that must
    fit a phone as a projector, beside its 4 attention heads; the Overview's 32 columns too."""
    page = open_model(browser, server, jamba, width)
    try:
        page.get_by_text("Layer 0 is a Mamba layer").wait_for(timeout=120_000)
        wait_for_heads(page, 32)
        assert page.locator(LAYERS).all_inner_texts() == ["0 ssm", "1 attn", "2 ssm"]
        assert_renderers_fit_and_axe_clean(page, width)
        page.locator(f'{LAYERS}[aria-pressed="true"]').focus()
        page.keyboard.press("ArrowRight")
        wait_for_query(page, "layer=1")
        deadline = time.monotonic() + 60
        while [r["heads"] for r in renderers(page)] != [4]:  # the attention layer's own 4 heads, not 32 channels
            assert time.monotonic() < deadline, renderers(page)
            time.sleep(0.2)
    finally:
        assert page.errors == []
        page.close()


def test_the_overview_of_a_model_without_mixer_heads_fits_its_channels(server: str, browser, jamba: str) -> None:
    page = open_model(browser, server, jamba, 1400, view="Overview")
    try:
        page.get_by_text("All 3 layers × 32 heads at a glance").wait_for(timeout=120_000)
        if axe_path() is not None:
            assert axe_violations(page) == []
        heatmaps = page.locator('[data-testid="stPlotlyChart"] .heatmaplayer image')
        heatmaps.nth(32 + 4 + 32 - 1).wait_for(timeout=120_000)  # each layer's own heads: 32 channels, 4, 32
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 1400
        labels = page.locator('[data-testid="stPlotlyChart"] .annotation-text').all_text_contents()
        assert {"H0", "H2", "H30"} <= set(labels) and "H1" not in labels  # every other column named, none overlap
    finally:
        assert page.errors == []
        page.close()


def test_the_readme_picture_of_a_hybrid_model(server: str, browser, folder: str, request: pytest.FixtureRequest,
                                              assets: Path) -> None:
    if not request.config.getoption("--update-assets"):
        pytest.skip("only with --update-assets, which writes assets/hybrid-layers.png")
    page = open_model(browser, server, folder, 1400, view="Overview", height=1100)
    try:
        page.locator('[data-testid="stPlotlyChart"] .heatmaplayer image').nth(15).wait_for(timeout=120_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)
        page.screenshot(path=str(assets / "hybrid-layers.png"))
    finally:
        assert page.errors == []
        page.close()
