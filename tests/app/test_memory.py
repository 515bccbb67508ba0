"""What a session keeps between runs is a key into the shared, byte-bounded cache, never the data (issue 20):
the download buttons' callables and the long input's zoom (a fragment) outlive a closed tab until the disconnect
timeout, so they must not hold a trace or a figure. And report builds that run at once do not share figures."""

from __future__ import annotations

import gc
import re
import threading
import warnings
import weakref
from collections.abc import Callable

import pytest
from plotly.basedatatypes import BaseFigure
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

import mha_viz
from mha_viz.cache import ByteBudgetCache
from mha_viz.export import trace_from_json, trace_from_npz
from mha_viz.figures import contributions_figure, heads_figure, output_path_figure
from mha_viz.long import LongTrace
from mha_viz.report import html_report
from mha_viz.trace import AttentionTrace
from tests.app.test_app import heatmaps, new_app
from tests.app.test_long_app import chart

pytestmark = pytest.mark.slow  # many sessions, reports and traces at the app's large sizes

DATA = (AttentionTrace, LongTrace, BaseFigure)  # what a session must not keep: traces, and figures (their arrays)
WORDS = " ".join(f"w{i}" for i in range(300))


@pytest.fixture
def downloads(monkeypatch) -> list[tuple[Callable, str]]:
    """(callable, file name) of every deferred download registered: what Streamlit keeps for the session."""
    calls: list[tuple[Callable, str]] = []
    original = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        calls.append((data_callable, file_name))
        return original(self, data_callable, mimetype, coordinates, file_name=file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    return calls


def alive(kinds: tuple[type, ...]) -> list:
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on some of torch's lazy module attributes warns
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects() if isinstance(o, kinds)]


def kept_by_the_session(run: Callable[[], object]) -> list[str]:
    """What run() (one session's runs) leaves alive once every shared cache has let go of its values: the session's
    own references. A description of each trace or figure, with what refers to it."""
    before = {id(o): weakref.ref(o) for o in alive(DATA)}
    session = run()  # noqa: F841 - the session (AppTest: session state, fragments) stays alive, as on a server
    for cache in alive((ByteBudgetCache,)):
        cache.clear()
    left = [o for o in alive(DATA) if not (id(o) in before and before[id(o)]() is o)]
    return [f"{type(o).__name__} <- {sorted({type(r).__name__ for r in gc.get_referrers(o)})}" for o in left]


def test_export_keeps_no_trace_or_figure_in_the_session(downloads) -> None:
    """Export and share open at a 300-token cross-attention page: the session holds the three download callables,
    which must read the trace and figures from the shared cache at click time, not hold them. With the cache
    emptied, the downloads still work (the trace computed again, the report with the default figures)."""
    def session() -> AppTest:
        at = new_app(h="4", d_model="64", cross="true", text=WORDS, context=WORDS)
        at.session_state["export_open"] = True
        return at.run()

    assert kept_by_the_session(session) == []
    assert [name for _, name in downloads][:3] == [f"configurable-h4-d64{ext}" for ext in (".npz", ".json", "-report.html")]
    assert [name.rsplit(".", 1)[1] for _, name in downloads[3:]] == ["svg", "pdf"]  # read the cache on click too
    npz, js, report = (fn() for fn, _ in downloads[:3])
    assert trace_from_npz(npz).weights.shape == trace_from_json(js).weights.shape == (4, 300, 300)
    assert "<h1>Multi-head attention: h = 4" in report and "had left the server" in report


def test_a_pretrained_export_keeps_no_trace_in_the_session(downloads) -> None:
    def session() -> AppTest:
        at = new_app(mode="Pretrained", layer="2", text="the cat sat on the mat because it was warm")
        at.session_state["export_open"] = True
        return at.run()

    assert kept_by_the_session(session) == []
    npz, _, report = (fn() for fn, _ in downloads[:3])
    assert trace_from_npz(npz).meta["layer"] == 2 and "layer 2" in report


def test_the_long_inputs_zoom_keeps_no_trace_in_the_session() -> None:
    """The zoom of a 700-token input is a fragment, whose arguments Streamlit keeps for the session's life: they
    must not be the LongTrace. When the cache has let it go, moving the zoom computes it again."""
    ats: list[AppTest] = []

    def session() -> AppTest:
        at = new_app(h="4", d_model="64", text=" ".join(f"w{i}" for i in range(700))).run()
        at.slider(key="zoom").set_value(100).run()
        ats.append(at)
        return at

    assert kept_by_the_session(session) == []
    at = ats[0]
    assert not at.exception
    at.slider(key="zoom").set_value(300).run()
    assert not at.exception and heatmaps(chart(at, "heads_zoom"))[0]["y0"] == 300


def same_report(html: str) -> str:
    return re.sub(r"on \d{4}-\d\d-\d\d \d\d:\d\d UTC", "", html)  # the report's time stamp, to the minute


def at_once(build: Callable[[], str], n: int = 12, rounds: int = 3) -> tuple[list[str], list[str]]:
    """n threads calling build together, rounds times: (the reports, the errors)."""
    reports: list[str] = []
    errors: list[str] = []
    for _ in range(rounds):
        start = threading.Barrier(n)

        def one(start: threading.Barrier = start) -> None:
            start.wait()
            try:
                reports.append(build())
            except Exception as err:  # noqa: BLE001 - counted: the test says how many failed
                errors.append(f"{type(err).__name__}: {str(err)[:80]}")

        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return reports, errors


def test_twelve_report_builds_at_once_from_one_session_all_succeed_alike(downloads) -> None:
    at = new_app(h="4", d_model="64", view="Concat → W_O", text="the cat sat on the mat and then it slept")
    at.session_state["export_open"] = True
    at.run()
    assert not at.exception
    report = next(fn for fn, name in downloads if name.endswith("-report.html"))
    reports, errors = at_once(report)
    assert errors == [] and len(reports) == 36
    assert len({same_report(r) for r in reports}) == 1
    assert reports[0].count('<div id="figure-') == 3  # the heads grid, concat -> W_O and the contributions


def test_html_report_leaves_the_figures_it_is_given_as_they_were() -> None:
    """The library: reports built at once from the same Figure objects all succeed alike."""
    tokens = ("the", "cat", "sat", "on", "the", "mat")
    trace = mha_viz.MultiHeadAttention(32, 4, seed=0)(mha_viz.embed_tokens(list(tokens), 32), query_tokens=tokens)
    figures = [heads_figure(trace), output_path_figure(trace), contributions_figure(trace)]
    reports, errors = at_once(lambda: html_report(trace, title="shared", figures=figures))
    assert errors == [] and len({same_report(r) for r in reports}) == 1
