"""The export controls in a Streamlit page (AppTest): sizes stated before the click, lazy downloads, the link."""

from __future__ import annotations

import pytest
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from mha_viz.export import trace_from_json, trace_from_npz
from tests.unit.test_export import XSS, assert_same_trace, assert_self_contained


def export_app(query: dict) -> None:
    import mha_viz
    from mha_viz.ui.export import export_controls

    tokens = ("The", "<script>alert(1)</script>", "cat")
    mha = mha_viz.MultiHeadAttention(16, 2, seed=0)
    trace = mha(mha_viz.embed_tokens(list(tokens), 16), query_tokens=tokens)
    export_controls(lambda: trace, name="all-MiniLM-L6-v2 layer 2/<x>", share_query=query)


@pytest.fixture
def deferred(monkeypatch) -> list[tuple]:
    """(callable, mime, file_name) of every deferred download registered during a run."""
    calls: list[tuple] = []
    original = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        calls.append((data_callable, mimetype, file_name))
        return original(self, data_callable, mimetype, coordinates, file_name=file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    return calls


def label_bytes(label: str) -> float:
    """The size a download button states: "Trace (.json, 3.4 MB)" -> 3.4e6."""
    number, unit = label.rstrip(")").split()[-2:]
    return float(number) * {"B": 1, "kB": 1e3, "MB": 1e6}[unit]


def big_export_app() -> None:
    import mha_viz
    from mha_viz.sources import configurable_trace
    from mha_viz.ui.export import export_controls

    words = " ".join(f"w{i}" for i in range(512))
    trace = configurable_trace(words, mha_viz.MHAConfig(768, 16), context=words)
    export_controls(lambda: trace, name="big", max_mb=50)


def test_a_public_demo_shows_sizes_and_refuses_downloads_past_its_cap() -> None:
    at = AppTest.from_function(big_export_app, default_timeout=120).run()
    assert not at.exception
    npz, js, *_ = at.get("download_button")
    assert label_bytes(npz.label) > 50e6 and npz.proto.disabled  # too large for this demo: not offered
    assert "base64" in js.proto.help  # past 20 MB of lists, JSON arrays are base64: exact and far smaller
    assert any("at most 50 MB" in c.value and "bash scripts/install.sh" in c.value for c in at.caption)


def test_export_controls_render_three_lazy_downloads_and_the_link(deferred) -> None:
    at = AppTest.from_function(export_app, args=({"h": "2", "text": "a b&c"},), default_timeout=120)
    at.context = {"url": "http://localhost:8501/"}
    at.run()
    assert not at.exception
    buttons = at.get("download_button")
    assert [b.label.split(",")[0].rstrip(")") for b in buttons] == ["Trace (.npz", "Trace (.json", "Report (.html",
                                                                    "Figure for a paper (.svg", "Figure for a paper (.pdf"]
    stated = [label_bytes(b.label) for b in buttons[:2]]  # "Trace (.npz, ≤ 12 kB)": the size before the click
    for b in buttons:
        assert b.proto.ignore_rerun  # a download does not rerun the app
        assert b.proto.deferred_file_id and not b.proto.url  # built on click, not on every rerun
    assert [(mime, name) for _, mime, name in deferred] == [
        ("application/octet-stream", "all-MiniLM-L6-v2-layer-2-x.npz"),
        ("application/json", "all-MiniLM-L6-v2-layer-2-x.json"),
        ("text/html", "all-MiniLM-L6-v2-layer-2-x-report.html"),
        ("image/svg+xml", "all-MiniLM-L6-v2-layer-2-x-heads.svg"),
        ("application/pdf", "all-MiniLM-L6-v2-layer-2-x-heads.pdf"),
    ]
    npz, js, report = (fn() for fn, _, _ in deferred[:3])  # the figures: tests/app/test_paper_app.py
    assert len(npz) <= stated[0] * 1.05 and abs(len(js) - stated[1]) <= 0.05 * stated[1] + 1000
    trace = trace_from_npz(npz)
    assert trace.query_tokens[1] == XSS[0] and trace.weights.shape == (2, 3, 3)
    assert_same_trace(trace, trace_from_json(js))
    assert_self_contained(report, 1)  # nothing else on this page: the heads grid alone
    assert XSS[0] not in report
    link = "http://localhost:8501?h=2&text=a%20b%26c"
    assert at.code[0].value == link
    assert link.replace("&", "&amp;") in report  # the report links back to the view


def test_export_controls_without_a_known_address_show_the_query_string(deferred) -> None:
    at = AppTest.from_function(export_app, args=({"h": "8"},), default_timeout=120).run()
    assert not at.exception
    assert len(at.get("download_button")) == 5
    assert at.code[0].value == "?h=8"
    at = AppTest.from_function(export_app, args=({},), default_timeout=120).run()
    assert not at.exception and len(at.code) == 0 and "default view" in at.caption[0].value
