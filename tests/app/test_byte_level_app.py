"""Byte-level tokens in the app: a tiny GPT-2 with a byte-level BPE tokenizer (tests/byte_level.py), typed in as a
local folder, reading Chinese, Japanese, Arabic and emoji text. Every view's figures label the tokens with the
characters they spell (the trace's labels join back to the text), never with mojibake or U+FFFD."""

from __future__ import annotations

import html
import json

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.figures.common import visible_token
from mha_viz.token_labels import byte_decoder
from tests.app.test_app_pretrained import pretrained_app
from tests.byte_level import TEXTS, byte_level_model
from tests.renderer_json import shown_layer, tokens

TOKEN_KEYS = ("ticktext", "customdata")
STAND_INS = {c for c, b in byte_decoder().items() if b >= 0x80 or c == "Ġ"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    model = byte_level_model()
    out = tmp_path_factory.mktemp("byte-level")
    model.model.save_pretrained(out)
    model.tokenizer.save_pretrained(out)
    return str(out)


def strings(value, labels: bool = False) -> list[str]:
    """Every string under the keys that show tokens (tick labels, hover data, the texts of traces)."""
    if isinstance(value, str):
        return [html.unescape(value)] if labels else []
    if isinstance(value, dict):
        return [s for k, v in value.items() if k != "bdata" for s in strings(v, labels or k in TOKEN_KEYS)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v, labels)]
    return []


def token_strings(fig: dict) -> list[str]:
    return strings(fig["layout"]) + [s for trace in fig["data"] for s in strings(
        {k: v for k, v in trace.items() if k in ("text", "customdata", "hovertext")}, labels=True)]


@pytest.mark.parametrize("name", ["chinese", "japanese", "arabic", "emoji"])
def test_every_view_labels_byte_level_tokens_with_their_characters(folder: str, name: str) -> None:
    text = TEXTS[name]
    at: AppTest = pretrained_app(text=text)
    at.text_input(key="model").set_value(folder).run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    labels = byte_level_model().trace(text, 0).query_tokens
    assert "".join(labels) == text and "" in labels  # some tokens hold only the rest of a character
    rows = tokens(shown_layer(at)[0]["queries"])  # the renderer's rows: each the visible label of its token, as text
    assert rows == [visible_token(label) for label in labels]
    for view in ("Heads", "Lines", "One head", "Concat → W_O"):
        at.button_group(key="view").set_value(view).run()
        assert not at.exception and not at.error, (view, [e.value for e in (*at.exception, *at.error)])
        shown = [s for chart in at.get("plotly_chart") for s in token_strings(json.loads(chart.proto.spec))]
        if view == "Heads":
            shown += tokens(shown_layer(at)[0]["queries"])
        foreign = STAND_INS - set(text)
        bad = [s for s in shown if "\ufffd" in s or foreign & set(s)]
        assert not bad, (view, bad[:5])
        assert any(ch in "".join(shown) for ch in text if not ch.isascii()), view  # the characters are on screen


def test_generate_writes_byte_level_text_as_characters(folder: str) -> None:
    """Generate shows the prompt and what was written as text (spelled from the ids), its charts' token labels
    without mojibake; the tokens the random model writes may be parts of characters, shown as hex bytes alone."""
    text = TEXTS["chinese"]
    at: AppTest = pretrained_app(text=text, new_tokens="4")
    at.text_input(key="model").set_value(folder).run()
    at.button_group(key="view").set_value("Generate").run()
    at.slider(key="gen_step").set_value(4).run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    written = next(m.value for m in at.markdown if "red-background" in m.value)
    assert written.startswith(text) and "\ufffd" not in written
    foreign = STAND_INS - set(text)
    shown = [s for chart in at.get("plotly_chart") for s in token_strings(json.loads(chart.proto.spec))]
    assert shown and not [s for s in shown if "\ufffd" in s or foreign & set(s)]
