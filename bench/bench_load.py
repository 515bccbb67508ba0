"""Concurrent sessions against one Streamlit server. Prints tables; asserts nothing.

    python bench/bench_load.py [--sessions 10]     (needs /usr/bin/chromium)

Two phases, each on a fresh `streamlit run app.py` (the command line of harness/browser.py,
stdout/stderr captured to a log instead of discarded):

A. quiet: the N session scenarios run one after another, one session at a time. Records the
   reference heatmap images of every state and the single-session latency of every change.
B. load: the same N scenarios run at the same time in N Playwright browser contexts of one
   headless Chromium (async API). Every change is checked against the reference of phase A.

Each scenario makes 9 changes: open a configurable URL with its own h/d_model/seed/text, move the
head slider with the keyboard twice (right, then back left), open ?mode=Pretrained with its own
text and layer (in phase B all sessions do this at the same moment, on a cold server: the first
time anyone needs the model), step the layer twice with the arrow keys, change the text via the URL, go back
to a causal configurable URL and step the head slider once more. After every change:
  - the first chart has the expected number of painted heatmaps (wait with rAF polling, as in
    harness/browser.py; that wait is the latency: key press / navigation -> repainted),
  - the painted images equal the reference for this state (phase A: step 3 must equal step 1),
  - the URL carries the state (h / layer / mode), the caption names it (h, d_model, layer),
  - no st.exception element on the page; pageerror and console errors are collected throughout.

"The model is loaded once" is checked in two independent ways: (1) transformers writes a
"Loading weights:   0%" progress line to stderr once per model load (calibrated: one per
load_model call); (2) a probe: a sitecustomize.py, written to a temporary folder and put on the
server's PYTHONPATH (app.py is untouched), adds an audit hook that logs every Python open() of
the bundled model.safetensors; load_model(None) opens it exactly once per call (sha256 check).
HF_HUB_OFFLINE=1 is set for the server: the bundled model is local, nothing leaves loopback.

--url URL runs both phases against a server that is already running (e.g. nginx in front of
replicas: scripts/replicas.sh) instead of fresh ones; phase B then finds the model already loaded
wherever phase A needed it. The bench cannot read such a server's log by itself, so:
  --run-dir DIR   the RUN_DIR of scripts/replicas.sh: per replica its model loads (both ways above,
                  the probe only if the replicas were started with it), its script-run times, error
                  lines, RSS and CPU; from nginx's access.log the requests and websockets each
                  replica served and whether every route cookie stayed on one replica.
  --write-probe DIR  writes the probe (sitecustomize.py) into DIR and exits; start the replicas with
                  PYTHONPATH=DIR HF_HUB_OFFLINE=1 to have it. Without --run-dir the model-load,
                  server-CPU and server-log checks are skipped, and the output says so.
  e.g.  python bench/bench_load.py --write-probe /tmp/probe
        PYTHONPATH=/tmp/probe HF_HUB_OFFLINE=1 RUN_DIR=/tmp/run bash scripts/replicas.sh 2 &
        python bench/bench_load.py --url http://127.0.0.1:8500 --run-dir /tmp/run --sessions 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.browser import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, slider, stop, wait_healthy

VIEWPORT = {"width": 1400, "height": 1000}
DEFAULT_PARAMS = {"mode": "Configurable", "h": "4", "d_model": "64", "seed": "0", "layer": "0", "causal": "false"}
LOADING_LINE = "Loading weights:   0%"  # transformers' weight-loading progress bar, first frame
PROBE_TAG = "[mha-viz-probe] open"
RUN_TAG = "[mha-viz-probe] run"
PROBE = f'''
import importlib.abc, importlib.util, os, sys, threading, time

def _mha_viz_probe(event, args):
    if event == "open" and args:
        p = args[0]
        if isinstance(p, os.PathLike):
            p = os.fspath(p)
        if isinstance(p, str) and p.endswith("/model.safetensors"):
            sys.stderr.write(f"{PROBE_TAG} {{p}} thread={{threading.current_thread().name}} t={{time.time():.3f}}\\n")
            sys.stderr.flush()

sys.addaudithook(_mha_viz_probe)


def _patch_script_runner(module):
    run = module.ScriptRunner._run_script

    def timed_run_script(self, rerun_data):
        start = time.perf_counter()
        try:
            return run(self, rerun_data)
        finally:
            sys.stderr.write(f"{RUN_TAG} {{time.perf_counter() - start:.4f}} session={{self._session_id}}\\n")
            sys.stderr.flush()

    module.ScriptRunner._run_script = timed_run_script


class _ScriptRunnerFinder(importlib.abc.MetaPathFinder):
    """Time every script run: wraps ScriptRunner._run_script when Streamlit imports it."""

    def find_spec(self, name, path, target=None):
        if name != "streamlit.runtime.scriptrunner.script_runner":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_script_runner(module)

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _ScriptRunnerFinder())
'''

# The same JavaScript as harness.browser.painted_heatmaps / wait_for_heatmaps (those are sync-API helpers).
PAINTED_JS = """() => {
    const chart = document.querySelectorAll('[data-testid="stPlotlyChart"]')[0];
    return chart ? [...chart.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href')) : [];
}"""
WAIT_JS = """([n, old]) => {
    const chart = document.querySelectorAll('[data-testid="stPlotlyChart"]')[0];
    if (!chart) return false;
    const imgs = [...chart.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href'));
    if (imgs.length !== n) return false;
    return old === null || imgs.every(h => h && !old.includes(h));
}"""


# ---------------------------------------------------------------------------------------------- server


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path
    app_digest: str = ""

    def app_changed(self) -> str:
        """A warning if app.py or page.py changed on disk since the server started, else ''.

        Streamlit keys every st.cache_* function by its source text (inspect.getsource reads the
        file again), so an edit during a run starts new, empty caches and loads the model again
        while the old caches stay in memory: model-load counts and RSS are then not valid.
        """
        if app_digest() == self.app_digest:
            return ""
        return ("WARNING: app.py or page.py changed on disk during this run (someone edited it): Streamlit re-keys "
                "st.cache_* by source, so caches and the model were rebuilt; model loads and RSS are not valid")

    exclude_pid = property(lambda self: self.proc.pid)  # not counted as the bench's own CPU

    def text(self) -> str:
        return self.log.read_text(errors="replace").replace("\r", "\n")

    def model_loads(self) -> tuple[int, int]:
        """(transformers 'Loading weights' progress bars, probe opens of model.safetensors) so far."""
        log = self.text()
        return log.count(LOADING_LINE), log.count(PROBE_TAG)

    def run_times(self) -> list[float]:
        """Seconds of every script run so far (probe), in order."""
        return [float(line.split()[2]) for line in self.text().splitlines() if line.startswith(RUN_TAG)]

    def errors(self) -> list[str]:
        return [line for line in self.text().splitlines() if "Traceback" in line or "Uncaught app" in line
                or line.startswith(("ERROR", "Error"))]

    def rss_mb(self) -> float:
        return proc_status_kb(self.proc.pid, "VmRSS") / 1024

    def hwm_mb(self) -> float:
        return proc_status_kb(self.proc.pid, "VmHWM") / 1024

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def log_model_loads(text: str) -> tuple[int, int]:
    return text.count(LOADING_LINE), text.count(PROBE_TAG)


def log_run_times(text: str) -> list[float]:
    return [float(line.split()[2]) for line in text.splitlines() if line.startswith(RUN_TAG)]


def log_errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if "Traceback" in line or "Uncaught app" in line
            or line.startswith(("ERROR", "Error"))]


@dataclass
class Replica:
    index: int
    port: int
    pid: int
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace").replace("\r", "\n")

    def alive(self) -> bool:
        return Path(f"/proc/{self.pid}").exists()

    def cpu_s(self) -> float:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


class Front:
    """A server the bench did not start (--url), optionally with the RUN_DIR of scripts/replicas.sh.

    Offers what phase() and report() use from Server; without a run dir the server-side figures
    are unknown (and said to be).
    """

    exclude_pid = 0  # the replicas are not the bench's children

    def __init__(self, url: str, run_dir: Path | None) -> None:
        self.url = url.rstrip("/")
        self.run_dir = run_dir
        self.replicas: list[Replica] = []
        if run_dir is not None:
            for line in (run_dir / "replicas").read_text().splitlines():
                i, port, pid, log = line.split(maxsplit=3)
                self.replicas.append(Replica(int(i), int(port), int(pid), Path(log)))
            if not self.replicas:
                raise SystemExit(f"{run_dir}/replicas lists no replica: is it scripts/replicas.sh's RUN_DIR?")
        self.app_digest = app_digest()

    app_changed = Server.app_changed

    def cpu_s(self) -> float:
        return sum(r.cpu_s() for r in self.replicas)

    def run_times(self) -> list[float]:
        return [t for r in self.replicas for t in log_run_times(r.text())]

    def access_log(self) -> list[tuple[str, str, str]]:
        """(request, upstream, route) of every line of nginx's access.log (log_format mha_viz)."""
        path = self.run_dir / "access.log" if self.run_dir else None
        if path is None or not path.exists():
            return []
        rows = []
        for line in path.read_text(errors="replace").splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if f.startswith(("upstream=", "route=")))
            request = line.split('"')[1] if line.count('"') >= 2 else ""
            rows.append((request, fields.get("upstream", "-"), fields.get("route", "-")))
        return rows

    def report_lines(self) -> list[str]:
        if self.run_dir is None:
            return [("  server side NOT checked (--url without --run-dir): model loads, server CPU, script-run "
                     "times and server log errors are unknown to this bench")]
        lines = []
        rows = self.access_log()
        for r in self.replicas:
            text = r.text()
            bars, probes = log_model_loads(text)
            probe = f"{probes} probe open(s) of model.safetensors" if RUN_TAG in text else "probe not on (no PYTHONPATH)"
            upstream = f"127.0.0.1:{r.port}"
            mine = [row for row in rows if row[1] == upstream]
            sockets = sum(1 for row in mine if row[0].startswith("GET /_stcore/stream"))
            mem = (f"RSS {proc_status_kb(r.pid, 'VmRSS') / 1024:.0f} MB, peak RSS {proc_status_kb(r.pid, 'VmHWM') / 1024:.0f} MB"
                   if r.alive() else "process gone")
            # the warm-up at server start (app.py) loads both bundled models, one bar each; the probe sees MiniLM's file
            verdict = "at most once: yes" if probes <= 1 and bars <= 2 else "MORE THAN ONCE"
            lines.append(f"  replica {r.index} (:{r.port}): model loads: {bars} 'Loading weights' bar(s), {probe} "
                         f"(loaded {verdict}); "
                         f"{len(mine)} requests, {sockets} closed websocket(s) in access.log; {mem}, "
                         f"CPU {r.cpu_s():.1f} s; error lines in its log: {len(log_errors(text))}")
        routes: dict[str, set[str]] = {}
        for _, upstream, route in rows:
            routes.setdefault(route, set()).add(upstream)
        split = {route: ups for route, ups in routes.items() if len(ups) > 1}
        lines.append(f"  nginx access.log: {len(rows)} requests, {len(routes)} route cookie(s), "
                     f"routes served by more than one replica: {len(split)} {sorted(split.items())[:5] if split else ''}")
        if self.run_dir and sum(r.cpu_s() for r in self.replicas) == 0.0:
            lines.append("  (replica processes not readable: CPU and RSS unknown)")
        return lines

    def errors(self) -> list[str]:
        return [f"replica {r.index}: {line}" for r in self.replicas for line in log_errors(r.text())]


def app_digest() -> str:
    return hashlib.sha256((ROOT / "app.py").read_bytes() + (ROOT / "page.py").read_bytes()).hexdigest()


def proc_status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


@contextlib.contextmanager
def logged_server(timeout: float = 90.0) -> Iterator[Server]:
    """harness.browser.streamlit_server's command line, but stdout+stderr go to a log file and the probe is on."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
        "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
        "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
    ]
    with tempfile.TemporaryDirectory(prefix="mha-viz-bench-") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(PROBE)
        log = Path(tmp) / "server.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH")) if p)}
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        server = Server(url, proc, log, app_digest())
        try:
            wait_healthy(url, proc, timeout, lambda: ":\n" + server.text()[-3000:])
            yield server
        finally:
            stop(proc)


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def tree_cpu_s(root: int, exclude: int) -> float:
    """CPU seconds of the live processes descended from root (root included), without `exclude` and its tree."""
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parts = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(d)] = int(parts[1])
            cpu[int(d)] = (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p not in (root, exclude, 0, 1) and p in parent:
            p = parent[p]
        if p == root:
            total += seconds
    return total


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def percentiles(values: list[float]) -> str:
    if not values:
        return "n=0"
    v = sorted(values)

    def pct(p: float) -> float:  # nearest-rank
        return v[min(len(v) - 1, max(0, int(-(-p * len(v) // 100)) - 1))]

    return (f"n={len(v):>3}  p50 {pct(50):6.3f}  p90 {pct(90):6.3f}  p99 {pct(99):6.3f}  max {v[-1]:6.3f}"
            f"  mean {statistics.fmean(v):6.3f} s")


# ---------------------------------------------------------------------------------------------- scenarios

WORDS = (
    "the", "cat", "dog", "sat", "on", "mat", "and", "saw", "a", "bird", "which", "flew", "over", "old",
    "red", "house", "while", "children", "played", "in", "garden", "near", "river", "bank", "because", "it",
    "was", "warm", "sunny", "day", "but", "then", "rain", "came", "quickly", "so", "everyone", "ran", "home",
)
D_MODELS = (12, 24, 48, 96, 192, 384, 768, 48, 96, 24)  # all divisible by 1, 2, 3 and 4


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


@dataclass
class Step:
    name: str
    kind: str  # "nav" (open a URL) or "key" (keyboard on a slider)
    count: int  # expected painted heatmaps
    params: dict[str, str]  # expected URL params after the change (default values are absent from the URL)
    caption: str  # text the page must show
    path: str = ""  # nav: the URL path + query
    slider: str = ""  # key: slider label
    key: str = ""  # key: key to press
    same_as: int | None = None  # index of an earlier step whose images this state must reproduce


def scenario(i: int) -> list[Step]:
    rng = random.Random(1000 + i)
    dm, h, seed = D_MODELS[i % len(D_MODELS)], 2 + i % 2, 7 * i + 1
    t1, t2 = sentence(rng, 6, 14), sentence(rng, 6, 14)
    p1, p2 = sentence(rng, 5, 12), sentence(rng, 5, 12)
    layer = i % 4
    q = urllib.parse.urlencode
    cfg = {"d_model": str(dm), "seed": str(seed)}
    pre = {"mode": "Pretrained"}
    return [
        Step("open configurable URL", "nav", h, {**cfg, "h": str(h)}, f"h = {h} heads · d_model = {dm}",
             path="/?" + q({"h": h, "d_model": dm, "seed": seed, "text": t1})),
        Step("head slider +1", "key", h + 1, {**cfg, "h": str(h + 1)}, f"h = {h + 1} heads · d_model = {dm}",
             slider="Number of heads", key="ArrowRight"),
        Step("head slider -1 (back)", "key", h, {**cfg, "h": str(h)}, f"h = {h} heads · d_model = {dm}",
             slider="Number of heads", key="ArrowLeft", same_as=0),
        Step("open pretrained URL", "nav", 12, {**pre, "layer": str(layer)}, f"encoder layer {layer} of 6",
             path="/?" + q({"mode": "Pretrained", "layer": layer, "text": p1})),
        Step("layer slider +1", "key", 12, {**pre, "layer": str(layer + 1)}, f"encoder layer {layer + 1} of 6",
             slider="Layer", key="ArrowRight"),
        Step("layer slider +1", "key", 12, {**pre, "layer": str(layer + 2)}, f"encoder layer {layer + 2} of 6",
             slider="Layer", key="ArrowRight"),
        Step("pretrained text via URL", "nav", 12, {**pre, "layer": str(layer + 2)}, f"encoder layer {layer + 2} of 6",
             path="/?" + q({"mode": "Pretrained", "layer": layer + 2, "text": p2})),
        Step("open causal configurable URL", "nav", 4, {**cfg, "causal": "true"}, f"h = 4 heads · d_model = {dm}",
             path="/?" + q({"h": 4, "d_model": dm, "seed": seed, "causal": "true", "text": t2})),
        Step("head slider -1", "key", 3, {**cfg, "causal": "true", "h": "3"}, f"h = 3 heads · d_model = {dm}",
             slider="Number of heads", key="ArrowLeft"),
    ]


PRETRAINED_STEP = 3  # phase B: all sessions open the pretrained URL at the same moment


@dataclass
class Result:
    session: int
    step: int
    name: str
    kind: str
    latency: float | None
    failure: str = ""


@dataclass
class Session:
    index: int
    steps: list[Step]
    results: list[Result] = field(default_factory=list)
    images: dict[int, list[str]] = field(default_factory=dict)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page: object = None
    final: str = ""


async def painted(page) -> list[str]:
    return await page.evaluate(PAINTED_JS)


async def check_state(page, step: Step, want: list[str] | None, settle: float = 15.0) -> str:
    """'' if the page shows this step's state (retrying for up to `settle` s), else why not."""
    deadline = time.monotonic() + settle
    while True:
        problems = []
        imgs = await painted(page)
        if len(imgs) != step.count:
            problems.append(f"{len(imgs)} heatmaps, expected {step.count}")
        elif want is not None and imgs != want:
            problems.append(f"images differ from the reference ({sum(a != b for a, b in zip(imgs, want))}/{len(want)} heads)")
        query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
        for k, v in step.params.items():
            got = query.get(k, [DEFAULT_PARAMS[k]])[-1]  # the app leaves default values out of the URL
            if got != v:
                problems.append(f"URL {k}={got!r}, expected {v!r}")
        body = await page.evaluate("() => document.body.innerText")
        if step.caption not in body:
            problems.append(f"caption {step.caption!r} not shown")
        exceptions = await page.locator('[data-testid="stException"]').count()
        if exceptions:
            problems.append(f"{exceptions} st.exception element(s) shown")
        if not problems or time.monotonic() > deadline:
            return "; ".join(problems)
        await asyncio.sleep(0.2)


async def run_step(s: Session, j: int, base: str, refs: dict | None, timeout: float) -> None:
    step, page = s.steps[j], s.page
    old = None if step.kind == "nav" else await painted(page)
    start = time.perf_counter()
    latency, failure = None, ""
    try:
        if step.kind == "nav":
            await page.goto(base + step.path, timeout=timeout * 1000)
        else:
            await slider(page, step.slider).press(step.key)
        await page.wait_for_function(WAIT_JS, arg=[step.count, old], polling="raf", timeout=timeout * 1000)
        latency = time.perf_counter() - start
    except Exception as e:  # noqa: BLE001 - a timeout is a failure to record, not a crash
        failure = f"no repaint: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if not failure:
        if refs is not None:
            want = refs[(s.index, j)]
        elif step.same_as is not None:
            want = s.images.get(step.same_as)
        else:
            want = None
        try:
            failure = await check_state(page, step, want)
            s.images[j] = await painted(page)
        except Exception as e:  # noqa: BLE001
            failure = f"check failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    s.results.append(Result(s.index, j, step.name, step.kind, latency, failure))


async def new_session(browser, index: int) -> Session:
    s = Session(index, scenario(index))
    context = await browser.new_context(viewport=VIEWPORT)
    s.page = await context.new_page()
    s.page.on("pageerror", lambda err: s.page_errors.append(str(err)[:300]))
    s.page.on("console", lambda msg: s.console_errors.append(msg.text[:300]) if msg.type == "error" else None)
    return s


async def run_session(s: Session, base: str, refs: dict | None, timeout: float, barrier: asyncio.Barrier | None) -> None:
    for j in range(len(s.steps)):
        if barrier is not None and j == PRETRAINED_STEP:
            await barrier.wait()
        await run_step(s, j, base, refs, timeout)


async def final_check(s: Session, refs: dict | None) -> str:
    """The page still shows the last state (nothing repainted it afterwards)."""
    j = len(s.steps) - 1
    want = refs[(s.index, j)] if refs is not None else s.images.get(j)
    return await check_state(s.page, s.steps[j], want, settle=5.0)


async def phase(server: Server, n: int, concurrent: bool, refs: dict | None, timeout: float) -> list[Session]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            # Warm-up, not measured: the server's first script run imports torch and mha_viz (seconds).
            # The default page only; the pretrained model stays unloaded until the scenarios need it.
            warm = await browser.new_page(viewport=VIEWPORT)
            start = time.perf_counter()
            await warm.goto(server.url)
            await warm.wait_for_function(WAIT_JS, arg=[4, None], polling="raf", timeout=timeout * 1000)
            print(f"  warm-up: first page on the fresh server painted in {time.perf_counter() - start:.2f} s (not counted)")
            await warm.close()
            sessions = [await new_session(browser, i) for i in range(n)]
            start = {"wall": time.perf_counter(), "jiffies": cpu_jiffies(), "server": server.cpu_s(),
                     "client": tree_cpu_s(os.getpid(), server.exclude_pid), "runs": len(server.run_times())}
            if concurrent:
                barrier = asyncio.Barrier(n)
                await asyncio.gather(*(run_session(s, server.url, refs, timeout, barrier) for s in sessions))
            else:
                for s in sessions:
                    await run_session(s, server.url, refs, timeout, None)
            await asyncio.sleep(2)  # let any late rerun land before the final look
            finals = await asyncio.gather(*(final_check(s, refs) for s in sessions))
            busy, total = cpu_jiffies()
            stats = {"wall": time.perf_counter() - start["wall"],
                     "machine": (busy - start["jiffies"][0]) / os.sysconf("SC_CLK_TCK"),
                     "machine share": (busy - start["jiffies"][0]) / max(1, total - start["jiffies"][1]),
                     "server": server.cpu_s() - start["server"],
                     "client": tree_cpu_s(os.getpid(), server.exclude_pid) - start["client"],
                     "runs": server.run_times()[start["runs"]:]}
            for s, problem in zip(sessions, finals):
                s.final = problem
                await s.page.context.close()
        finally:
            await browser.close()
    return sessions, stats


def report(title: str, sessions: list[Session], server: Server, stats: dict) -> None:
    results = [r for s in sessions for r in s.results]
    failures = [r for r in results if r.failure]
    wall = stats["wall"]
    print(f"  {title}: {len(sessions)} session(s), {len(results)} changes, {len(failures)} failed changes, "
          f"wall {wall:.1f} s, loadavg now {loadavg()}")
    other = stats["machine"] - stats["server"] - stats["client"]
    server_label = "server" if not isinstance(server, Front) else (
        "replicas" if server.replicas else "server (unknown without --run-dir, counted in 'other')")
    print(f"  CPU during the changes: machine busy {100 * stats['machine share']:.0f}% of {os.cpu_count()} cores = "
          f"{stats['machine']:.0f} core-s: {server_label} {stats['server']:.0f}, browser+Playwright+this script "
          f"{stats['client']:.0f}, other workers' jobs {other:.0f}")
    print("  latency (s; nearest-rank percentiles, so with < 100 samples p99 is the maximum):")
    for label, keep in (("all changes", lambda r: True),
                        ("key press -> repainted (slider rerun)", lambda r: r.kind == "key"),
                        ("  head slider (configurable)", lambda r: r.kind == "key" and r.name.startswith("head")),
                        ("  layer slider (pretrained)", lambda r: r.kind == "key" and r.name.startswith("layer")),
                        ("navigation -> painted (new session)", lambda r: r.kind == "nav"),
                        ("  open pretrained URL (incl. model load)", lambda r: r.name == "open pretrained URL"),
                        ("  other URLs", lambda r: r.kind == "nav" and r.name != "open pretrained URL")):
        print(f"  {label:<44} {percentiles([r.latency for r in results if keep(r) and r.latency is not None])}")
    print(f"  {'server: script run time (probe, every run)':<44} {percentiles(stats['runs'])}")
    if isinstance(server, Front):
        for line in server.report_lines():
            print(line)
    else:
        bars, probes = server.model_loads()
        print(f"  model loads: {bars} 'Loading weights' progress bar(s) (the warm-up loads the 2 bundled models once "
              f"each), {probes} probe open(s) of MiniLM's model.safetensors")
        print(f"  server: RSS {server.rss_mb():.0f} MB, peak RSS {server.hwm_mb():.0f} MB, CPU {server.cpu_s():.1f} s; "
              f"error lines in server log: {len(server.errors())}")
    if server.app_changed():
        print(f"  {server.app_changed()}")
    page_errors = sum(len(s.page_errors) for s in sessions)
    console_errors = sum(len(s.console_errors) for s in sessions)
    final_bad = [s.index for s in sessions if s.final]
    print(f"  page errors: {page_errors}, console errors: {console_errors}, sessions not correct at the end: "
          f"{len(final_bad)} {final_bad if final_bad else ''}")
    for r in failures:
        print(f"  FAILED session {r.session} step {r.step} ({r.name}): {r.failure}")
    for s in sessions:
        for e in s.page_errors:
            print(f"  pageerror session {s.index}: {e}")
        for e in sorted(set(s.console_errors)):
            print(f"  console error session {s.index} (x{s.console_errors.count(e)}): {e}")
        if s.final:
            print(f"  final state session {s.index}: {s.final}")
    for line in server.errors()[:20]:
        print(f"  server log: {line[:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per change before it counts as failed")
    parser.add_argument("--url", help="run against this running server (e.g. nginx before replicas) instead of fresh ones")
    parser.add_argument("--run-dir", type=Path, help="with --url: scripts/replicas.sh's RUN_DIR (replica logs, access.log)")
    parser.add_argument("--write-probe", type=Path, metavar="DIR", help="write the probe's sitecustomize.py into DIR and exit")
    args = parser.parse_args()
    if args.write_probe:
        args.write_probe.mkdir(parents=True, exist_ok=True)
        (args.write_probe / "sitecustomize.py").write_text(PROBE)
        print(f"wrote {args.write_probe / 'sitecustomize.py'}: start the server with PYTHONPATH={args.write_probe}")
        return
    if args.run_dir and not args.url:
        parser.error("--run-dir goes with --url")
    n = args.sessions
    print(f"machine: {os.cpu_count()} cores, loadavg {loadavg()} (other workers share this machine); "
          f"{n} sessions x {len(scenario(0))} changes")
    if args.url:
        front_main(args, n)
        return

    print("\n== A. one session at a time (quiet; records the reference images), fresh server")
    with logged_server() as server:
        quiet, stats = asyncio.run(phase(server, n, concurrent=False, refs=None, timeout=args.timeout))
        report("A", quiet, server, stats)
    refs = reference_images(quiet)

    print(f"\n== B. {n} sessions at the same time (images compared with phase A), fresh server")
    with logged_server() as server:
        loaded, stats = asyncio.run(phase(server, n, concurrent=True, refs=refs, timeout=args.timeout))
        report("B", loaded, server, stats)



def reference_images(quiet: list) -> dict:
    """Phase A's painted images of every (session, change); None where a change recorded none (then checked by
    count, URL and caption only, and said so)."""
    refs = {(s.index, j): imgs for s in quiet for j, imgs in s.images.items()}
    missing = [(s.index, j) for s in quiet for j in range(len(s.steps)) if (s.index, j) not in refs]
    if missing:
        print(f"reference images missing for {missing}: those changes are checked by count, URL and caption only")
        for key in missing:
            refs[key] = None
    return refs


def front_main(args: argparse.Namespace, n: int) -> None:
    """Both phases against one running server (--url): no fresh servers, no cold start in phase B."""
    front = Front(args.url, args.run_dir)
    where = f"{front.url}" + (f", {len(front.replicas)} replica(s) from {args.run_dir}" if front.replicas else
                              " (no --run-dir: server side not checked)")
    print(f"\n== A. one session at a time (quiet; records the reference images), running server {where}")
    quiet, stats = asyncio.run(phase(front, n, concurrent=False, refs=None, timeout=args.timeout))
    report("A", quiet, front, stats)
    refs = reference_images(quiet)
    print(f"\n== B. {n} sessions at the same time (images compared with phase A), the same running server "
          "(the model is already loaded wherever phase A opened a pretrained page; counts below are totals of A and B)")
    loaded, stats = asyncio.run(phase(front, n, concurrent=True, refs=refs, timeout=args.timeout))
    report("B", loaded, front, stats)


if __name__ == "__main__":
    main()
