"""The SVG and PDF downloads for a paper beside the trace and report (AppTest; the drawing itself, by Chromium, is
tests/browser/test_paper_export.py)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import mha_viz.paper
from tests.app.test_export_app import deferred  # noqa: F401 - fixture


def paper_app(several: bool) -> None:
    import mha_viz
    from mha_viz.figures import heads_figure, lines_figure
    from mha_viz.ui.export import export_controls

    tokens = ("The", "cat", "sat")
    trace = mha_viz.MultiHeadAttention(16, 2, seed=0)(mha_viz.embed_tokens(list(tokens), 16), query_tokens=tokens)
    figures = [heads_figure(trace, title="heads"), lines_figure(trace, [0])] if several else None
    export_controls(lambda: trace, name="layer 2", figures=figures)


@pytest.fixture
def drawn(monkeypatch) -> list[tuple]:
    """(figure, format, preset) of every figure_bytes call: what Chromium would have been asked to draw."""
    calls: list[tuple] = []
    monkeypatch.setattr(mha_viz.paper, "export_missing", lambda: None)  # kaleido and Chromium there or not
    monkeypatch.setattr(mha_viz.paper, "figure_bytes",
                        lambda fig, fmt, preset=None, **_: calls.append((fig, fmt, preset)) or f"<{fmt}>".encode())
    return calls


def test_svg_and_pdf_downloads_draw_the_pages_figure_on_click_with_the_paper_preset(deferred, drawn) -> None:  # noqa: F811
    at = AppTest.from_function(paper_app, args=(False,), default_timeout=120).run()
    assert not at.exception
    svg, pdf = at.get("download_button")[3:]
    assert (svg.label, pdf.label) == ("Figure for a paper (.svg)", "Figure for a paper (.pdf)")
    for button in (svg, pdf):
        assert button.proto.ignore_rerun and button.proto.deferred_file_id and not button.proto.url  # on click only
        assert not button.proto.disabled and "3.5 in" in button.proto.help
    assert [(mime, name) for _, mime, name in deferred[3:]] == [
        ("image/svg+xml", "layer-2-heads.svg"), ("application/pdf", "layer-2-heads.pdf")]
    assert not drawn  # nothing drawn before a click
    assert [fn() for fn, _, _ in deferred[3:]] == [b"<svg>", b"<pdf>"]
    assert [(fig.data[0].type, fmt, preset) for fig, fmt, preset in drawn] == [
        ("heatmap", "svg", "paper"), ("heatmap", "pdf", "paper")]
    assert not at.get("selectbox")  # one figure: nothing to pick


def test_a_page_with_several_figures_picks_one(deferred, drawn) -> None:  # noqa: F811
    at = AppTest.from_function(paper_app, args=(True,), default_timeout=120).run()
    assert not at.exception
    pick = at.selectbox(key="export_paper_figure")
    assert pick.options == ["layer-2-figure-1", "layer-2-figure-2"]
    pick.set_value(1).run()
    assert not at.exception
    fn, _, name = deferred[-1]
    assert name == "layer-2-figure-2.pdf"
    fn()
    assert drawn[-1][0].data[0].type != "heatmap"  # the lines view, not the heads grid


def test_without_kaleido_the_buttons_are_disabled_and_say_how_to_install_it(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "kaleido", None)
    at = AppTest.from_function(paper_app, args=(False,), default_timeout=120).run()
    assert not at.exception
    svg, pdf = at.get("download_button")[3:]
    assert svg.proto.disabled and pdf.proto.disabled
    assert "pip install kaleido" in svg.proto.help
