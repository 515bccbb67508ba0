"""Byte-level tokens (GPT-2 style BPE) are labelled with the characters they spell (mha_viz.token_labels), in the
trace, the exports, the HTML report and the notebook widget's payload: on Chinese, Japanese, Arabic, emoji and
accented text read by a tiny byte-level tokenizer (tests/byte_level.py), the labels of a text join back to it exactly,
and no label holds U+FFFD or a byte's printable stand-in (mojibake such as "Ġ", "Ã©", "ä½")."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest
from transformers import AutoTokenizer

from mha_viz.export import trace_from_json, trace_from_npz, trace_to_json, trace_to_npz
from mha_viz.figures import heads_figure
from mha_viz.figures.common import CONTINUES, token_label, visible_token
from mha_viz.pretrained import bundled_model_dir
from mha_viz.report import html_report
from mha_viz.token_labels import byte_decoder, is_byte_level, spelled, token_labels, vocab_labels, vocab_token
from mha_viz.widget import payload
from tests.byte_level import CORPUS, EOS, TEXTS, byte_level_model, byte_level_tokenizer

STAND_INS = {c for c, b in byte_decoder().items() if b >= 0x80 or c == "Ġ"}  # the non-ASCII bytes' printable stand-ins


@pytest.fixture(scope="module")
def model():
    return byte_level_model()


def clean(labels, text: str) -> bool:
    """No label holds U+FFFD or a byte's stand-in the text itself does not have (mojibake: "Ã©" for "é")."""
    foreign = STAND_INS - set(text)
    return all("\ufffd" not in t and not foreign & set(t) for t in labels)


@pytest.mark.parametrize("name", TEXTS)
def test_the_labels_of_a_text_join_back_to_it(name: str) -> None:
    tokenizer, text = byte_level_tokenizer(), TEXTS[name]
    ids = tokenizer(text)["input_ids"]
    raw = tokenizer.convert_ids_to_tokens(ids)
    assert not clean(raw, text)  # the tokenizer's own tokens are mojibake here ...
    labels = token_labels(tokenizer, ids)
    assert "".join(labels) == text and clean(labels, text) and len(labels) == len(ids)  # ... the labels are the text
    assert "" in labels  # a token holding only the rest of a character: it spells nothing of its own ...
    assert CONTINUES in {token_label(t) for t in labels}  # ... and is drawn as the mark that attaches to the last one


def test_a_character_goes_to_the_token_holding_its_first_byte() -> None:
    tokenizer = byte_level_tokenizer()
    ids = tokenizer("世界")["input_ids"]  # 世 in one token, 界 as two bytes then one
    assert tokenizer.convert_ids_to_tokens(ids) == ["ä¸ĸ", "çķ", "Į"]
    assert token_labels(tokenizer, ids) == ("世", "界", "")
    assert vocab_labels(tokenizer, ids) == ("世", "⟨e7 95⟩", "⟨8c⟩")  # alone, a part of a character is its bytes


def test_special_tokens_keep_their_names_and_split_the_byte_runs() -> None:
    tokenizer = byte_level_tokenizer()
    ids = [tokenizer.convert_tokens_to_ids(EOS), *tokenizer("café 你好")["input_ids"], tokenizer.eos_token_id]
    labels = token_labels(tokenizer, ids)
    assert labels[0] == labels[-1] == EOS and "".join(labels[1:-1]) == "café 你好"


def test_a_character_cut_off_is_shown_as_its_bytes() -> None:
    tokenizer = byte_level_tokenizer()
    ids = tokenizer("世界")["input_ids"][:2]  # 界 cut after its second byte
    assert token_labels(tokenizer, ids) == ("世", "⟨e7 95⟩")


def test_other_tokenizers_keep_their_tokens() -> None:
    wordpiece = AutoTokenizer.from_pretrained(bundled_model_dir())
    ids = wordpiece("unbelievable café")["input_ids"]
    assert not is_byte_level(wordpiece) and is_byte_level(byte_level_tokenizer())
    assert token_labels(wordpiece, ids) == tuple(wordpiece.convert_ids_to_tokens(ids))


@pytest.mark.parametrize("name", TEXTS)
def test_the_trace_its_exports_report_and_widget_payload_read_as_the_text(model, name: str) -> None:
    text = TEXTS[name]
    trace = model.trace(text, 1)
    assert "".join(trace.query_tokens) == text == "".join(trace.key_tokens) and clean(trace.query_tokens, text)
    for again in (trace_from_json(trace_to_json(trace)), trace_from_npz(trace_to_npz(trace))):
        assert again.query_tokens == trace.query_tokens
    document = json.loads(trace_to_json(trace))
    assert "".join(document["query_tokens"]) == text
    report = html_report(trace, title=name)
    listed = re.search(r'<ol class="tokens">(.*?)</ol>', report, re.DOTALL)[1]  # the report's token list
    items = [html.unescape(re.sub(r"<small>\d+</small>", "", i)) for i in re.findall(r"<li>(.*?)</li>", listed)]
    assert items == [visible_token(t) for t in trace.query_tokens] and clean(items, text)
    _, rows, columns = payload([trace])  # the widget's labels: "position: token", the token visible
    assert rows == columns == [f"{i}: {visible_token(t)}" for i, t in enumerate(trace.query_tokens)]
    assert clean(rows, text)
    ticks = json.loads(heads_figure(trace).to_json())["layout"]["yaxis"]["ticktext"]
    assert clean([html.unescape(t) for t in ticks], text)


def test_the_model_weights_vocabulary_and_generation_read_as_characters(model) -> None:
    vocab = model.head_weights().vocab
    assert len(vocab) == len(byte_level_tokenizer()) and clean(vocab, "".join(CORPUS))
    assert "你好" in vocab and " café" in vocab
    generated = model.generate("你好", max_new_tokens=3)
    assert "".join(generated.prompt_tokens) == "你好" and clean([s.token for s in generated.steps], "")
    dla = model.logit_attribution("the cat 🐈", position=-1)
    assert clean([dla.token], "") and np.isfinite(dla.total)


def test_spelled_pieces_join_to_the_text_and_keep_wordpieces_words() -> None:
    tokenizer, text = byte_level_tokenizer(), TEXTS["chinese"]
    ids = tokenizer(text)["input_ids"]
    pieces = spelled(tokenizer, ids, (3, 5))  # a cut inside "，" (3 bytes: tokens 1-3) and inside 界
    assert "".join(pieces) == text and pieces[0] == "你好，" and clean(pieces, text)
    wordpiece = AutoTokenizer.from_pretrained(bundled_model_dir())
    ids = wordpiece("unbelievable cats", add_special_tokens=False)["input_ids"]
    assert spelled(wordpiece, ids, (len(ids) - 1,)) == (wordpiece.convert_tokens_to_string(
        wordpiece.convert_ids_to_tokens(ids[:-1])), wordpiece.convert_tokens_to_string(
        wordpiece.convert_ids_to_tokens(ids[-1:])))


def test_a_label_as_shown_names_its_token(model) -> None:
    tokenizer = byte_level_tokenizer()
    assert vocab_token(tokenizer, " fox") == "Ġfox" and vocab_token(tokenizer, " café") == "ĠcafÃ©"
    fox = tokenizer.convert_tokens_to_ids("Ġfox")
    assert token_labels(tokenizer, [fox]) == (" fox",)
    shown = model.logit_attribution("the red fox saw a big owl . the red", token=" fox")
    assert shown.token == " fox" and shown.total == model.logit_attribution(
        "the red fox saw a big owl . the red", token=fox).total
