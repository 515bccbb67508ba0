"""Export and share: NPZ / JSON round trips, streaming, sizes, the export slot, the offline HTML report and the CLI
(the Streamlit controls: tests/app/test_export_app.py)."""

from __future__ import annotations

import base64
import doctest
import html
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from plotly.offline import get_plotlyjs

import mha_viz
import mha_viz.export
import mha_viz.serve.slot
from mha_viz.analysis import without_tokens
from mha_viz.export import (
    ARRAY_FIELDS,
    ARRAY_FORMATS,
    FORMAT,
    SIZE_SAMPLE,
    export_bytes,
    export_size,
    iter_json,
    safe_filename,
    share_url,
    trace_from_json,
    trace_from_npz,
    trace_to_json,
    trace_to_npz,
    write_json,
    write_npz,
)
from mha_viz.report import html_report
from mha_viz.serve.slot import ExportBusy, build_export
from mha_viz.trace import AttentionTrace
from mha_viz.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[2]
XSS = ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>")
TOKENS = ("The", XSS[0], "é", "a&b", '"q"', XSS[1], "🇫🇷", "\u2028", "cat")


def configurable(tokens=TOKENS, context=None, *, h=4, d_model=32, causal=True, bias=True, seed=0) -> AttentionTrace:
    mha = mha_viz.MultiHeadAttention(d_model, h, seed=seed, bias=bias)
    x = mha_viz.embed_tokens(list(tokens), d_model, seed=seed)
    c = None if context is None else mha_viz.embed_tokens(list(context), d_model, seed=seed)
    return mha(x, c, causal=causal, query_tokens=tokens, key_tokens=context)


def weights_only(trace: AttentionTrace | None = None) -> AttentionTrace:
    """A trace with only the attention weights (as for a model without an adapter), "The" hidden."""
    shown = without_tokens(trace or configurable(causal=False), {"The"})
    return AttentionTrace(query_tokens=shown.query_tokens, key_tokens=shown.key_tokens, weights=shown.weights,
                          causal=shown.causal, meta={**shown.meta, "unavailable": "no adapter for this architecture"})


def grouped_query() -> AttentionTrace:
    """Four query heads reading two K/V heads, no output bias, float64."""
    full = configurable(bias=False)
    kv = (0, 0, 1, 1)
    arrays = {name: getattr(full, name).astype(np.float64) for name in ARRAY_FIELDS if getattr(full, name) is not None}
    arrays["keys"], arrays["values"] = arrays["keys"][list(kv)], arrays["values"][list(kv)]
    return AttentionTrace(query_tokens=full.query_tokens, key_tokens=full.key_tokens, **arrays, causal=True,
                          kv_heads=kv, meta={"model": "gqa", "check": {"x": 0.0}, "nested": {"inf": float("inf")}})


def assert_same_trace(a: AttentionTrace, b: AttentionTrace) -> None:
    assert b.query_tokens == a.query_tokens and b.key_tokens == a.key_tokens
    assert (b.causal, b.cross, b.kv_heads, b.scale, b.softcap) == (a.causal, a.cross, a.kv_heads, a.scale, a.softcap)
    assert b.missing == a.missing and list(b.score_bias) == list(a.score_bias)
    for name, x in a.score_bias.items():
        np.testing.assert_array_equal(b.score_bias[name], x, err_msg=name)
    for name in ARRAY_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert y.dtype == x.dtype and y.shape == x.shape, name
            np.testing.assert_array_equal(y, x, err_msg=name)  # exact, -inf included


def biased_softcapped() -> AttentionTrace:
    """A trace with named score terms (as T5, Bloom or DeBERTa give) and soft-capping (as Gemma2 gives)."""
    from dataclasses import replace

    full = configurable(causal=False)
    H, T, S = full.weights.shape
    bias = np.linspace(-1, 1, H * T * S, dtype=np.float32).reshape(H, T, S)
    return replace(full, score_bias={"ALiBi": bias, "content→position (c2p)": -bias}, softcap=50.0)


TRACES = {
    "self-causal": lambda: configurable(),
    "score-bias-softcap": biased_softcapped,
    "cross": lambda: configurable(TOKENS[:4], ("Le", "chat", "<b>", "noir", "!"), causal=False),
    "weights-only": weights_only,
    "grouped-query-no-bias-float64": grouped_query,
}


# ------------------------------------------------------------------------------------------------ NPZ


@pytest.mark.parametrize("make", TRACES.values(), ids=TRACES.keys())
def test_npz_round_trip_is_exact(make) -> None:
    trace = make()
    back = trace_from_npz(trace_to_npz(trace))
    assert_same_trace(trace, back)
    assert back.meta == json.loads(json.dumps(mha_viz.export.jsonable(trace.meta)))


def test_npz_is_plain_numpy_without_pickle() -> None:
    trace = configurable()
    with np.load(io.BytesIO(trace_to_npz(trace)), allow_pickle=False) as npz:
        assert str(npz["format"]) == FORMAT
        assert npz["query_tokens"].dtype.kind == "U" and tuple(npz["query_tokens"]) == TOKENS
        assert set(npz.files) >= set(ARRAY_FIELDS) - {"sinks", "lambdas", "maps", "map_scores", "gates"} | {"query_tokens", "key_tokens", "causal", "cross", "meta"}
        assert json.loads(str(npz["meta"])) == trace.meta
        assert np.isneginf(npz["scores"]).sum() == trace.num_heads * len(TOKENS) * (len(TOKENS) - 1) // 2
    assert "kv_heads" not in np.load(io.BytesIO(trace_to_npz(trace))).files
    uncompressed = trace_to_npz(trace, compress=False)
    assert len(uncompressed) > len(trace_to_npz(trace))
    assert_same_trace(trace, trace_from_npz(uncompressed))


def test_npz_loader_refuses_other_files_and_never_unpickles() -> None:
    with pytest.raises(ValueError, match="not an mha-viz trace"):
        trace_from_npz(b"not a zip file")
    buf = io.BytesIO()
    np.savez(buf, weights=np.zeros((1, 1, 1)))  # no format marker
    with pytest.raises(ValueError, match="not an mha-viz trace"):
        trace_from_npz(buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, format=np.array(FORMAT), meta=np.array([{"x": 1}], dtype=object))  # a pickled object array
    with pytest.raises(ValueError, match="not an mha-viz trace"):
        trace_from_npz(buf.getvalue())


# ----------------------------------------------------------------------------------------------- JSON


def strict_loads(text: str):
    def refuse(name: str):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("make", TRACES.values(), ids=TRACES.keys())
def test_json_has_the_shapes_and_reads_back_exactly(make) -> None:
    trace = make()
    text = trace_to_json(trace)
    doc = strict_loads(text)
    assert doc["format"] == FORMAT
    assert doc["query_tokens"] == list(trace.query_tokens) and doc["key_tokens"] == list(trace.key_tokens)
    assert doc["missing"] == list(trace.missing)
    for name in ARRAY_FIELDS:
        array = getattr(trace, name)
        if array is None:
            assert name not in doc["arrays"] and name not in doc["shapes"]
            continue
        assert doc["shapes"][name] == list(array.shape) and doc["dtypes"][name] == str(array.dtype)
        assert np.array(doc["arrays"][name], dtype=array.dtype).shape == array.shape
    assert_same_trace(trace, trace_from_json(text))


def test_json_masked_scores_are_the_string_minus_inf() -> None:
    trace = configurable()
    doc = strict_loads(trace_to_json(trace))
    row0 = doc["arrays"]["scores"][0][0]  # query 0 sees only key 0 under the causal mask
    assert isinstance(row0[0], float) and row0[1:] == ["-inf"] * (len(TOKENS) - 1)
    np.testing.assert_array_equal(np.array(doc["arrays"]["scores"], dtype=np.float32), trace.scores)
    assert "-inf" in doc["nonfinite"]


def test_json_keeps_html_tokens_as_plain_strings_and_is_inert_in_html() -> None:
    text = trace_to_json(configurable())
    assert not any(c in text for c in "<>&\u2028\u2029")  # escaped as \u003c ...: safe inside <script>
    doc = strict_loads(text)
    assert XSS[0] in doc["query_tokens"] and XSS[1] in doc["query_tokens"] and "\u2028" in doc["query_tokens"]
    assert "\\u003cscript\\u003e" in text


@settings(max_examples=25, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_text_round_trips_through_npz_and_json(text: str) -> None:
    tokens = mha_viz.tokenize(text)
    if not tokens:
        return
    trace = configurable(tuple(tokens), h=2, d_model=8)
    assert_same_trace(trace, trace_from_npz(trace_to_npz(trace)))
    json_text = trace_to_json(trace)
    json_text.encode("utf-8")  # writable as UTF-8
    assert_same_trace(trace, trace_from_json(json_text))


# ------------------------------------------------------------------- streaming, stated dtypes, base64


def long_trace(n: int = 300, *, causal: bool = True, cross: bool = False) -> AttentionTrace:
    """n tokens a side: arrays larger than SIZE_SAMPLE and than one JSON chunk."""
    tokens = tuple(f"w{i}" for i in range(n))
    return configurable(tokens, tokens[::-1] if cross else None, causal=causal)


@pytest.mark.slow
def test_json_is_written_in_bounded_chunks_and_equals_the_string() -> None:
    trace = long_trace()
    chunks = list(iter_json(trace))
    document = b"".join(chunks)
    assert document == trace_to_json(trace).encode("utf-8")
    buffer = io.BytesIO()
    write_json(trace, buffer)
    assert buffer.getvalue() == document
    assert len(document) > 5_000_000 and max(map(len, chunks)) < 1_000_000  # memory: one chunk, not the document
    assert_same_trace(trace, trace_from_json(document))


@pytest.mark.parametrize("make", TRACES.values(), ids=TRACES.keys())
def test_base64_json_is_exact_and_plain_numpy_reads_it(make) -> None:
    trace = make()
    text = trace_to_json(trace, array_format="base64")
    doc = strict_loads(text)
    assert doc["array_format"] == "base64"
    assert_same_trace(trace, trace_from_json(text))
    for name, array in mha_viz.export.trace_arrays(trace).items():  # the recipe of the module docstring
        little = np.dtype(doc["dtypes"][name]).newbyteorder("<")
        read = np.frombuffer(base64.b64decode(doc["arrays"][name]), little).reshape(doc["shapes"][name])
        np.testing.assert_array_equal(read, array)


def test_base64_json_is_less_than_half_of_lists_for_long_inputs() -> None:
    trace = long_trace(cross=True, causal=False)
    lists, packed = export_bytes(trace, "json"), export_bytes(trace, "json", array_format="base64")
    numbers = sum(a.size for a in mha_viz.export.trace_arrays(trace).values())
    assert len(packed) < 5.4 * numbers < 0.5 * len(lists)


@pytest.mark.parametrize("make", TRACES.values(), ids=TRACES.keys())
def test_a_stated_float16_is_what_both_files_hold(make) -> None:
    trace = make()
    half = trace_from_npz(trace_to_npz(trace, dtype="float16"))
    stored = mha_viz.export.trace_arrays(half)
    for name, array in mha_viz.export.trace_arrays(trace).items():
        assert stored[name].dtype == np.float16
        np.testing.assert_array_equal(stored[name], array.astype(np.float16))  # -inf stays -inf
    for array_format in ARRAY_FORMATS:
        text = trace_to_json(trace, dtype="float16", array_format=array_format)
        assert set(strict_loads(text)["dtypes"].values()) == {"float16"}
        assert_same_trace(half, trace_from_json(text))
    saved = sum(a.nbytes - 2 * a.size for a in mha_viz.export.trace_arrays(trace).values())  # 2 bytes a number
    assert len(trace_to_npz(trace, compress=False)) - len(trace_to_npz(trace, dtype="float16", compress=False)) == saved


def test_float16_lists_read_back_every_float16_exactly() -> None:
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(1, 256, 256)  # all bit patterns
    trace = AttentionTrace(query_tokens=("a",) * 256, key_tokens=("b",) * 256, weights=every)
    back = trace_from_json(trace_to_json(trace)).weights
    assert back.dtype == np.float16
    finite_or_inf = ~np.isnan(every)
    np.testing.assert_array_equal(back[finite_or_inf].view(np.uint16), every[finite_or_inf].view(np.uint16))  # -0.0
    assert np.isnan(back[~finite_or_inf]).all()


def test_a_value_beyond_float16_is_refused_not_made_infinite() -> None:
    trace = configurable()
    big = AttentionTrace(**{**{f: getattr(trace, f) for f in ("query_tokens", "key_tokens", "weights", "causal")},
                            "scores": np.where(np.isfinite(trace.scores), 1e5, trace.scores).astype(np.float32)})
    for build in (lambda: trace_to_npz(big, dtype="float16"), lambda: list(iter_json(big, dtype="float16")),
                  lambda: export_size(big, "npz", dtype="float16") and write_npz(big, io.BytesIO(), dtype="float16")):
        with pytest.raises(ValueError, match="scores has values beyond float16's range"):
            build()
    assert trace_from_npz(trace_to_npz(big, dtype="float32")).scores.max() == 1e5


@pytest.mark.parametrize(
    ("call", "message"),
    [(lambda t: trace_to_json(t, array_format="csv"), "array_format must be one of lists, base64"),
     (lambda t: trace_to_npz(t, dtype="int8"), "dtype must be None"),
     (lambda t: export_size(t, "html"), "fmt must be 'npz' or 'json'")],
)
def test_unknown_export_options_are_refused(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(configurable())


def test_json_without_array_format_is_read_as_lists() -> None:
    """Files written before base64 existed have no array_format key."""
    trace = configurable()
    doc = json.loads(trace_to_json(trace))
    del doc["array_format"]
    assert_same_trace(trace, trace_from_json(json.dumps(doc)))


def test_npz_streams_to_a_file_that_cannot_seek() -> None:
    class Pipe(io.RawIOBase):
        def __init__(self) -> None:
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            self.data += bytes(b)
            return len(b)

    trace = configurable()
    pipe = Pipe()
    write_npz(trace, pipe)
    assert_same_trace(trace, trace_from_npz(bytes(pipe.data)))


# ---------------------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("dtype", [None, "float32", "float16"])
@pytest.mark.parametrize("make", TRACES.values(), ids=TRACES.keys())
def test_export_size_is_exact_before_building(make, dtype) -> None:
    trace = make()
    npz = export_size(trace, "npz", dtype=dtype)
    assert npz == len(trace_to_npz(trace, compress=False, dtype=dtype))
    with tempfile.TemporaryFile() as file:  # a real (seekable) file: the same bytes
        write_npz(trace, file, compress=False, dtype=dtype)
        assert file.tell() == npz
    assert len(trace_to_npz(trace, dtype=dtype)) <= npz * 1.001
    for array_format in ARRAY_FORMATS:  # lists: exact while no array has more than SIZE_SAMPLE numbers
        assert export_size(trace, "json", array_format=array_format, dtype=dtype) == len(
            export_bytes(trace, "json", array_format=array_format, dtype=dtype))


@pytest.mark.slow
@pytest.mark.parametrize(("causal", "cross"), [(True, False), (False, True)])
def test_json_lists_size_of_a_long_input_is_estimated_within_one_percent(causal: bool, cross: bool) -> None:
    trace = long_trace(causal=causal, cross=cross)
    assert trace.weights.size > SIZE_SAMPLE
    actual = len(export_bytes(trace, "json"))
    assert abs(export_size(trace, "json") - actual) < 0.01 * actual
    assert export_size(trace, "json", array_format="base64") == len(export_bytes(trace, "json", array_format="base64"))


# ------------------------------------------------------------------------------ one large export at a time


def test_large_exports_are_built_one_at_a_time(monkeypatch) -> None:
    trace = configurable()
    small = weights_only()
    monkeypatch.setattr(mha_viz.serve.slot, "LARGE_EXPORT_BYTES", export_size(small, "npz") + 1)  # trace counts as large
    entered, go_on = threading.Semaphore(0), threading.Event()
    inside, most, count = [0], [0], threading.Lock()
    write = mha_viz.export.write_json

    def watched_write(*args, **kwargs):
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        entered.release()
        go_on.wait(60)
        write(*args, **kwargs)
        with count:
            inside[0] -= 1

    monkeypatch.setattr(mha_viz.export, "write_json", watched_write)
    results: list[bytes] = []
    first = threading.Thread(target=lambda: results.append(build_export(trace, "json")))
    first.start()
    assert entered.acquire(timeout=60)  # the first export is being built
    second = threading.Thread(target=lambda: results.append(build_export(trace, "json", timeout=None)))
    second.start()
    assert not entered.acquire(timeout=0.5)  # the second waits for the slot
    with pytest.raises(ExportBusy, match="another large export is being built"):
        build_export(trace, "npz", timeout=0)
    assert_same_trace(small, trace_from_npz(build_export(small, "npz", timeout=0)))  # small ones never wait
    go_on.set()
    first.join(60)
    second.join(60)
    assert most[0] == 1 and len(results) == 2 and results[0] == results[1]
    assert_same_trace(trace, trace_from_json(results[0]))


def test_a_failed_export_frees_the_slot(monkeypatch) -> None:
    monkeypatch.setattr(mha_viz.serve.slot, "LARGE_EXPORT_BYTES", 1)
    huge = AttentionTrace(query_tokens=("a",), key_tokens=("b",), weights=np.full((1, 1, 1), 1e6, np.float32))
    with pytest.raises(ValueError, match="beyond float16"):
        build_export(huge, "json", dtype="float16")
    assert trace_from_json(build_export(huge, "json", timeout=0)).weights[0, 0, 0] == 1e6


def test_export_module_docstring_examples() -> None:
    result = doctest.testmod(mha_viz.export)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [("all-MiniLM-L6-v2 layer 2", "all-MiniLM-L6-v2-layer-2"), ("../../etc/passwd", "etc-passwd"),
     ("<script>alert(1)</script>", "script-alert-1-script"), ("...", "mha-viz"), ("", "mha-viz"),
     ("héllo wörld", "h-llo-w-rld"), ("a" * 200, "a" * 80)],
)
def test_safe_filename(name: str, expected: str) -> None:
    assert safe_filename(name) == expected


def test_share_url() -> None:
    query = {"h": "8", "text": "a b&c=d?#é"}
    assert share_url("http://host:8501/app", query) == "http://host:8501/app?h=8&text=a%20b%26c%3Dd%3F%23%C3%A9"
    assert share_url("http://host/?old=1#frag", {"h": "2"}) == "http://host/?h=2"
    assert share_url(None, {"h": "2"}) == "?h=2"
    assert share_url("http://host/", {}) == "http://host/" and share_url(None, {}) == ""
    from urllib.parse import parse_qs, urlsplit

    from mha_viz.params import ViewState, parse_query, to_query

    state = ViewState(h=8, text="It's <b>bold</b> & 100% \"quoted\"", causal=True)
    parsed = {k: v[-1] for k, v in parse_qs(urlsplit(share_url("http://x/", to_query(state))).query).items()}
    assert parse_query(parsed) == (state, [])  # the link reproduces the view


# --------------------------------------------------------------------------------------------- report


class Tags(HTMLParser):
    """Every start tag with its attributes; script and style bodies are raw text to HTMLParser."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag in ("script", "style")

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if not self._in_script:
            self.text.append(data)


def parse(page: str) -> Tags:
    parser = Tags()
    parser.feed(page)
    parser.close()
    return parser


def assert_self_contained(page: str, n_figures: int) -> Tags:
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1  # plotly.js inlined once
    rest = page.replace(bundle, "")
    for remote in ('src="http', "src='http", "cdn.plot.ly", "<link", "@import", "url(http"):
        assert remote not in rest, remote
    tags = parse(page)
    scripts = [attrs for tag, attrs in tags.tags if tag == "script"]
    assert all("src" not in attrs for attrs in scripts)
    assert len(scripts) == 2 + n_figures  # PlotlyConfig, plotly.js, one Plotly.newPlot per figure
    assert rest.count("Plotly.newPlot(") == n_figures
    assert "default-src 'none'" in page and "connect-src 'none'" in page  # the CSP forbids any fetch
    return tags


ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "script", "body", "h1", "h2", "p", "table", "tr", "th",
                "td", "ol", "li", "small", "code", "figure", "div", "a"}


@pytest.mark.parametrize("make", TRACES.values(), ids=TRACES.keys())
def test_report_is_self_contained_and_shows_tokens_as_text(make) -> None:
    trace = make()
    notes = {"text": XSS[1], "link": "https://x.org/?a=1&b=2", "not a link": "javascript:alert(1)", "list": [1, "<i>"]}
    page = html_report(trace, title="Heads <b>of</b> " + XSS[0], notes=notes)
    n_figures = 1 if trace.missing else 3
    tags = assert_self_contained(page, n_figures)
    assert {tag for tag, _ in tags.tags} <= ALLOWED_TAGS  # no <img>, no <b>, no injected <script src>
    for xss in XSS:
        assert xss not in page  # never as markup, anywhere (figures' JSON included)
    visible = "".join(tags.text)
    for token in trace.query_tokens:
        assert html.escape(token) in page and token in visible  # escaped in the source, plain in the page
    assert "Heads <b>of</b> " + XSS[0] in visible and XSS[1] in visible
    links = [attrs["href"] for tag, attrs in tags.tags if tag == "a"]
    assert links == ["https://x.org/?a=1&b=2"]  # http(s) addresses become links, nothing else does
    for name in ARRAY_FIELDS:
        if getattr(trace, name) is not None:
            assert " × ".join(map(str, getattr(trace, name).shape)) in visible


def test_report_has_the_wo_check_numbers() -> None:
    trace = configurable()
    page = html_report(trace, title="t")
    visible = "".join(parse(page).text)
    for label, err in trace.check_wo_path().items():
        assert label in visible and f"{err:.2e}" in visible
        assert err < 1e-4
    weights_page = html_report(weights_only(), title="t")
    assert "Concat → W_O check" not in weights_page and "Only the attention weights are available" in weights_page


def test_report_figure_json_escapes_script_end_tags() -> None:
    trace = configurable()
    evil = go.Figure(go.Bar(x=[XSS[0], "</script><script>alert(2)</script>"], y=[1, 2]),
                     layout={"title": {"text": "</script><img src=x onerror=alert(3)>"}})
    page = html_report(trace, title="t", figures=[evil])
    tags = assert_self_contained(page, 1)
    assert "</script><script>alert(2)" not in page and "<img src=x onerror=alert(3)>" not in page
    assert "\\u003c\\u002fscript\\u003e" in page  # Plotly's JSON escapes < / >
    assert [tag for tag, _ in tags.tags].count("img") == 0


def test_report_leaves_out_figures_beyond_its_budget_and_says_so() -> None:
    trace = configurable()
    page = html_report(trace, title="t", max_figure_bytes=1)
    assert_self_contained(page, 0)
    visible = "".join(parse(page).text)
    assert visible.count("is left out: it would add") == 3 and "Figure 2 (concat(head_0" in visible
    assert "Its numbers are in the trace's .npz export." in visible


@pytest.mark.slow
def test_report_of_the_largest_layer_within_the_cli_limits_stays_small() -> None:
    """h = 16, d_model = 768, d_k = d_v = 256 (d_out = d_model), 512 tokens a side: the concat -> W_O figure
    alone would be ~39 MB; it is left out and the report stays within its budget."""
    from mha_viz.config import MHAConfig
    from mha_viz.report import MAX_FIGURE_BYTES
    from mha_viz.sources import configurable_trace

    text = " ".join(f"w{i}" for i in range(512))
    trace = configurable_trace(text, MHAConfig(768, 16, d_k=256, d_v=256), context=text)
    page = html_report(trace, title="largest")
    assert_self_contained(page, 2)  # the heads grid and the contributions
    assert len(page.encode("utf-8")) < MAX_FIGURE_BYTES + len(get_plotlyjs()) + 1_000_000
    assert "Figure 2 (concat(head_0 … head_15)  [512×4096]" in html.unescape(page)


# ------------------------------------------------------------------------------------------------ CLI


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI of this checkout (first on PYTHONPATH: an editable install may point at another one)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "mha_viz", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path, **(env or {})})


@pytest.mark.slow
def test_cli_configurable_report_npz_and_json(tmp_path: Path) -> None:
    text, context = "The <script>alert(1)</script> cat sat", "Le chat <img src=x onerror=alert(1)>"
    done = run_cli("report", "--text", text, "--context", context, "--heads", "8", "--d-model", "64", "--seed", "3",
                   "--causal", "--no-pe", "--out", "r.html", "--npz", "t.npz", "--json", "t.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "wrote r.html" in done.stdout
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert_self_contained(page, 3)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and XSS[0] not in page and XSS[1] not in page
    # the files hold exactly the trace the library computes for these settings
    mha = mha_viz.MultiHeadAttention(64, 8, seed=3)
    q, k = mha_viz.tokenize(text), mha_viz.tokenize(context)
    with torch.inference_mode():
        expected = mha(mha_viz.embed_tokens(q, 64, seed=3, positional=False),
                       mha_viz.embed_tokens(k, 64, seed=3, positional=False),
                       causal=True, query_tokens=q, key_tokens=k)
    assert_same_trace(expected, trace_from_npz((tmp_path / "t.npz").read_bytes()))
    assert_same_trace(expected, trace_from_json((tmp_path / "t.json").read_text(encoding="utf-8")))


@pytest.mark.slow
def test_cli_bundled_model_report(tmp_path: Path) -> None:
    done = run_cli("report", "--model", "bundled", "--layer", "2", "--text", "The cat <b>sat</b>", "--out", "m.html",
                   "--npz", "m.npz", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Loading weights" not in done.stderr
    page = (tmp_path / "m.html").read_text(encoding="utf-8")
    tags = assert_self_contained(page, 3)
    visible = "".join(tags.text)
    assert "[CLS]" in visible and "&lt;" in page and "<b>sat" not in page
    assert "encoder layer 2" in visible and "against the model's own numbers" in visible
    trace = trace_from_npz((tmp_path / "m.npz").read_bytes())
    assert trace.weights.shape[0] == 12 and trace.meta["layer"] == 2 and not trace.missing
    assert trace.query_tokens[0] == "[CLS]" and trace.query_tokens[-1] == "[SEP]"


def assert_one_line_error(stderr: str, message: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m mha_viz report: error: ") and message in lines[0], stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--heads", "5", "--d-model", "64", "--out", "x.html"), 2, "h=5 does not divide d_model=64: each head would get 12.8"),
        (("--model", "nobody-xyz/no-such-model", "--out", "x.html"), 1, "could not be downloaded: offline mode"),
    ],
)
@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tmp_path: Path, args, code: int, message: str) -> None:
    done = run_cli("report", *args, cwd=tmp_path)
    assert done.returncode == code
    assert_one_line_error(done.stderr, message)
    assert not (tmp_path / "x.html").exists() and done.stdout == ""


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--heads", "0", "--out", "x.html"), 2, "num_heads must be a positive whole number"),
        (("--heads", "4", "--d-k", "-1", "--out", "x.html"), 2, "d_k must be a positive whole number"),
        (("--seed", "-1", "--out", "x.html"), 2, "--seed must be a whole number from 0"),
        (("--heads", "4",), 2, "nothing to write"),
        (("--layer", "2", "--out", "x.html"), 2, "--layer applies only to pretrained models"),
        (("--model", "bundled", "--heads", "8", "--seed", "1", "--out", "x.html"), 2,
         "--heads, --seed apply only to the configurable layer"),
        (("--text", " \t ", "--out", "x.html"), 2, "the text has no tokens"),
        (("--model", "no such model", "--out", "x.html"), 1, "could not load the model 'no such model'"),
        (("--out", "missing-dir/x.html"), 1, "could not write missing-dir"),
    ],
)
def test_cli_refuses_bad_arguments_in_one_line(tmp_path: Path, monkeypatch, capsys, args, code: int, message: str) -> None:
    from mha_viz.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["report", *args]) == code
    out, err = capsys.readouterr()
    assert_one_line_error(err, message)
    assert out == "" and not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("args", [("report", "--bogus"), ("report", "--heads", "many"), ()])
def test_cli_usage_errors_exit_2(capsys, args) -> None:
    from mha_viz.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    assert exit_.value.code == 2 and "error:" in capsys.readouterr().err


@pytest.mark.slow
def test_import_mha_viz_stays_free_of_streamlit() -> None:
    code = ("import sys, mha_viz, mha_viz.export, mha_viz.report, mha_viz.__main__; "
            "print('streamlit' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False"], done.stderr


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_every_attention_variant_reads_back_exactly_from_npz_and_json(kind: str) -> None:
    from dataclasses import fields

    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_trace
    from mha_viz.variants import LayerVariant

    trace = configurable_trace("the cat sat on the mat", MHAConfig(32, 4), variant=LayerVariant(kind, kv_heads=2),
                               causal=True)
    for back in (trace_from_npz(trace_to_npz(trace)), trace_from_json(trace_to_json(trace))):
        for f in fields(trace):
            ours = getattr(trace, f.name)
            if isinstance(ours, np.ndarray):
                np.testing.assert_array_equal(getattr(back, f.name), ours, err_msg=f"{kind}: {f.name}")
        assert back.kv_heads == trace.kv_heads and back.meta["variant"] == kind


@pytest.mark.parametrize("kind, arrays", [("window", ("sinks",)), ("diff", ("lambdas", "maps", "map_scores")),
                                          ("moh", ("gates",))])
def test_the_report_of_a_variant_lists_and_explains_its_own_arrays(kind: str, arrays: tuple[str, ...]) -> None:
    from mha_viz.config import MHAConfig
    from mha_viz.report import MEANINGS, html_report
    from mha_viz.sources import configurable_trace
    from mha_viz.variants import LayerVariant

    page = html_report(configurable_trace("the cat sat", MHAConfig(16, 2), variant=LayerVariant(kind)), title=kind)
    for name in arrays:
        assert f"<td><code>{name}</code></td>" in page and html.escape(MEANINGS[name]) in page, name
