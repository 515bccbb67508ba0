"""Fixtures shared by several test modules."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread: on a busy 2-core machine a second one makes small matmuls ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def server():
    """The app in a real Streamlit server (one per test module): its base URL."""
    from tests.browser import streamlit_server

    with streamlit_server() as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright (one per test module)."""
    from tests.browser import chromium

    with chromium() as b:
        yield b
