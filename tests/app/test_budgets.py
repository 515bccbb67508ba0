"""A public demo's budgets hold against crafted links: training stopped at its time budget says what it reached, a
running request never counts as done, clients without cookies stay one visitor, and light views of a cached model
never wait for (or are refused by) another visitor's heavy work."""

from __future__ import annotations

import pytest

from mha_viz.serve.training_budget import UNCALIBRATED, Calibration, set_calibration
from mha_viz.ui import fair
from tests.app.test_app import new_app
from tests.app.test_public import hold_turn
from tests.renderer_json import drawn_charts, paints_heads

HEAVY_LINK = {"weights": "trained", "variant": "mla", "kv_latent": "256", "q_latent": "256", "rope_dim": "32",
              "h": "16", "d_model": "768", "steps": "5000"}  # issue 35's link: estimated 10 s, used 80-92 CPU s


@pytest.fixture
def public(monkeypatch):
    """A public demo with a training budget of 1 s and a wait bound of 2 s; the calibration as fitted unless a
    test injects another; the waiting bound and calibration reset after."""
    monkeypatch.setenv("MHA_VIZ_PUBLIC", "1")
    monkeypatch.setenv("MHA_VIZ_MAX_TRAINING_SECONDS", "1")
    monkeypatch.setenv("MHA_VIZ_MAX_WAIT_SECONDS", "2")
    set_calibration(UNCALIBRATED)
    yield
    set_calibration(None)
    fair.limit_waiting(None)


@pytest.mark.slow  # trains in the public demo's worker process (a fresh interpreter)
def test_a_crafted_heavy_link_is_stopped_at_the_time_budget_and_shows_what_it_reached(public) -> None:
    # An estimate that links can beat: a calibration 100 times too optimistic lets the steps through, so the time
    # budget alone has to stop the training.
    set_calibration(Calibration(0.01, 0.01))
    at = new_app(**HEAVY_LINK).run(timeout=300)
    assert not at.exception
    stopped = [w.value for w in at.warning if "stopped at this demo's time budget" in w.value]
    assert len(stopped) == 1 and "reached step" in stopped[0] and "mean accuracy" in stopped[0], [
        w.value for w in at.warning]
    reached, asked = (int(n) for n in stopped[0].split("reached step ")[1].split(" (")[0].split(" of "))
    assert 1 <= reached < asked
    trained = next(s.value for s in at.success if "Trained weights" in s.value)
    assert f"was trained for {reached} steps" in trained  # the page shows the layer it reached, and draws it
    assert at.get("plotly_chart")


@pytest.mark.slow  # trains in the public demo's worker process (a fresh interpreter)
def test_the_estimate_alone_cuts_the_crafted_link_to_its_budget(public) -> None:
    at = new_app(**HEAVY_LINK).run(timeout=300)
    cut = [i.value for i in at.info if "This public demo trains for about 1 s" in i.value]
    assert not at.exception and len(cut) == 1 and "5000 steps at h = 16" in cut[0]


def test_a_running_request_never_counts_as_done_while_it_runs() -> None:
    budgeted = fair.Ticket("s", "v", seconds=10, limit=30, started=0.0)
    assert budgeted.left(4) == pytest.approx(6)  # its estimate minus the time it ran
    assert budgeted.left(12) == pytest.approx(18)  # past its estimate: what is left of its time budget
    assert budgeted.left(45) == fair.MIN_LEFT  # past its budget too (it is being stopped): still some work
    unbounded = fair.Ticket("s", "v", seconds=3, started=0.0)
    assert unbounded.left(20) == pytest.approx(20)  # no budget: re-estimated as long again as it has run
    assert all(t.left(now) > 0 for t in (budgeted, unbounded) for now in (0, 3, 10, 30, 100, 1e4))
    assert fair.Ticket("s", "v", seconds=7).left(1e4) == 7  # waiting: its whole estimate


def test_clients_without_cookies_are_one_visitor_by_their_address() -> None:
    cookie = fair.visitor_key({"_streamlit_xsrf": "abc"}, "203.0.113.5", {})
    assert cookie == fair.visitor_key({"_streamlit_xsrf": "abc"}, "198.51.100.7", {})  # a browser, wherever it is
    bare = fair.visitor_key({}, "203.0.113.5", {})
    assert bare == fair.visitor_key({}, "203.0.113.5", {}) != fair.visitor_key({}, "198.51.100.7", {})
    assert bare != cookie
    # behind the project's own proxy (on this machine) the client is the address that proxy appended, and only then
    proxied = fair.visitor_key({}, "127.0.0.1", {"X-Forwarded-For": "10.9.9.9, 203.0.113.5"})
    assert proxied == bare
    assert fair.visitor_key({}, "198.51.100.7", {"X-Forwarded-For": "203.0.113.5"}) != bare  # forged elsewhere
    assert fair.visitor_key({}, None, {}) is None


LIGHT_PAGES = {
    "trained weights (shipped layer), Heads with accuracy by h": {"weights": "trained"},
    "Circuits of the causal model": {"mode": "Pretrained", "model": "mha-viz/induction-2l", "view": "Analysis",
                                     "section": "Circuits"},
    "Generate a few tokens": {"mode": "Pretrained", "model": "mha-viz/induction-2l", "view": "Generate",
                              "new_tokens": "4", "text": "the red fox saw a big owl by the lake . the red fox"},
    "Patching of a small prompt": {"mode": "Pretrained", "model": "mha-viz/induction-2l", "view": "Analysis",
                                   "section": "Patching"},
}


@pytest.mark.parametrize("params", LIGHT_PAGES.values(), ids=LIGHT_PAGES)
def test_light_views_of_a_cached_model_do_not_take_the_heavy_turn(public, params, monkeypatch) -> None:
    new_app(**params).run(timeout=300)  # the model and its traces in the caches
    thread, release = hold_turn(fair, "another visitor", seconds=600)  # heavy work far past the wait bound
    taken = []
    real_take = fair._take_turn
    monkeypatch.setattr(fair, "_take_turn", lambda what, ticket: taken.append(what) or real_take(what, ticket))
    try:
        at = new_app(**params).run(timeout=120)
    finally:
        release.set()
        thread.join(10)
    assert not at.exception and at.get("plotly_chart")
    assert not [w.value for w in at.warning if "busy" in w.value] and taken == []  # drawn at once, not refused


def test_heavy_work_past_its_time_limit_is_stopped_and_says_so(monkeypatch) -> None:
    fair.limit_waiting(30)  # a public demo: heavy work without a limit of its own gets the wait bound
    try:
        with fair.heavy("Patching", 5) as _:
            fair.check_time()  # within its limit: goes on
            ticket = fair._held.ticket
            assert ticket.limit == 30
            ticket.started -= 31  # as if it had run 31 s
            with pytest.raises(fair.TimeSpent, match="stopped at this demo's time budget: this work ran 31 s, more "
                                                     "than the 30 s"):
                fair.check_time()
        with fair.heavy("Training", 5, limit=12):
            assert fair._held.ticket.limit == 12  # a training's own time budget
    finally:
        fair.limit_waiting(None)
    with fair.heavy("Patching", 5):
        fair._held.ticket.started -= 1e6
        fair.check_time()  # a local install: no limit


def test_work_estimated_below_the_threshold_runs_at_once_beside_heavy_work() -> None:
    thread, release = hold_turn(fair, "another visitor", seconds=600)
    try:
        # fair.heavy would wait (and hang this test) if the work were heavy
        with fair.heavy("a small training", fair.HEAVY_SECONDS / 2), fair._turn:
            assert len(fair._running) == 1 and not fair._queue  # only the other visitor's work holds the turn
    finally:
        release.set()
        thread.join(10)


def test_a_training_waiting_for_the_turn_keeps_nobody_holding_the_turn_waiting_for_it() -> None:
    """A request queued for the turn must not hold the cache's key meanwhile: the turn's holder asking for the same
    training would wait for it, and it for the holder (st.cache_data held its compute lock while the body waited)."""
    import threading

    from mha_viz.ui import training

    set_calibration(UNCALIBRATED)  # 600 steps at h = 2, d_model = 16: heavy work (about 1.7 s estimated)
    args = ("prev-first", 2, 16, 600, 7)
    done: list[str] = []

    def holder() -> None:
        with fair.heavy("held", 3):
            for _ in range(400):  # until the other request waits in line
                with fair._turn:
                    if fair._queue:
                        done.append("in line")
                        break
                threading.Event().wait(0.05)
            training.trained_run(*args)  # inside its own turn
            done.append("holder")

    def queued() -> None:
        training.trained_run(*args)
        done.append("queued")

    first = threading.Thread(target=holder, name="holder", daemon=True)
    first.start()
    for _ in range(200):
        with fair._turn:
            if fair._running:
                break
        threading.Event().wait(0.05)
    second = threading.Thread(target=queued, name="queued", daemon=True)
    second.start()
    try:
        first.join(120)
        second.join(120)
        assert sorted(done) == ["holder", "in line", "queued"]  # both done, neither waits for the other forever
    finally:
        set_calibration(None)


# ------------------------------------------- generation, detectors and long traces stopped by time, keeping their work


@pytest.fixture
def past_the_limit(public, monkeypatch):
    """A public demo whose heavy work may run 1 s (MHA_VIZ_MAX_WAIT_SECONDS), with fair's clock moving on 1 s each time
    it is read: heavy work runs past its limit after a few of its steps, whatever this machine's speed (nothing
    timed). The shared cache is emptied before and after, so that the work is done here and its cut result kept
    from other tests."""
    import itertools
    import time
    from types import SimpleNamespace

    from mha_viz.ui.cache import shared_cache

    monkeypatch.setenv("MHA_VIZ_MAX_WAIT_SECONDS", "1")
    ticks = itertools.count(int(time.monotonic()))
    monkeypatch.setattr(fair, "time", SimpleNamespace(monotonic=lambda: float(next(ticks))))
    shared_cache.clear()
    yield
    shared_cache.clear()


def test_a_long_generation_stops_at_the_time_budget_and_keeps_the_tokens_it_wrote(past_the_limit) -> None:
    at = new_app(mode="Pretrained", model="mha-viz/induction-2l", view="Generate", new_tokens="20",
                 text="the red fox saw a big owl by the lake . the red fox").run(timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    (stopped,) = [w.value for w in at.warning if "stopped at this demo's time budget" in w.value]
    written = int(stopped.split("it wrote ")[1].split(" of ")[0])
    assert 1 <= written < 20 and "of the 20 tokens asked for" in stopped
    assert at.slider(key="gen_step").max == written  # the steps it wrote, each drawn
    assert {"gen_probs", "gen_attention"} <= {c.key for c in at.get("plotly_chart")}


def test_the_head_detectors_stop_at_the_time_budget_and_show_the_sequences_they_ran(past_the_limit) -> None:
    at = new_app(mode="Pretrained", model="mha-viz/induction-2l", view="Analysis",
                 section="Head detectors").run(timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    (stopped,) = [w.value for w in at.warning if "stopped at this demo's time budget" in w.value]
    ran, asked = (int(n) for n in stopped.split("after ")[1].split(" probe")[0].split(" of their "))
    assert 1 <= ran < asked == 8
    assert any(f"on {ran} sequences" in c.value for c in at.caption)  # the scores shown average those
    assert "analysis_detectors" in {c.key for c in at.get("plotly_chart")}


def test_a_long_trace_stops_at_the_time_budget_says_how_far_it_got_and_the_page_reads_a_window(past_the_limit) -> None:
    text = " ".join(f"v{i}" for i in range(600))  # the bundled MiniLM's long trace: 512 tokens, 6 layers
    at = new_app(mode="Pretrained", text=text).run(timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    (stopped,) = [w.value for w in at.warning if "stopped at this demo's time budget" in w.value]
    reached, layers = (int(n) for n in stopped.split("It had traced ")[1].split(" layers")[0].split(" of "))
    assert 1 <= reached < layers == 6 and "read the text's first 256 tokens" in stopped
    assert "heads_long" not in drawn_charts(at) and paints_heads(at)  # the window's views, drawn
    at.run()  # a rerun does not trace again: it says why, with a button to try again
    assert [w.value for w in at.warning if "stopped at this demo's time budget" in w.value] == [stopped]
    assert at.button(key="long_again")
