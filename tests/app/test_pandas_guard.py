"""pandas_guard: no thread imports pandas while a run builds figures without it (Plotly reads pandas from
sys.modules without the import lock, and a half-imported pandas broke a figure). Each case runs in a fresh
interpreter, where pandas is not imported yet."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness.browser import ROOT

pytestmark = pytest.mark.slow  # each case starts a fresh interpreter

COMMON = """
import sys, threading, time
from mha_viz.ui import fair, pandas_guard
assert "pandas" not in sys.modules
inside, leave, log = threading.Event(), threading.Event(), []

def complete():
    pd = sys.modules.get("pandas")
    return pd is not None and hasattr(pd, "Series") and hasattr(pd, "Index")

def other_session():
    inside.wait()
    pandas_guard.import_pandas()
    log.append(("other session imported pandas", complete()))
"""


def run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(COMMON) + textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split("\n")[:-1]


def test_pandas_is_imported_only_after_a_run_without_it_has_ended() -> None:
    lines = run("""
        def first_page():
            with pandas_guard.figures_allowed():
                inside.set()
                leave.wait()
                log.append(("first page ended", "pandas" in sys.modules))

        threads = [threading.Thread(target=f) for f in (first_page, other_session)]
        for t in threads:
            t.start()
        inside.wait()
        time.sleep(0.5)  # the other session asks for pandas meanwhile
        print(log, "pandas" in sys.modules)
        leave.set()
        for t in threads:
            t.join()
        print(log)
    """)
    assert lines == ["[] False", str([("first page ended", False), ("other session imported pandas", True)])]


def test_heavy_work_in_a_run_without_pandas_imports_it_and_lets_the_others_go_on() -> None:
    lines = run("""
        def first_page():
            with pandas_guard.figures_allowed():
                inside.set()
                time.sleep(0.3)
                with fair.heavy("a long computation"):  # imports pandas, in this run's own thread
                    log.append(("heavy work starts", complete()))
                    deadline = time.monotonic() + 10
                    while len(log) < 2 and time.monotonic() < deadline:  # the other session goes on meanwhile
                        time.sleep(0.01)
                log.append(("first page ended", complete()))

        threads = [threading.Thread(target=f) for f in (first_page, other_session)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        print(sorted(log[:2]), log[2:])  # which of the first two is logged first is a race; both come before the end
    """)
    assert lines == [str([("heavy work starts", True), ("other session imported pandas", True)]) + " "
                     + str([("first page ended", True)])]


def test_fragments_and_page_runs_nest_in_one_thread_and_a_run_finds_a_pandas_imported_elsewhere() -> None:
    lines = run("""
        @pandas_guard.guarded
        def fragment():
            return "pandas" in sys.modules

        with pandas_guard.figures_allowed():
            print(fragment())  # a fragment drawn by the run that holds the gate: re-entered, still no pandas
        importer = threading.Thread(target=lambda: __import__("pandas"))  # outside the guard, e.g. a test's import
        importer.start()
        importer.join()
        with pandas_guard.figures_allowed():
            print(complete())
    """)
    assert lines == ["False", "True"]


def test_the_default_page_draws_without_importing_pandas() -> None:
    lines = run("""
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file("page.py", default_timeout=120)
        at.run()
        print(len(at.exception), len(at.get("plotly_chart")) > 0, "pandas" in sys.modules)
    """)
    assert lines == ["0 True False"]
