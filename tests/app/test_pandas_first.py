"""pandas is imported in full before the server answers (app.py's start), so no page builds a figure beside a
half-imported pandas (Plotly reads pandas from sys.modules without the import lock; bench/bench_heavy.py found a
figure failing on it). It replaced a lock around every page run (mha_viz/ui/pandas_guard.py, removed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.browser import ROOT

pytestmark = pytest.mark.slow  # a fresh interpreter

START = """
import asyncio, sys, threading, app

async def main():
    print("before start", "pandas" in sys.modules)
    async with app.warm_start(app.app):  # what the server runs before it answers anything
        pd = sys.modules.get("pandas")
        print("serving", pd is not None and hasattr(pd, "Series") and hasattr(pd, "Index"))

asyncio.run(main())
"""


def test_pandas_is_complete_before_the_server_serves_a_page() -> None:
    out = subprocess.run([sys.executable, "-c", START], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:2] == ["before start False", "serving True"]
