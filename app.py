"""mha-viz: multi-head attention made visible.  Run: streamlit run app.py

This file is the server: Streamlit's st.App around page.py, the script each session runs (the sidebar,
the caches, the dispatch to mha_viz/ui/pages.py). At server start a thread makes the imports the pages
need (torch, plotly, every view) and loads both bundled models into the cache page.py loads them from
(mha_viz.ui.loaders), so that the first page waits for neither. A page opened meanwhile waits only for
what it needs: Python's import locks hand it modules the thread is importing once they are complete,
and load_model's lock lets one model load at a time. Only the standard library and Streamlit are
imported here, so the server answers at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import streamlit as st


class WarmUp(threading.Thread):
    """The pages' imports, then the bundled models, in the background."""

    def __init__(self) -> None:
        super().__init__(name="mha-viz warm-up", daemon=True)

    def run(self) -> None:
        try:
            import mha_viz.ui.pages  # noqa: F401 - torch, numpy, plotly and every view
            from mha_viz.ui.loaders import warm_up

            warm_up()  # both bundled models, into the cache page.py loads them from
        except Exception:  # the pages load what they need themselves; say why the warm-up did not
            logging.getLogger("mha_viz").exception("the warm-up at server start failed")


@asynccontextmanager
async def warm_start(_app: st.App) -> AsyncIterator[None]:
    WarmUp().start()
    yield


app = st.App("page.py", lifespan=warm_start)
