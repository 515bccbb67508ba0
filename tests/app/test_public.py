"""A public demo that one link cannot take down: budgets, byte-bounded caches, capped text, model names that are
never folders on the server, damaged weights refused, numerical failures shown as messages."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import mha_viz
from mha_viz.cache import ByteBudgetCache, sizeof
from mha_viz.limits import MAX_TEXT_CHARS
from mha_viz.params import ViewState
from mha_viz.pretrained import ModelLoadError, load_model
from mha_viz.serve.hosting import (
    Budget,
    ModelRefusedError,
    budget,
    cache_bytes,
    check_model,
    heavy_request,
    hub_model_bytes,
    is_public,
    within_budget,
)
from mha_viz.serve.training_budget import (
    UNCALIBRATED,
    calibration,
    page_training_seconds,
    set_calibration,
    training_seconds,
)
from mha_viz.sources import configurable_trace
from tests.app.test_app import new_app
from tests.renderer_json import paints_heads

PUBLIC = {"MHA_VIZ_PUBLIC": "1"}


def test_public_is_a_switch_or_an_allow_list_and_its_budget_can_be_set_field_by_field():
    assert not is_public({}) and budget({}) is None
    assert is_public(PUBLIC) and is_public({"MHA_VIZ_ALLOWED_MODELS": "bundled"})
    assert budget(PUBLIC) == Budget()
    assert budget({**PUBLIC, "MHA_VIZ_MAX_TOKENS": "64"}).max_tokens == 64
    assert budget({"MHA_VIZ_ALLOWED_MODELS": "bundled"}, secret=lambda k: "8" if k == "mha_viz_max_passes" else None
                  ).max_passes == 8  # from Streamlit secrets, same names in lower case
    with pytest.raises(ValueError, match="MHA_VIZ_MAX_TOKENS must be a positive whole number"):
        budget({**PUBLIC, "MHA_VIZ_MAX_TOKENS": "-1"})
    assert cache_bytes({}) == 1 << 30 and cache_bytes({"MHA_VIZ_CACHE_MB": "10"}) == 10 << 20


def test_the_budget_cuts_training_and_generation_and_says_so():
    heavy = ViewState(mode="Train", steps=5000, d_model=128, new_tokens=64)
    cut, notices = within_budget(heavy, Budget())
    assert page_training_seconds(cut) <= Budget().max_training_seconds and cut.new_tokens == Budget().max_new_tokens
    assert len(notices) == 2 and all("bash scripts/install.sh" in n for n in notices)  # how to run it in full
    assert within_budget(heavy, None) == (heavy, [])  # a local install keeps the full limits
    light = ViewState(mode="Train", steps=600, d_model=64)
    assert within_budget(light, Budget()) == (light, [])


def test_the_cache_is_bounded_in_bytes_least_recently_used_first():
    cache = ByteBudgetCache(max_bytes=3000)
    block = lambda n: np.zeros(n, dtype=np.uint8)
    cache.get("a", lambda: block(1000))
    cache.get("b", lambda: block(1000))
    cache.get("a", lambda: pytest.fail("a is cached"))  # a is now the most recently used
    cache.get("c", lambda: block(1500))  # over 3000: b goes first
    assert "a" in cache and "c" in cache and "b" not in cache and cache.total_bytes == 2500
    huge = cache.get("d", lambda: block(5000))  # larger than the whole budget: returned, not kept
    assert len(huge) == 5000 and "d" not in cache and cache.total_bytes <= 3000


def test_the_cache_computes_a_key_once_however_many_sessions_ask():
    cache, calls = ByteBudgetCache(max_bytes=1 << 20), []

    def slow() -> np.ndarray:
        calls.append(1)
        time.sleep(0.2)
        return np.ones(10)

    threads = [threading.Thread(target=cache.get, args=("k", slow)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]


RSS_PROBE = """
import sys
from mha_viz.cache import ByteBudgetCache, sizeof
from mha_viz.config import MHAConfig
from mha_viz.sources import configurable_trace
import mha_viz.cache

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))

if sys.argv[1] == "off":
    mha_viz.cache._TRIM = None
text = " ".join(f"w{i}" for i in range(512))
configurable_trace(text, MHAConfig(768, 12))  # warm: torch's own first-use allocations
cache = ByteBudgetCache(1 << 30)
before = rss()
kept = sum(sizeof(cache.get(seed, lambda seed=seed: configurable_trace(text, MHAConfig(768, 12), seed=seed)))
           for seed in range(6))
print((rss() - before) / kept)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_the_cache_hands_freed_memory_back_so_rss_follows_what_it_keeps() -> None:
    """Six 44 MB traces through the cache: RSS grows by about what the cache holds, not ~1.4x as without trimming."""
    def growth(trim: str) -> float:
        out = subprocess.run([sys.executable, "-c", RSS_PROBE, trim], capture_output=True, text=True, check=True)
        return float(out.stdout.strip())

    with_trim, without = growth("on"), growth("off")
    assert with_trim < 1.15, with_trim
    assert with_trim < without, (with_trim, without)


def test_sizeof_counts_every_array_of_a_trace_once():
    t = configurable_trace("the cat sat on the mat", mha_viz.MHAConfig(32, 4))
    arrays = [getattr(t, f) for f in ("weights", "queries", "keys", "values", "scores", "head_outputs", "concat",
                                      "output", "W_O", "b_O", "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")]
    assert sizeof(t) >= sum(a.nbytes for a in arrays) and sizeof((t, t)) == sizeof(t)


@pytest.mark.slow
def test_a_public_demo_reads_at_most_its_token_budget(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_PUBLIC", "1")
    words = " ".join(f"w{i}" for i in range(600))
    at = new_app(text=words).run()
    assert not at.exception
    assert any("· 256 query tokens" in c.value for c in at.caption)
    assert any("public demo draws at most 256" in w.value for w in at.warning)
    at = new_app(mode="Pretrained", text=words).run()
    assert not at.exception  # the bundled MiniLM's 512 positions: a long text, its other views on the first 256
    assert any("has 512 positions" in w.value for w in at.warning)
    assert any("A long text: 512 tokens" in i.value and "tokens 0–255" in i.value for i in at.info)
    monkeypatch.setenv("MHA_VIZ_MAX_LONG_TOKENS", "300")
    at = new_app(mode="Pretrained", text=words).run()
    assert not at.exception and any("public demo traces at most 300 tokens" in w.value for w in at.warning)
    assert any("A long text: 300 tokens" in i.value for i in at.info)
    monkeypatch.delenv("MHA_VIZ_MAX_LONG_TOKENS")
    at = new_app(mode="Train", h="4", d_model="128", steps="5000").run()
    steps = within_budget(ViewState(mode="Train", h=4, d_model=128, steps=5000), Budget(),
                          calibration())[0].steps  # the app's estimate, calibrated on this machine
    assert not at.exception and any(f"became {steps} steps" in i.value for i in at.info) and 1 < steps < 5000


def test_server_side_text_caps_cut_what_a_crafted_message_sends() -> None:
    at = new_app().run()
    at.session_state["text"] = "word " * 50_000  # 250 kB, past what the text area lets anyone type
    at.run()
    assert not at.exception and len(at.text_area(key="text").value) == MAX_TEXT_CHARS


def test_a_model_named_in_a_link_is_never_a_folder_on_the_server(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = new_app(mode="Pretrained", model="tests").run()  # a folder beside the server: a link must not read it
    messages = " ".join(e.value for e in at.main.error)
    assert "could not be downloaded" in messages and "config.json" not in messages
    at.text_input(key="model").set_value("mha_viz").run()  # typed in the field: a local folder, locally
    assert "is not a model folder: it has no config.json" in " ".join(e.value for e in at.main.error).replace("\\", "")
    assert not load_model_probe_differs()


def load_model_probe_differs() -> bool:
    """A link cannot tell a folder that exists from one that does not: both give the same kind of message."""
    from mha_viz.pretrained import ModelDownloadError

    kinds = []
    for name in ("tests", "no-such-folder-here"):
        try:
            load_model(name, folders=False)
        except ModelDownloadError as err:
            kinds.append(type(err))
    return len(set(kinds)) != 1 or len(kinds) != 2


def test_weights_that_are_not_finite_are_refused(tmp_path) -> None:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from mha_viz.pretrained import bundled_model_dir

    model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64))
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="attention.self.query.weight holds 1 values that are not finite"):
        load_model(tmp_path)


def nan_analysis_app() -> None:
    from dataclasses import replace

    import numpy as np

    import mha_viz
    from mha_viz.sources import ConfigurableSource
    from mha_viz.ui.analysis import analysis_view

    source = ConfigurableSource("the cat sat on the mat", mha_viz.MHAConfig(16, 2))
    trace = source.trace(0)
    broken = replace(trace, output=np.full_like(trace.output, np.nan))
    analysis_view(broken, source, name="broken")


def test_a_numerical_failure_in_analysis_is_a_message_not_a_crash() -> None:
    at = AppTest.from_function(nan_analysis_app, default_timeout=60).run()
    at.segmented_control(key="section").set_value("Concat vs sum").run()
    assert not at.exception
    assert "could not be computed" in at.warning[0].value and "not finite" in at.warning[0].value


def test_a_stopped_training_stays_stopped_until_started_again() -> None:
    at = new_app(mode="Train", h="2", d_model="32", steps="40").run()
    from mha_viz.variants import LayerVariant

    at.session_state["_stopped_trainings"] = {("prev-first", 2, 32, 40, 0, LayerVariant(), 0.0)}  # a click on Stop
    at.run()
    assert not at.exception and "Training stopped" in at.info[0].value and not at.get("plotly_chart")
    next(b for b in at.button if b.key.startswith("train_again_")).click().run()
    assert not at.exception and at.get("plotly_chart") and not at.session_state["_stopped_trainings"]


def test_heavy_work_runs_one_request_at_a_time_and_nests() -> None:
    from mha_viz.ui import fair

    running, peak, done = [0], [0], []

    def job() -> None:
        with fair.heavy("test"), fair.heavy("nested, same turn"):
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            time.sleep(0.05)
            running[0] -= 1
            done.append(1)

    threads = [threading.Thread(target=job) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert done == [1, 1, 1, 1] and peak[0] == 1


LONG = " ".join(["many words"] * 40)  # 439 characters


@pytest.mark.parametrize(("state", "heavy"), [
    (ViewState(), False),
    (ViewState(h=8, text="a short sentence of a few words"), False),
    (ViewState(mode="Pretrained", view="Overview"), False),
    (ViewState(view="Analysis", section="Compare", other_text="short"), False),
    (ViewState(other_text=LONG), False),  # a second sentence no view reads
    (ViewState(text=LONG), True),
    (ViewState(cross=True, context=LONG), True),
    (ViewState(view="Analysis", section="Compare", other_text=LONG), True),
    (ViewState(view="Analysis", section="Knockout", other_text=LONG), False),  # a section that reads no second text
    (ViewState(mode="Pretrained", view="Generate", text=LONG), True),
    # training, writing and passes through a model take the turn themselves, only for the work they must compute
    (ViewState(mode="Train"), False),
    (ViewState(weights="trained"), False),
    (ViewState(mode="Pretrained", view="Generate"), False),
    (ViewState(mode="Pretrained", view="Analysis", section="Knockout"), False),
])
def test_a_whole_page_is_heavy_work_only_for_a_long_text(state, heavy) -> None:
    assert heavy_request(state) is heavy


@pytest.mark.slow
def test_heavy_pages_are_drawn_one_at_a_time_and_light_pages_at_once() -> None:
    from streamlit.runtime import Runtime

    from mha_viz.ui import fair

    light, heavy = new_app(h="2", text="light page"), new_app(h="2", text=LONG)
    drawn = threading.Event()
    drawing = threading.Thread(target=lambda: heavy.run(timeout=120) and drawn.set())
    thread, release = hold_turn(fair, "another session")  # another session's heavy page is being drawn
    try:
        drawing.start()
        deadline = time.monotonic() + 60
        while not fair._queue and time.monotonic() < deadline:  # the heavy page is in the queue, its run started
            time.sleep(0.05)
        assert fair._queue
        # AppTest keeps its mock Runtime in one global and clears it when a run ends: the heavy page, still
        # running, gets its own back once the light page's run is over (two servers' sessions each have theirs).
        heavy_runtime = Runtime._instance
        light.run(timeout=60)
        Runtime._instance = heavy_runtime
        assert not light.exception and paints_heads(light)  # drawn beside it
        assert not drawn.wait(2)  # the heavy page waits for its turn
    finally:
        release.set()
        thread.join(10)
    drawing.join(120)
    assert drawn.is_set() and not heavy.exception and paints_heads(heavy)


def test_two_models_loading_at_once_both_load() -> None:
    """Two sessions opening the two bundled models at the same moment on a cold process (transformers' lazy
    imports must not race): both load; load_model takes one model at a time."""
    from mha_viz.pretrained import INDUCTION_MODEL

    results: dict[str, object] = {}

    def load(name: str | None) -> None:
        try:
            results[str(name)] = load_model(name)
        except Exception as err:  # noqa: BLE001 - recorded and asserted below
            results[str(name)] = err

    threads = [threading.Thread(target=load, args=(name,)) for name in (None, INDUCTION_MODEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(not isinstance(v, Exception) for v in results.values()), results


def test_a_rerun_of_the_same_page_reads_its_trace_from_the_cache(monkeypatch) -> None:
    """page.py defines its cached source class anew on every run: the cache key must not depend on that class."""
    import mha_viz.sources

    calls = []
    real = mha_viz.sources.configurable_trace
    monkeypatch.setattr(mha_viz.sources, "configurable_trace", lambda *a, **k: calls.append(1) or real(*a, **k))
    params = {"seed": "424242", "text": "a page opened twice reads its trace once"}
    new_app(**params).run()
    new_app(**params).run()
    assert len(calls) == 1


# ------------------------------------------------------------------------------------------ training by its cost


def test_training_is_budgeted_by_its_cost_per_step_not_steps_times_d_model() -> None:
    """mode=Train&h=8&d_model=8&steps=5000 held the heavy turn for 20-32 s: steps x d_model (40,000) was within the
    old budget, but a step's cost is mostly fixed (bench/bench_training_cost.py)."""
    link = ViewState(mode="Train", h=8, d_model=8, steps=5000)
    assert page_training_seconds(link) > 3 * Budget().max_training_seconds  # the measured cost of that link
    cut, notices = within_budget(link, Budget())
    assert 1 < cut.steps < 2000 and page_training_seconds(cut) <= Budget().max_training_seconds
    assert f"became {cut.steps} steps" in notices[0]
    assert page_training_seconds(replace(cut, steps=cut.steps + 1)) > Budget().max_training_seconds  # the most that fit
    # the cost grows with heads and d_model, and a Train page trains h heads and one head
    assert training_seconds(8, 64, 600) > training_seconds(1, 64, 600)
    assert training_seconds(1, 128, 600) > training_seconds(1, 8, 600)
    assert page_training_seconds(ViewState(mode="Train", h=4, d_model=64, steps=600)) == pytest.approx(
        training_seconds(4, 64, 600) + training_seconds(1, 64, 600))
    default = ViewState(mode="Train")  # the page a first visit opens is not cut
    assert within_budget(default, Budget()) == (default, [])


# ------------------------------------------------------------------------------------------ model size


def test_a_public_demo_without_an_allow_list_loads_bundled_models_or_models_within_its_size_limit() -> None:
    asked = []

    def size(name: str) -> int:
        asked.append(name)
        return {"small/model": 40 << 20, "big/model": 1900 << 20}[name]

    for name in ("", "mha-viz/induction-2l", "anything/at-all"):
        check_model(name, None, None, size)  # a local install loads anything
    check_model("", None, Budget(), size)
    check_model("mha-viz/induction-2l", None, Budget(), size)
    with pytest.raises(ModelRefusedError, match="loads only its bundled models.*MHA_VIZ_MAX_MODEL_MB"):
        check_model("small/model", None, Budget(), size)  # no limit set: nothing from the hub
    assert asked == []  # sizes are asked only when a limit decides
    check_model("small/model", None, Budget(max_model_mb=100), size)
    with pytest.raises(ModelRefusedError, match="big/model has 1,900 MB .* more than the 100 MB this public demo"):
        check_model("big/model", None, Budget(max_model_mb=100), size)
    with pytest.raises(ModelRefusedError, match="only loads"):
        check_model("small/model", ("",), Budget(max_model_mb=100), size)  # an allow-list decides alone
    assert isinstance(ModelRefusedError("x"), ValueError)
    assert budget({**PUBLIC, "MHA_VIZ_MAX_MODEL_MB": "300"}).max_model_mb == 300
    assert budget(PUBLIC, secret=lambda k: "20" if k == "max_model_mb" else None).max_model_mb == 20


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> tuple[str, Path]:
    """A Hugging Face hub cache (HF_HUB_CACHE layout) holding one tiny random GPT-2 with a tokenizer, offline:
    (its hub id, its snapshot folder)."""
    import huggingface_hub.constants
    from transformers import AutoTokenizer

    from mha_viz.pretrained import bundled_model_dir
    from tests.tiny_causal import build_lm

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--tiny-org--tiny-gpt2"
    snapshot = repo / "snapshots" / commit
    build_lm("gpt2").save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return "tiny-org/tiny-gpt2", snapshot


def test_a_cached_models_size_is_read_from_the_cache_offline(hub_cache) -> None:
    name, snapshot = hub_cache
    files = [p for p in snapshot.iterdir() if p.suffix in (".json", ".safetensors", ".txt")]
    assert hub_model_bytes(name) == sum(p.stat().st_size for p in files) > 3 << 20  # the embeddings: ~3.9 MB
    with pytest.raises(ModelRefusedError, match="could not learn the size of nobody/nothing"):
        hub_model_bytes("nobody/nothing")  # neither on the hub (offline) nor in the cache


def test_a_public_demo_checks_a_models_size_before_loading_it(hub_cache, monkeypatch) -> None:
    """In the app: refused with a notice and never loaded above MHA_VIZ_MAX_MODEL_MB (or without it), loaded from
    the cache within it."""
    import mha_viz.pretrained.loading
    from mha_viz.ui import loaders

    name, _ = hub_cache
    loaded, real_load = [], mha_viz.pretrained.loading._load_hub
    monkeypatch.setattr(mha_viz.pretrained.loading, "_load_hub", lambda *a: loaded.append(a[0]) or real_load(*a))
    monkeypatch.setenv("MHA_VIZ_PUBLIC", "1")
    loaders.model_bytes.clear()
    for limit, message in ((None, "loads only its bundled models"), ("2", "more than the 2 MB this public demo")):
        if limit is not None:
            monkeypatch.setenv("MHA_VIZ_MAX_MODEL_MB", limit)
        at = new_app(mode="Pretrained", model=name).run()
        errors = " ".join(e.value for e in at.main.error).replace("\\", "")  # markdown escapes out
        assert not at.exception and message in errors and "MHA_VIZ_MAX_MODEL_MB" in errors
        assert loaded == []  # refused before anything was read
    monkeypatch.setenv("MHA_VIZ_MAX_MODEL_MB", "20")
    at = new_app(mode="Pretrained", model=name).run()
    assert not at.exception and not at.main.error and loaded == [name] and paints_heads(at)
    asked, real_size = [], loaders.hub_model_bytes
    monkeypatch.setattr(loaders, "hub_model_bytes", lambda n: asked.append(n) or real_size(n))
    at = new_app(mode="Pretrained", model="nobody/nothing").run()
    at.run()  # a size that cannot be learnt is remembered too: the hub is not asked (or waited for) on every rerun
    errors = " ".join(e.value for e in at.main.error).replace("\\", "")
    assert not at.exception and "could not learn the size of nobody/nothing" in errors and asked == ["nobody/nothing"]
    assert loaded == [name]


# ------------------------------------------------------------------------------------------ waiting for the turn


@pytest.fixture
def visitors(monkeypatch):
    """fair's idea of who runs a thread: set per thread by name ("session/visitor"); limit_waiting reset after."""
    from mha_viz.ui import fair

    def whose() -> tuple[str, str]:
        name = threading.current_thread().name
        return tuple(name.split("/")) if "/" in name else (name, name)

    monkeypatch.setattr(fair, "_whose", whose)
    yield fair
    fair.limit_waiting(None)


def hold_turn(fair, who: str, seconds: float = 3.0) -> tuple[threading.Thread, threading.Event]:
    """A thread named who holding the heavy turn until the returned event is set."""
    release, holding = threading.Event(), threading.Event()

    def hold() -> None:
        with fair.heavy("held", seconds):
            holding.set()
            release.wait(60)

    thread = threading.Thread(target=hold, name=who)
    thread.start()
    assert holding.wait(30)
    return thread, release


def run_heavy() -> None:
    from mha_viz.ui import fair

    with fair.heavy("This page"):
        pass


def test_a_waiting_request_says_whether_it_waits_for_its_own_earlier_request_or_another_visitors(visitors,
                                                                                                 monkeypatch) -> None:
    fair = visitors
    shown: dict[str, str] = {}
    real_message = fair.waiting_message
    monkeypatch.setattr(fair, "waiting_message", lambda what, ticket, now: shown.setdefault(
        threading.current_thread().name, real_message(what, ticket, now)))
    for holder, waiter, expected in (("tab1/me", "tab1/me", "waiting for your own earlier request to finish"),
                                     ("tab1/me", "tab2/me", "waiting for your own earlier request to finish"),
                                     ("tab9/you", "tab1/me", "waiting for another visitor's heavy request")):
        thread, release = hold_turn(fair, holder)
        shown.clear()
        waiting = threading.Thread(target=run_heavy, name=waiter)
        waiting.start()
        for _ in range(100):
            if waiter in shown:
                break
            time.sleep(0.05)
        release.set()
        thread.join(10)
        waiting.join(10)
        assert expected in shown[waiter], shown


def test_a_visitor_queues_one_heavy_request_and_nobody_waits_behind_more_than_the_bound(visitors) -> None:
    fair = visitors
    fair.limit_waiting(30)  # what page.py sets on a public demo (Budget.max_wait_seconds)
    thread, release = hold_turn(fair, "tab1/alice", seconds=20)
    queued = []
    try:
        def wait_in(who: str, seconds: float) -> None:
            with fair.heavy("This page", seconds):
                queued.append(who)

        bob = threading.Thread(target=wait_in, args=("tab2/bob", 9), name="tab2/bob")
        bob.start()  # 20 s ahead of him
        alice_again = threading.Thread(target=wait_in, args=("tab3/alice", 8), name="tab3/alice")
        alice_again.start()  # 29 s ahead of her, her own running request included: within 30
        for _ in range(100):
            with fair._turn:
                if len(fair._queue) == 2:
                    break
            time.sleep(0.05)
        refused = {}
        for who in ("tab4/alice", "tab5/carol"):
            def ask(who=who) -> None:
                try:
                    with fair.heavy("This page", 1):
                        pass
                except fair.TooBusy as err:
                    refused[who] = str(err)
            t = threading.Thread(target=ask, name=who)
            t.start()
            t.join(10)
        assert "already have a heavy page waiting its turn" in refused["tab4/alice"]  # one waiting per visitor
        assert "This demo is busy: the heavy work queued ahead of this page would take about 3" in refused[
            "tab5/carol"]  # 20 + 9 + 8 (less the seconds alice's has run) > 30
        assert "more than the 30 s a page may wait" in refused["tab5/carol"]
    finally:
        release.set()
        thread.join(10)
    bob.join(10)
    alice_again.join(10)
    assert queued == ["tab2/bob", "tab3/alice"]  # first come, first served


@pytest.mark.slow
def test_a_public_demo_too_busy_for_a_heavy_page_says_so_and_draws_the_rest(visitors, monkeypatch) -> None:
    fair = visitors
    monkeypatch.setenv("MHA_VIZ_PUBLIC", "1")
    monkeypatch.setenv("MHA_VIZ_MAX_WAIT_SECONDS", "5")
    set_calibration(UNCALIBRATED)  # the estimate as fitted: 600 steps at h = 2, d_model = 16 are heavy work
    thread, release = hold_turn(fair, "other/visitor", seconds=60)
    try:
        at = new_app(mode="Train", h="2", d_model="16", steps="600").run(timeout=60)
    finally:
        release.set()
        thread.join(10)
        set_calibration(None)
    assert not at.exception and any("This demo is busy" in w.value and "Try again in about " in w.value
                                    for w in at.warning)
    at.run()  # once the other visitor's work is done, the page is drawn
    assert not at.exception and at.get("plotly_chart")


def test_a_request_stopped_while_it_waits_gives_up_its_place(visitors, monkeypatch) -> None:
    """Streamlit stops a waiting run at its next redraw when the visitor changes something: that request leaves
    the line (and a stop just as it gets the turn gives the turn back), so nobody waits for it afterwards."""
    fair = visitors

    class Stopped(Exception):  # what Streamlit raises in a run it stops (StopException / RerunException)
        pass

    def stopped(*args) -> str:
        raise Stopped

    monkeypatch.setattr(fair, "waiting_message", stopped)
    thread, release = hold_turn(fair, "tab1/alice")
    errors = []

    def wait_and_be_stopped() -> None:
        try:
            with fair.heavy("This page"):
                errors.append("ran")
        except Stopped:
            errors.append("stopped")

    waiter = threading.Thread(target=wait_and_be_stopped, name="tab2/bob")
    waiter.start()
    waiter.join(10)
    assert errors == ["stopped"]
    with fair._turn:
        assert len(fair._queue) == 0 and len(fair._running) == 1  # only alice's request, still running
    release.set()
    thread.join(10)
    with fair._turn:
        assert fair._running == [] and fair._queue == []
    done = threading.Event()
    later = threading.Thread(target=lambda: run_heavy() or done.set(), name="tab3/carol")
    later.start()
    assert done.wait(10)  # the turn is free: no ticket of the stopped request holds it
