"""Heavy links against a public demo, beside normal sessions. Prints tables; asserts nothing.

    python bench/bench_heavy.py [--rounds 6] [--phases ABCD]      (needs /usr/bin/chromium)

One `streamlit run app.py` with MHA_VIZ_PUBLIC=1 (the Budget on, defaults) and HF_HUB_OFFLINE=1, its
stdout/stderr in a log (bench_load.logged_server). Normal sessions open simple pages (a configurable
link with its own h, seed and sentence: a new session each time) and time open -> h heatmaps painted,
from a browser that has opened the app once before the phase (that first, cold visit is timed apart);
every page is checked (h heatmaps, the caption names h, no exception element). Heavy sessions open the
hostile links of issues 15 and 35 at once: Train mode at the largest width and 5000 steps, trained MLA weights
with latents wider than the model (issue 35), 512-token h = 16
d_model = 768 cross-attention on Concat -> W_O, the bundled MiniLM with a 5000-character text ranking
every head by knockout through the whole model, a comparison with a 5000-character second sentence, and
64 sampled tokens from the causal model; and, once their page is up, they click "Trace (.json)".

The heavy sessions' Chromium runs at the lowest CPU priority (nice 19 and its autogroup's nice 19, through a
wrapper script): on a real demo the visitors' browsers run on their own machines, and here they would
otherwise take the server's two cores from it. The normal sessions' Chromium runs at normal priority: its drawing time is
part of what a visitor waits for.

Phases (each on the same server, caches warm from the phases before):
  A  one normal session alone                      the baseline
  B  one normal session while the heavy links run   does heavy work stall another session?
  C  5 normal sessions while the heavy links run    the issue's case (the browsers share the 2 cores too)
  D  5 normal sessions alone                        C's baseline: what the 5 browsers cost without heavy work
Server RSS is sampled every 0.25 s (peak reported against MHA_VIZ_CACHE_MB); heavy links report how
long their page took and whether the Budget said what it cut.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_load import WORDS, loadavg, logged_server, percentiles
from harness.browser import CHROMIUM, CHROMIUM_ARGS, niced_chromium

HEAVY_TEXT = " ".join(random.Random(0).choice(WORDS) for _ in range(900))[:5000]
CAUSAL = "the red fox saw a big owl by the lake . the red fox saw a"
q = urllib.parse.urlencode
HEAVY = {
    "Train 16 heads, d_model 128, 5000 steps": q({"mode": "Train", "h": 16, "d_model": 128, "steps": 5000, "seed": 11}),
    "Trained MLA kv/q latent 256, rope 32, h 16, 5000 steps": q({  # issue 35's link
        "weights": "trained", "variant": "mla", "kv_latent": 256, "q_latent": 256, "rope_dim": 32, "h": 16,
        "d_model": 768, "steps": 5000}),
    "512 tokens, h 16, d_model 768, cross, Concat": q({"h": 16, "d_model": 768, "cross": "true", "text": HEAVY_TEXT,
                                                      "context": HEAVY_TEXT, "view": "Concat → W_O"}),
    "MiniLM 5000 chars, knockout ranking": q({"mode": "Pretrained", "view": "Analysis", "section": "Knockout",
                                               "off": "0", "rank_final": "true", "text": HEAVY_TEXT}),
    "Compare with a 5000-char sentence": q({"h": 16, "d_model": 768, "view": "Analysis", "section": "Compare",
                                            "text": HEAVY_TEXT, "other_text": HEAVY_TEXT}),
    "Generate 64 sampled tokens": q({"mode": "Pretrained", "model": "mha-viz/induction-2l", "view": "Generate",
                                     "new_tokens": 64, "temperature": 1.2, "text": CAUSAL}),
}
SERVER_LOG = "/tmp/bench_heavy_server.log"
DONE_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && ([...document.querySelectorAll('[data-testid="stExpander"]')].some(e => e.innerText.includes('Export and share'))
        || document.querySelector('[data-testid="stException"]') !== null)"""


def simple_link(rng: random.Random) -> tuple[int, str]:
    h = rng.choice((1, 2, 4, 8))
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
    return h, "/?" + q({"h": h, "seed": rng.randint(1, 10**6), "text": text})


async def open_simple_page(page, url: str, rng: random.Random, out: dict) -> float:
    """Open one simple page (a new session) and wait until its h heatmaps are painted; check it; its seconds."""
    h, path = simple_link(rng)
    start = time.perf_counter()
    await page.goto(url + path)
    await page.wait_for_function(
        """n => { const c = document.querySelector('[data-testid="stPlotlyChart"]');
                  return c && c.querySelectorAll('.heatmaplayer image').length === n; }""",
        arg=h, polling="raf", timeout=300_000)
    seconds = time.perf_counter() - start
    caption = await page.locator(f"text=h = {h} heads").count()
    exceptions = await page.locator('[data-testid="stException"]').count()
    out["correct"] += caption >= 1 and exceptions == 0
    out["pages"] += 1
    return seconds


async def returning_visitor(browser, url: str, seed: int, out: dict):
    """A browser that has opened the app once (its first, cold visit timed apart): its page, and the rng."""
    rng = random.Random(seed)
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    page.on("pageerror", lambda e: out["errors"].append(str(e)))
    out["cold"].append(await open_simple_page(page, url, rng, out))
    return context, page, rng


async def normal_session(visitor, url: str, rounds: int, out: dict) -> None:
    """Open `rounds` simple pages, each a new session of a browser that has the app's files cached."""
    context, page, rng = visitor
    try:
        for _ in range(rounds):
            out["latency"].append(await open_simple_page(page, url, rng, out))
    finally:
        await context.close()


async def heavy_session(browser, url: str, name: str, path: str, out: dict) -> None:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = await context.new_page()
    start = time.perf_counter()
    try:
        await page.goto(url + "/?" + path)
        await page.wait_for_function(DONE_JS, timeout=240_000, polling=250)
        seconds = time.perf_counter() - start
        budget = await page.locator("text=public demo").count()
        stopped = await page.locator("text=stopped at this demo's time budget").count()
        busy = await page.locator("text=This demo is busy").count()
        exceptions = await page.locator('[data-testid="stException"]').count()
        export = "-"
        expander = page.get_by_text("Export and share")
        if await expander.count():
            await expander.first.click()
            button = page.get_by_role("button", name="Trace (.json")
            try:
                await button.wait_for(timeout=60_000)
                if await button.is_enabled():
                    t = time.perf_counter()
                    async with page.expect_download(timeout=600_000) as info:
                        await button.click()
                    download = await info.value
                    size = Path(await download.path()).stat().st_size
                    export = f"{size / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s"
                else:
                    export = "refused (disabled)"
            except Exception as err:  # noqa: BLE001 - reported, not raised
                export = f"no download: {type(err).__name__}"
        out[name] = (seconds, budget, stopped, busy, exceptions, export)
    finally:
        await context.close()


async def sample_rss(server, stop: asyncio.Event, peaks: list[float]) -> None:
    while not stop.is_set():
        peaks.append(server.rss_mb())
        await asyncio.sleep(0.25)


async def phase(server, browser, low, normals: int, heavy: bool, rounds: int, heavy_links: list[str]) -> tuple[dict, dict, float]:
    results = {"latency": [], "cold": [], "correct": 0, "pages": 0, "errors": []}
    heavy_out: dict = {}
    # each normal browser opens the app once first (timed apart: a first visit fetches ~10 MB of the frontend)
    visitors = await asyncio.gather(*(returning_visitor(browser, server.url, 100 + i, results) for i in range(normals)))
    stop, rss = asyncio.Event(), []
    sampler = asyncio.create_task(sample_rss(server, stop, rss))
    jobs = [normal_session(visitor, server.url, rounds, results) for visitor in visitors]
    if heavy:
        jobs += [heavy_session(low, server.url, name, path, heavy_out) for name, path in HEAVY.items()
                 if any(w.lower() in name.lower() for w in heavy_links)]
    await asyncio.gather(*jobs)
    stop.set()
    await sampler
    return results, heavy_out, max(rss)


async def main(rounds: int, phases: str, heavy_links: list[str]) -> None:
    from playwright.async_api import async_playwright

    os.environ["MHA_VIZ_PUBLIC"] = "1"
    print(f"load average at start: {loadavg()}   rounds per normal session: {rounds}")
    with logged_server() as server, tempfile.TemporaryDirectory() as tmp:
        try:
            await run_phases(server, tmp, rounds, phases, heavy_links, async_playwright)
        finally:
            Path(SERVER_LOG).write_text(server.text())
            print(f"(the server's log is in {SERVER_LOG})")


PHASES = (("A: 1 normal session alone", 1, False), ("B: 1 normal session + the heavy links", 1, True),
          ("C: 5 normal sessions + the heavy links", 5, True), ("D: 5 normal sessions alone", 5, False))


async def run_phases(server, tmp: str, rounds: int, phases: str, heavy_links: list[str], async_playwright) -> None:
    """The phases on one server; prints their tables, then the server's errors with their exceptions."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        low = await p.chromium.launch(executable_path=niced_chromium(Path(tmp)), args=CHROMIUM_ARGS,
                                      headless=True)
        print(f"server RSS after start: {server.rss_mb():.0f} MB")
        for label, normals, heavy in (p for p in PHASES if p[0][0] in phases):
            results, heavy_out, rss_peak = await phase(server, browser, low, normals, heavy, rounds, heavy_links)
            print(f"\n## {label}   (load average {loadavg()})")
            print(f"first visit (cold browser cache, before the phase): {' '.join(f'{t:.2f}' for t in results['cold'])} s")
            print(f"simple page open -> painted: {percentiles(results['latency'])}")
            print("  in order: " + " ".join(f"{t:.2f}" for t in results["latency"]))
            print(f"pages correct: {results['correct']} of {results['pages']};  page errors: {len(results['errors'])}")
            print(f"server RSS peak during the phase: {rss_peak:.0f} MB")
            for name, (seconds, budget, stopped, busy, exceptions, export) in heavy_out.items():
                print(f"  heavy: {name:<46} page {seconds:6.1f} s  budget notice: {'yes' if budget else 'no '}"
                      f"  stopped by time: {stopped}  busy: {busy}  exceptions: {exceptions}  Trace (.json): {export}")
        await browser.close()
        await low.close()
    print(f"\nserver errors in the log: {len(server.errors())}; RSS at the end: {server.rss_mb():.0f} MB, "
          f"high-water mark {server.hwm_mb():.0f} MB")
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in server.text().splitlines()]
    for i, line in enumerate(lines):
        if "Traceback" in line:  # the frames, then the exception: the first line that starts with a name
            end = next((j for j in range(i + 1, len(lines)) if re.match(r"[A-Za-z_.]+(Error|Exception)", lines[j])), i)
            print("  " + "\n  ".join(x for x in lines[i:end + 1] if x.strip(" │")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="simple pages each normal session opens")
    parser.add_argument("--phases", default="ABCD", help="the phases to run, e.g. AB (default ABCD)")
    parser.add_argument("--heavy", action="append", default=[], metavar="WORD",
                        help="only the heavy links whose name has WORD (repeatable; default: all six)")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.phases.upper(), args.heavy or [""]))
