"""mha-viz: the script each session runs (`streamlit run app.py` serves it; AppTest can run it directly).

It sets the page, draws the sidebar (mha_viz/ui/sidebar.py) and dispatches to the page of its mode
(mha_viz/ui/pages.py), whose views and analysis sections are registered parts (mha_viz/parts.py). Traces live
in one cache shared by every session and bounded in bytes (MHA_VIZ_CACHE_MB, default 1 GB; mha_viz/ui/cache.py,
mha_viz/ui/cached_sources.py); models in a cache of two. A public demo (MHA_VIZ_PUBLIC=1 or an allow-list) gets
a Budget.
"""

from __future__ import annotations

import contextlib
import time

import streamlit as st

STARTED = time.perf_counter()  # MHA_VIZ_TIMING=1 logs this run's imports and drawing (mha_viz.ui.loaders.log_timing)
STARTED_AT = time.time()  # wall-clock time, which bench/bench_speed.py lines up with the browser's
st.set_page_config(page_title="mha-viz: multi-head attention, visible", layout="wide")

from mha_viz.serve.hosting import budget, heavy_request, is_public, within_budget
from mha_viz.serve.training_budget import calibrate, calibration, page_runs
from mha_viz.ui import body, fair, lessons, pages, state, style, views
from mha_viz.ui.cached_sources import model_loader
from mha_viz.ui.loaders import log_timing, page_drawn, secret
from mha_viz.ui.sidebar import sidebar
from mha_viz.ui.text import plain
from mha_viz.ui.training import set_training_budget, train_in_child_processes


def show_page() -> None:
    """The sidebar, then the page it asks for."""
    views.start_run()
    style.page_style()
    notices = [*state.seed_from_url(), *lessons.enter()]  # a lesson's step sets its state before the widgets
    limits = budget(secret=secret) if is_public(secret=secret) else None
    if limits is not None:
        fair.leave_a_core_free()
        train_in_child_processes()
    fair.limit_waiting(None if limits is None else limits.max_wait_seconds)
    load = model_loader(limits)
    with st.sidebar:
        bar = sidebar(load)
    s = state.current()
    state.write_url(s)  # what was asked for: a link reproduces it in full wherever it is opened
    if limits is None:
        cuts = []
        set_training_budget(None)
    else:
        # this machine's training step, measured once per process (the warm-up does it at server start): for a
        # page that trains; other pages do not wait for it
        machine = calibrate() if page_runs(s) else calibration()
        s, cuts = within_budget(s, limits, machine)
        set_training_budget(limits.max_training_seconds, machine)
    for notice in (*notices, *bar.notices):
        st.warning(plain(notice), icon="🔗")
    for cut in cuts:
        st.info(plain(cut), icon=":material/speed:")
    st.header("Multi-head attention, visible")
    lessons.panel()
    if not lessons.page_shown():  # a lesson's question is open: the page would give its answer away
        return
    # Heavy pages (long texts) are drawn one at a time: a light page then shares the CPU with one of them at most;
    # other pages take the heavy turn only for their heavy parts (training, long generations, model passes).
    with body.page_body(body.identity(s)), fair.heavy("This page") if heavy_request(s) else contextlib.nullcontext():
        pages.show(s, bar, load, limits)


IMPORTED = time.perf_counter()
try:
    show_page()
finally:
    views.end_run()  # the session keeps no figure between runs
page_drawn.set()  # the warm-up's model loads may start (app.py)
log_timing(f"page.py run started at {STARTED_AT:.3f}: imports {IMPORTED - STARTED:.3f} s, "
           f"drawn {time.perf_counter() - IMPORTED:.3f} s")
