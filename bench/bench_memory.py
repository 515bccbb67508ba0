"""Server memory over many reruns with varied input, and against open sessions. Prints tables; asserts nothing.

    python bench/bench_memory.py [--reruns 300] [--warmup 50]     (needs /usr/bin/chromium)
    python bench/bench_memory.py --sessions 1,5,10 [--pages public,long] [--ttl 30]

--sessions: instead of the reruns, server RSS against open sessions (issue 20: what a session keeps must be a key
into the shared cache, so RSS follows MHA_VIZ_CACHE_MB whatever the number of sessions). For each page, a fresh
server with MHA_VIZ_CACHE_MB=128 and one Chromium tab per session (a new session each, its own seed, so its own
trace): "public" is a public demo (MHA_VIZ_PUBLIC=1, MHA_VIZ_MAX_TOKENS=300) at a 300-token cross-attention page
(h 16, d_model 768, d_k = d_v = d_out = 256) with "Export and share" open (its three downloads offered);
"long" is a local server at the same layer on 4096 tokens a side (the Heads view's overview and zoom). RSS is read
once the sessions counted are open, then with every tab closed: 15 s after, and after the disconnect timeout
(server.disconnectedSessionTTL, set to --ttl seconds), when Streamlit drops the closed sessions.

One `streamlit run app.py` (bench_load.logged_server: the command line of harness/browser.py, log
captured, HF_HUB_OFFLINE=1) and one headless Chromium page. The reruns come in blocks of five:
open a URL with fresh input (a new session), then in that session edit the sentence (text area,
Ctrl+Enter), press a slider key, edit the sentence, press a slider key. Blocks alternate between
the configurable model (random text of 4 to 61 words, d_model, h, seed, causal, positional
encoding, sometimes cross-attention with a second random sentence; the keys move the head slider)
and the bundled pretrained model (random text of 3 to 41 words, random layer; the keys move the
Layer slider). Nearly every rerun is a new cache key, so the app's caches fill up to their bounds
(st.cache_data max_entries, read from page.py and mha_viz/ui/loaders.py, and printed) and must then stay there. The script
counts the distinct keys it asked for, so it knows when the trace caches are full.

VmRSS of the server process (/proc/<pid>/status) is printed every 25 reruns; the growth is
measured from the end of the warm-up (rerun 50) to the end (rerun 300), target < 10 %, and
also from the first checkpoint at which both trace caches are full.

Afterwards (--long; default: the configurable cache bound + 8; 0 to skip) a separate check of the
cache bound: the caches are bounded by entry count, not bytes, so it opens that many configurable
URLs with 512 fresh tokens, h=16, d_model=768 (the largest trace the app accepts) and reports the
RSS per such rerun: it should stop growing once the cache is full.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_load import WORDS, loadavg, logged_server
from harness.browser import ROOT, chromium, painted_heatmaps, slider, wait_for_heatmaps

D_MODELS = (12, 24, 48, 96, 192, 384, 768)  # every h from 1 to 4 divides these: slider steps stay valid
LAYERS = 6  # all-MiniLM-L6-v2
CHANGES_PER_BLOCK = 4  # reruns in a session after the URL that opened it


def cache_bounds() -> dict[str, int | None]:
    """max_entries of the app's cached functions, read from page.py and mha_viz/ui/loaders.py (they change; the
    bench should not)."""
    bounds = {}
    sources = ((ROOT / "page.py").read_text(), (ROOT / "mha_viz" / "ui" / "loaders.py").read_text())
    for node in (n for source in sources for n in ast.walk(ast.parse(source))):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") in ("cache_data", "cache_resource"):
                    for kw in deco.keywords:
                        if kw.arg == "max_entries" and isinstance(kw.value, ast.Constant):
                            bounds[node.name] = kw.value.value
    return bounds


BOUNDS = cache_bounds()
CACHE_ENTRIES = {"configurable": BOUNDS.get("configurable_trace"), "pretrained": BOUNDS.get("pretrained_traces")}


def text(rng: random.Random, lo: int, hi: int) -> str:
    # A numbered word makes nearly every sentence new (a new cache key).
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    words.insert(rng.randrange(len(words) + 1), f"w{rng.randint(0, 99999)}")
    return " ".join(words)


Change = tuple[str, str, int, tuple]  # (what: nav / text / slider label, argument, heatmaps expected, cache key)


def configurable_block(rng: random.Random) -> list[Change]:
    """A configurable URL with fresh input, then text / head-slider changes in that session."""
    dm, h = rng.choice(D_MODELS), rng.randint(1, 4)
    query = {"h": h, "d_model": dm, "seed": rng.randint(0, 10**6), "text": text(rng, 3, 60),
             "causal": rng.choice(("true", "false")), "pe": rng.choice(("true", "false"))}
    if rng.random() < 0.25:
        query.update(cross="true", context=text(rng, 3, 40))
    state = dict(query)

    def key() -> tuple:  # the arguments of app.configurable_trace, in effect
        return ("configurable", *sorted(state.items()))

    changes = [("nav", "/?" + urllib.parse.urlencode(query), h, key())]
    for i in range(CHANGES_PER_BLOCK):
        if i % 2 == 0:
            state["text"] = text(rng, 3, 60)
            changes.append(("text", state["text"], h, key()))
        else:
            press = rng.choice(("ArrowLeft", "ArrowRight")) if 1 < h < 4 else ("ArrowRight" if h == 1 else "ArrowLeft")
            h = state["h"] = h + (1 if press == "ArrowRight" else -1)
            changes.append(("Number of heads", press, h, key()))
    return changes


def pretrained_block(rng: random.Random) -> list[Change]:
    """A pretrained-mode URL with fresh text and layer, then text / Layer-slider changes in that session."""
    layer, txt = rng.randint(0, LAYERS - 1), text(rng, 2, 40)
    changes = [("nav", "/?" + urllib.parse.urlencode({"mode": "Pretrained", "layer": layer, "text": txt}), 12,
                ("pretrained", txt))]
    for i in range(CHANGES_PER_BLOCK):
        if i % 2 == 0:
            txt = text(rng, 2, 40)
            changes.append(("text", txt, 12, ("pretrained", txt)))
        else:
            press = rng.choice(("ArrowLeft", "ArrowRight")) if 0 < layer < LAYERS - 1 else ("ArrowRight" if layer == 0 else "ArrowLeft")
            layer += 1 if press == "ArrowRight" else -1
            changes.append(("Layer", press, 12, ("pretrained", txt)))  # a hit: all layers are cached
    return changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--long", type=int, default=-1,
                        help="extra reruns with 512-token inputs (0: skip; default: the configurable cache bound + 8)")
    parser.add_argument("--sessions", default="", help="e.g. 1,5,10: RSS against open sessions instead of reruns")
    parser.add_argument("--pages", default="public,long", help="the pages of --sessions: public, long")
    parser.add_argument("--ttl", type=int, default=30, help="--sessions: the server's disconnectedSessionTTL, s")
    args = parser.parse_args()
    if args.sessions:
        print(f"machine: {os.cpu_count()} cores, loadavg {loadavg()} (other workers share this machine); "
              f"app at {ROOT}")
        for which in args.pages.split(","):
            sessions_rss(which, [int(n) for n in args.sessions.split(",")], args.ttl)
        return
    rng = random.Random(20240611)
    print(f"machine: {os.cpu_count()} cores, loadavg {loadavg()} (other workers share this machine); "
          f"{args.reruns} reruns, RSS baseline after {args.warmup}")
    print("page.py and loaders.py cache bounds (max_entries): " + ", ".join(f"{k} {v}" for k, v in BOUNDS.items()))

    with logged_server() as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page_errors: list[str] = []
        console_errors: list[str] = []
        page.on("pageerror", lambda err: page_errors.append(str(err)[:300]))
        page.on("console", lambda msg: console_errors.append(msg.text[:300]) if msg.type == "error" else None)
        print(f"server RSS at start (nothing rendered yet): {server.rss_mb():.1f} MB")
        print(f"{'reruns':>6} {'elapsed s':>9} {'VmRSS MB':>9} {'peak MB':>8} {'model loads':>11} {'failures':>8}  loadavg")
        rss: dict[int, float] = {}
        done = failures = 0
        times: dict[str, list[float]] = {}
        counts = {"URL opens (new session)": 0, "text edits": 0, "slider key presses": 0}
        kinds = {"configurable": 0, "pretrained": 0}
        keys: dict[str, set] = {"configurable": set(), "pretrained": set()}  # distinct cache keys asked for
        full: dict[str, int] = {}  # rerun at which that many distinct keys filled the app's cache
        start = time.perf_counter()
        block = 0
        while done < args.reruns:
            kind = "pretrained" if block % 2 else "configurable"
            block += 1
            for what, arg, n, cache_key in (pretrained_block if kind == "pretrained" else configurable_block)(rng):
                if done >= args.reruns:
                    break
                keys[kind].add(cache_key)
                if len(keys[kind]) == CACHE_ENTRIES[kind] and kind not in full:
                    full[kind] = done + 1
                t0 = time.perf_counter()
                try:
                    if what == "nav":
                        page.goto(server.url + arg)
                        wait_for_heatmaps(page, n, timeout=180)
                        counts["URL opens (new session)"] += 1
                    elif what == "text":
                        old = painted_heatmaps(page)
                        box = page.get_by_label("Sentence", exact=True)
                        box.fill(arg)
                        box.press("Control+Enter")  # st.text_area commits on Ctrl+Enter
                        wait_for_heatmaps(page, n, changed_from=old, timeout=180)
                        counts["text edits"] += 1
                    else:
                        old = painted_heatmaps(page)
                        slider(page, what).press(arg)
                        wait_for_heatmaps(page, n, changed_from=old, timeout=180)
                        counts["slider key presses"] += 1
                    times.setdefault(f"{kind} {'URL open' if what == 'nav' else 'text edit' if what == 'text' else 'slider key'}", []).append(time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 - counted and shown, the run goes on
                    failures += 1
                    print(f"  failed rerun {done + 1} ({kind} {what} {arg[:60]!r}): {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                done += 1
                kinds[kind] += 1
                if done % args.every == 0 or done in (args.warmup, args.reruns):
                    rss[done] = server.rss_mb()
                    bars, probes = server.model_loads()
                    print(f"{done:>6} {time.perf_counter() - start:>9.1f} {rss[done]:>9.1f} {server.hwm_mb():>8.1f} "
                          f"{f'{bars}/{probes}':>11} {failures:>8}  {loadavg()}", flush=True)
        page.goto("about:blank")  # close the last session, then let the server sit idle a moment
        time.sleep(10)
        idle = server.rss_mb()
        base, end = rss[args.warmup], rss[done]
        bars, probes = server.model_loads()
        print(f"\nreruns: {done} ({', '.join(f'{v} {k}' for k, v in counts.items())}); "
              f"configurable {kinds['configurable']}, pretrained {kinds['pretrained']}; failures {failures}; "
              f"wall {time.perf_counter() - start:.0f} s")
        print("seconds per rerun (change -> repainted): " + "; ".join(
            f"{k} median {statistics.median(v):.2f} (n={len(v)})" for k, v in sorted(times.items())))
        print(f"model loads ('Loading weights' bars / probe opens of model.safetensors): {bars}/{probes}")
        if server.app_changed():
            print(server.app_changed())
        print(f"page errors: {len(page_errors)}, console errors: {len(console_errors)}, "
              f"error lines in server log: {len(server.errors())}")
        for e in page_errors[:5] + sorted(set(console_errors))[:5] + server.errors()[:5]:
            print(f"  {e[:200]}")
        print(f"VmRSS after warm-up (rerun {args.warmup}): {base:.1f} MB; at rerun {done}: {end:.1f} MB; "
              f"after 10 s idle: {idle:.1f} MB; peak (VmHWM) {server.hwm_mb():.1f} MB")
        print(f"growth after warm-up: {end - base:+.1f} MB = {100 * (end - base) / base:+.1f} % (target < 10 %)")
        half = min(rss, key=lambda k: abs(k - (args.warmup + done) // 2))
        print(f"  first half ({args.warmup}->{half}): {100 * (rss[half] - base) / base:+.1f} %, "
              f"second half ({half}->{done}): {100 * (end - rss[half]) / rss[half]:+.1f} %")
        print(f"distinct cache keys asked for: configurable {len(keys['configurable'])}, pretrained "
              f"{len(keys['pretrained'])}; the app's caches hold {CACHE_ENTRIES['configurable']} and "
              f"{CACHE_ENTRIES['pretrained']}, so they were full from rerun "
              + (f"{max(full.values())} on" if len(full) == 2 else "- (never)"))
        if len(full) == 2:
            after = [k for k in sorted(rss) if k >= max(full.values())]
            if len(after) > 1:
                first = after[0]
                print(f"growth after the caches are full (rerun {first} -> {done}): {end - rss[first]:+.1f} MB = "
                      f"{100 * (end - rss[first]) / rss[first]:+.1f} %; range over those checkpoints "
                      f"{min(rss[k] for k in after):.1f}-{max(rss[k] for k in after):.1f} MB")
        n_long = (CACHE_ENTRIES["configurable"] or 16) + 8 if args.long < 0 else args.long
        if n_long:
            long_inputs(page, server, rng, n_long)


SESSION_LAYER = {"mode": "Configurable", "h": 16, "d_model": 768, "d_k": 256, "d_v": 256, "d_out": 256,
                 "cross": "true"}
SESSION_PAGES = {  # page -> (server environment, tokens a side, open "Export and share", heatmaps painted when ready)
    "public": ({"MHA_VIZ_PUBLIC": "1", "MHA_VIZ_CACHE_MB": "128", "MHA_VIZ_MAX_TOKENS": "300"}, 300, True, 16),
    "long": ({"MHA_VIZ_CACHE_MB": "128"}, 4096, False, 16),
}


def session_url(base: str, tokens: int, seed: int) -> str:
    from mha_viz.params import EXAMPLES
    from mha_viz.text import repeat_to_tokens

    text = repeat_to_tokens(" . ".join(EXAMPLES.values()) + " .", tokens)
    return base + "/?" + urllib.parse.urlencode({**SESSION_LAYER, "seed": seed, "text": text, "context": text})


def open_session(browser, url: str, export: bool, heatmaps: int) -> object:
    """A new tab at url, painted (and its "Export and share" open with its downloads offered)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    wait_for_heatmaps(page, heatmaps, timeout=600)
    if export:
        page.get_by_text("Export and share", exact=True).click()
        page.get_by_role("button", name="Report (.html)").wait_for(timeout=300_000)
    return page


def sessions_rss(which: str, counts: list[int], ttl: int) -> None:
    """RSS of a fresh server against open sessions (tabs) of one page, then with every tab closed."""
    env, tokens, export, heatmaps = SESSION_PAGES[which]
    saved = {k: os.environ.get(k) for k in (*env, "STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL")}
    os.environ.update(env, STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL=str(ttl))
    try:
        with logged_server() as server, chromium() as browser:
            print(f"\n{which}: {tokens} tokens a side, h 16, d_model 768, d_k = d_v = d_out = 256, cross-attention"
                  f"{', Export and share open' if export else ', Heads view (overview and zoom)'}; "
                  + " ".join(f"{k}={v}" for k, v in env.items()))
            print(f"  server RSS at start: {server.rss_mb():.0f} MB")
            print(f"  {'sessions':>8} {'VmRSS MB':>9} {'peak MB':>8} {'s to open':>9} {'failures':>8}  loadavg")
            pages, failures, start = [], 0, time.perf_counter()
            for count in counts:
                while len(pages) < count:
                    try:
                        pages.append(open_session(browser, session_url(server.url, tokens, len(pages)), export,
                                                  heatmaps))
                    except Exception as e:  # noqa: BLE001 - counted and shown, the run goes on
                        failures += 1
                        pages.append(None)
                        print(f"    session {len(pages)} failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                time.sleep(3)
                print(f"  {count:>8} {server.rss_mb():>9.0f} {server.hwm_mb():>8.0f} "
                      f"{time.perf_counter() - start:>9.0f} {failures:>8}  {loadavg()}", flush=True)
            for page in pages:
                if page is not None:
                    page.close()
            time.sleep(15)
            print(f"  every tab closed, 15 s later: VmRSS {server.rss_mb():.0f} MB")
            time.sleep(max(0, ttl + 20 - 15))
            print(f"  after the disconnect timeout ({ttl} s) and 20 s: VmRSS {server.rss_mb():.0f} MB; "
                  f"error lines in the server log: {len(server.errors())}", flush=True)
            for e in server.errors()[:5]:
                print(f"    {e[:200]}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def long_inputs(page, server, rng: random.Random, n: int) -> None:
    """Largest traces the app accepts: T=512, h=16, d_model=768; each a new cache key."""
    print(f"\ncache bound check: {n} configurable URLs with 512 fresh tokens, h=16, d_model=768")
    before, failures, start = server.rss_mb(), 0, time.perf_counter()
    for i in range(n):
        words = " ".join(f"w{rng.randint(0, 99999)}" for _ in range(512))
        try:
            page.goto(server.url + "/?" + urllib.parse.urlencode({"h": 16, "d_model": 768, "seed": i, "text": words}))
            wait_for_heatmaps(page, 16, timeout=300)
        except Exception as e:  # noqa: BLE001
            failures += 1
            print(f"  failed long rerun {i + 1}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        if (i + 1) % 4 == 0 or i + 1 == n:
            print(f"  {i + 1:>3} long reruns: VmRSS {server.rss_mb():.1f} MB ({time.perf_counter() - start:.0f} s)", flush=True)
    page.goto("about:blank")
    after = server.rss_mb()
    print(f"  VmRSS {before:.1f} -> {after:.1f} MB: {after - before:+.1f} MB, {(after - before) / n:+.1f} MB per "
          f"512-token rerun; failures {failures}; the configurable trace cache holds {CACHE_ENTRIES['configurable']}")
    if server.app_changed():
        print(f"  {server.app_changed()}")


if __name__ == "__main__":
    main()
