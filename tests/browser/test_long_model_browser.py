"""Pretrained mode on a long text in Chromium, on tiny random long-context models saved to folders: at 390, 1024,
1400 and 2560 px the layer's overview, the zoom and the layers x heads statistics paint, nothing runs past the page,
axe finds no serious or critical violation, and the keyboard picks the statistic. With --update-assets, the README's
picture (assets/long-model.png): a gpt-oss-style model at 16,384 tokens, its sink heads and window layers."""

from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path

import pytest
import torch
import transformers as tf
from transformers import AutoModelForCausalLM, AutoTokenizer

from harness.browser import CHROMIUM, slider_value, wait_for_query
from mha_viz.pretrained import bundled_model_dir
from tests.app.test_long_model_app import CONFIGS, TEXT
from tests.axe import axe_path, axe_violations, summary
from tests.tiny_causal import random_causal_lm, saved_random_models

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run must install Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y --no-install-recommends chromium)", allow_module_level=True)

OVERVIEW = ".st-key-figure_heads_long"  # the overview's box; the renderer inside it paints one canvas a head
SINK_HEADS = (1, 5)  # the screenshot model's heads whose learned sink logit is set high, in every layer
SCREENSHOT_TOKENS = 16_384


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return saved_random_models({"llama": CONFIGS["llama"]}, AutoModelForCausalLM, tmp_path_factory)["llama"]


def painted(page) -> tuple[int, int, int]:
    """Heads painted: the overview's (the renderer's canvases), the zoom's and the statistics' (Plotly's images)."""
    return (page.locator(f"{OVERVIEW} canvas.mv-heatmap").count(),
            page.locator(".st-key-heads_zoom .heatmaplayer image").count(),
            page.locator(".st-key-long_stats .heatmaplayer image").count())


def assert_fits_and_axe_clean(page, width: int) -> None:
    """Nothing runs past the page, every overview head is whole, and axe finds no serious or critical violation."""
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    for canvas in page.locator(f"{OVERVIEW} canvas.mv-heatmap").all():
        assert 0 < canvas.evaluate("e => e.getBoundingClientRect().right") <= width
    if axe_path() is not None:
        violations = axe_violations(page)
        assert violations == [], summary(violations)


def open_long(browser, server: str, folder: str, width: int, text: str = TEXT, query: str = "", timeout: float = 240,
              height: int = 1400):
    """The Pretrained page with the model typed in (a local folder must be typed) and text: its long view drawn."""
    page = browser.new_page(viewport={"width": width, "height": height}, is_mobile=width == 390)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    url_text = text if len(text) < 30_000 else "a"
    page.goto(f"{server}/?mode=Pretrained&view=Heads&text={urllib.parse.quote(url_text)}{query}")
    if page.viewport_size["width"] < 600:  # the sidebar starts closed on a phone
        page.locator('[data-testid="stExpandSidebarButton"]').click()
    model = page.get_by_label("Model (Hugging Face id or local folder)", exact=True)
    model.fill(folder)
    model.press("Enter")
    if text != url_text:
        area = page.get_by_label("Sentence", exact=True)
        area.fill(text)
        area.press("Control+Enter")
    if page.viewport_size["width"] < 600:
        page.locator('[data-testid="stSidebarCollapseButton"] button').click()
    deadline = time.monotonic() + timeout
    while not all(painted(page)):
        assert time.monotonic() < deadline, f"the long view did not paint in {timeout} s: {painted(page)}"
        time.sleep(0.2)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout * 1000)
    return page


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_the_long_view_paints_fits_and_works_by_keyboard(server: str, browser, folder: str, width: int) -> None:
    page = open_long(browser, server, folder, width)
    try:
        assert painted(page) == (4, 4, 1)  # 4 heads, the first 4 in the zoom, one layers x heads map
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        for box in (f"{OVERVIEW} .mha-viz-widget", ".st-key-heads_zoom .js-plotly-plot", ".st-key-long_stats .js-plotly-plot"):
            for drawn in page.locator(box).all():
                right = drawn.evaluate("e => e.getBoundingClientRect().right")
                assert 0 < right <= width, box
        for canvas in page.locator(f"{OVERVIEW} canvas.mv-heatmap").all():  # whole heads, not cut by the page
            assert 0 < canvas.evaluate("e => e.getBoundingClientRect().right") <= width
        if axe_path() is not None:
            violations = axe_violations(page)
            assert violations == [], summary(violations)
        choice = page.locator(".st-key-long_stat button", has_text="entropy")
        choice.focus()
        page.keyboard.press("Enter")
        wait_for_query(page, "long_stat=entropy")
    finally:
        assert page.errors == []
        page.close()


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> str:
    return saved_random_models({"qwen3_next": CONFIGS["qwen3_next"]}, AutoModelForCausalLM,
                               tmp_path_factory)["qwen3_next"]


@pytest.mark.parametrize("width", [390, 1024, 1400, 2560])
def test_a_hybrids_mixer_layer_paints_its_long_view(server: str, browser, hybrid: str, width: int) -> None:
    """A Gated DeltaNet layer of a long text: its signed overview, the zoom and the statistics paint and fit, and axe
    finds nothing serious."""
    page = open_long(browser, server, hybrid, width, query="&layer=0")
    try:
        assert painted(page) == (4, 4, 1)
        assert page.get_by_text("signed value of the largest |M|").count() == 1
        assert_fits_and_axe_clean(page, width)
    finally:
        assert page.errors == []
        page.close()


def test_a_click_on_the_overview_moves_the_zoom_there(server: str, browser, folder: str) -> None:
    """The red square moves in the page at once, then the server draws the exact block centred on the clicked cell:
    TEXT's 1562 tokens in blocks of 13, a click on cell (60, 20) of a head opens queries 722-849 x keys 202-329."""
    page = open_long(browser, server, folder, 1400)
    try:
        canvas = page.locator(f"{OVERVIEW} canvas.mv-heatmap").nth(2)
        box = canvas.bounding_box()
        cells = int(canvas.get_attribute("width"))
        assert cells == 121
        old = page.locator(f"{OVERVIEW} .mv-mark").nth(2).bounding_box()
        canvas.click(position={"x": (20.5 / cells) * box["width"], "y": (60.5 / cells) * box["height"]})
        wait_for_query(page, "zoom=722")
        wait_for_query(page, "zoom_k=202")
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')")
        mark = page.locator(f"{OVERVIEW} .mv-mark").nth(2).bounding_box()
        assert mark != old
        box = canvas.bounding_box()  # where the redrawn canvas is now
        cell = box["height"] / cells  # the square covers the window: 128 positions from 722, 202
        assert abs(mark["y"] - (box["y"] + 722 / 13 * cell)) <= 2 and abs(mark["x"] - (box["x"] + 202 / 13 * cell)) <= 2
        assert abs(mark["height"] - 128 / 13 * cell) <= 2
        assert slider_value(page, "Zoom: first query") == "722" and slider_value(page, "Zoom: first key") == "202"
    finally:
        assert page.errors == []
        page.close()


def words(n: int) -> str:
    """n words of a repeated sentence: n tokens of the bundled tokenizer (n + 2 with [CLS] and [SEP])."""
    sentence = ("the", "cat", "sat", "on", "the", "mat", "and", "looked", "at", "the", "dog", ".")
    return " ".join(sentence[i % len(sentence)] for i in range(n))


def sink_model(folder: Path) -> str:
    """A gpt-oss-style random model with 16,384 positions: sliding-window (1024) and full layers alternating, and the
    learned sink logits of SINK_HEADS set high, saved with the bundled tokenizer."""
    config = tf.GptOssConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=4, num_attention_heads=8,
                             num_key_value_heads=2, head_dim=16, intermediate_size=64, num_local_experts=2,
                             num_experts_per_tok=1, sliding_window=1024, max_position_embeddings=SCREENSHOT_TOKENS,
                             layer_types=["sliding_attention", "full_attention"] * 2)
    model = random_causal_lm(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks[list(SINK_HEADS)] = 12.0  # about the largest score of a row: a good share
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(folder)
    return str(folder)


def test_the_readme_picture_of_a_long_context_model(server: str, browser, request: pytest.FixtureRequest,
                                                    tmp_path: Path, assets: Path) -> None:
    if not request.config.getoption("--update-assets"):
        pytest.skip("draws 16,384 tokens: only with --update-assets, which writes assets/long-model.png")
    folder = sink_model(tmp_path / "gpt-oss-style-16k")
    page = open_long(browser, server, folder, 1400, text=words(SCREENSHOT_TOKENS - 2),  # with [CLS], [SEP]: 16,384 query="&long_stat=sink&zoom=8000&zoom_k=7936",
                     timeout=900, height=2900)
    try:
        assert page.get_by_text(f"A long text: {SCREENSHOT_TOKENS} tokens").count() == 1
        page.screenshot(path=str(assets / "long-model.png"))  # the page's height: the overview, zoom and statistics
    finally:
        assert page.errors == []
        page.close()


@pytest.mark.slow
def test_cancel_stops_a_long_trace_and_it_can_start_again(server: str, browser, tmp_path_factory) -> None:
    """A 12-layer model at 16,383 tokens takes a minute or more to trace here: Cancel, clicked once the first layer
    is counted, stops the pass at its next layer and the page says so (and offers to trace it again)."""
    def config() -> tf.LlamaConfig:
        return tf.LlamaConfig(**{**CONFIGS["llama"]().to_dict(), "num_hidden_layers": 12, "hidden_size": 256,
                                 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                                 "max_position_embeddings": SCREENSHOT_TOKENS})

    folder = saved_random_models({"deep": config}, AutoModelForCausalLM, tmp_path_factory)["deep"]
    text = words(SCREENSHOT_TOKENS - 3)
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    try:
        page.goto(f"{server}/?mode=Pretrained&view=Heads")
        model = page.get_by_label("Model (Hugging Face id or local folder)", exact=True)
        model.fill(folder)
        model.press("Enter")
        page.get_by_text("Bundled, offline:").wait_for(timeout=120_000)
        area = page.get_by_label("Sentence", exact=True)
        area.fill(text)
        area.press("Control+Enter")
        page.get_by_text("Traced 1 of 12 layers").wait_for(timeout=300_000)
        page.locator(".st-key-long_cancel button").click()
        page.get_by_text("The long trace of this text was cancelled").wait_for(timeout=300_000)
        assert page.locator(".st-key-heads_long").count() == 0
        assert page.locator(".st-key-long_again button").is_visible()
    finally:
        assert page.errors == []
        page.close()
