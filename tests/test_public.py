"""A public demo that one link cannot take down: budgets, byte-bounded caches, capped text, model names that are
never folders on the server, damaged weights refused, numerical failures shown as messages."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import mha_viz
from mha_viz.cache import ByteBudgetCache, sizeof
from mha_viz.hosting import Budget, budget, cache_bytes, heavy_request, is_public, within_budget
from mha_viz.params import MAX_TEXT_CHARS, ViewState
from mha_viz.pretrained import ModelLoadError, load_model
from mha_viz.sources import configurable_trace
from tests.test_app import new_app

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
    assert cut.steps * cut.d_model <= Budget().max_training and cut.new_tokens == Budget().max_new_tokens
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


def test_a_public_demo_reads_at_most_its_token_budget(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_PUBLIC", "1")
    words = " ".join(f"w{i}" for i in range(600))
    at = new_app(text=words).run()
    assert not at.exception
    assert any("· 256 query tokens" in c.value for c in at.caption)
    assert any("public demo draws at most 256" in w.value for w in at.warning)
    at = new_app(mode="Pretrained", text=words).run()
    assert not at.exception and any("public demo reads at most 256" in w.value for w in at.warning)
    at = new_app(mode="Train", h="4", d_model="128", steps="5000").run()
    assert not at.exception and any("became 600 steps" in i.value for i in at.info)


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
    at.session_state["_stopped_trainings"] = {("prev-first", 2, 32, 40, 0)}  # what a click on Stop records
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
    (ViewState(mode="Train"), True),
    (ViewState(weights="trained"), True),
    (ViewState(mode="Pretrained", view="Generate"), True),
    (ViewState(mode="Pretrained", view="Analysis", section="Knockout"), True),
])
def test_heavy_requests_are_training_writing_model_analysis_and_long_texts(state, heavy) -> None:
    assert heavy_request(state) is heavy


def test_heavy_pages_are_drawn_one_at_a_time_and_light_pages_at_once() -> None:
    from mha_viz.ui import fair

    light, heavy = new_app(h="2", text="light page"), new_app(h="2", text=LONG)
    drawn = threading.Event()
    drawing = threading.Thread(target=lambda: heavy.run(timeout=120) and drawn.set())
    assert fair._HEAVY.acquire(timeout=60)  # another session's heavy page is being drawn
    try:
        drawing.start()
        light.run(timeout=60)
        assert not light.exception and len(light.get("plotly_chart")) > 0  # drawn beside it
        assert not drawn.wait(2)  # the heavy page waits for its turn
    finally:
        fair._HEAVY.release()
    drawing.join(120)
    assert drawn.is_set() and not heavy.exception and len(heavy.get("plotly_chart")) > 0


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
