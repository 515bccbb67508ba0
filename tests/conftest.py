"""Fixtures shared by several test modules, the --update-assets option, and the layer markers.

A test's layer is the folder it lives in: tests/unit (the library), tests/app (the page in AppTest), tests/browser
(real servers: `streamlit run`, nginx, Chromium). Each test gets that folder's marker; plain `pytest` runs
`-m "not browser and not slow"` in one pytest-xdist worker per core (pyproject.toml), `pytest -m browser` the
browser tests in one process, `bash .ci/run` all three layers, slow tests included."""

import os
import re
from pathlib import Path

import pytest
import torch

from harness.browser import ROOT

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "app", "browser")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-assets", action="store_true",
                     help="browser tests save their screenshots into assets/ (the README's pictures); "
                          "without it they save them into a temporary folder")


def pytest_configure(config: pytest.Config) -> None:
    """Torch computes on one thread in every test process: the tests' matrices are tiny, and on a busy 2-core
    machine a second intra-op thread makes them up to 10x slower (a softmax of 12 x 12: 9 ms instead of 1 ms);
    with pytest-xdist's two workers, one thread each fills the two cores. Training sets its own count (1)."""
    torch.set_num_threads(1)


class _Selects(dict):
    """The names of a marker expression, read as "is this the layer?" (and, or, not, parentheses: Python's)."""

    def __init__(self, layer: str) -> None:
        super().__init__()
        self.layer = layer

    def __missing__(self, name: str) -> bool:
        return name == self.layer


def selects(markexpr: str, layer: str) -> bool:
    """Whether `-m markexpr` selects tests of `layer` (an expression of more than names, and, or, not and
    parentheses, or one that does not parse: assume it does; pytest reports the errors)."""
    if not markexpr.strip():
        return True
    if not re.fullmatch(r"[\w\s()]+", markexpr):
        return True
    try:
        return bool(eval(markexpr, {"__builtins__": {}}, _Selects(layer)))  # names and operators only (above)
    except SyntaxError:
        return True


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject.toml's addopts): the unit and app tests in one worker per core (at most 4: each worker
    imports torch, transformers and Streamlit); the browser tests in this one process, one after the other, as
    they were written to run (each starts a server and Chromium and waits for the page)."""
    if selects(config.getoption("markexpr"), "browser"):
        return 0
    return min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's layer; a test file outside the layer folders is an error, not a test that
    silently runs in the wrong layer."""
    outside = set()
    for item in items:
        parts = item.path.resolve().relative_to(TESTS).parts
        if len(parts) > 1 and parts[0] in LAYERS:
            item.add_marker(parts[0])
        else:
            outside.add(item.nodeid.split("::")[0])
    if outside:
        raise pytest.UsageError(f"test files outside tests/{{{','.join(LAYERS)}}}/: {sorted(outside)}; move each "
                                "to the folder of its layer (see CONTRIBUTING.md)")


@pytest.fixture(scope="session")
def assets(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where browser tests save screenshots: the tracked assets/ with --update-assets, else a temporary folder."""
    if request.config.getoption("--update-assets"):
        return ROOT / "assets"
    return tmp_path_factory.mktemp("assets")


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread (already so for the whole session, see pytest_configure; kept for modules that say so,
    and for a test that changed the count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def server():
    """The app in a real Streamlit server (one per test module): its base URL."""
    from harness.browser import streamlit_server

    with streamlit_server() as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright (one per test module)."""
    from harness.browser import chromium

    with chromium() as b:
        yield b
