"""Speed and memory, measured side by side in one run. Prints a table; asserts nothing.

    python bench/bench_speed.py            (needs /usr/bin/chromium for the browser rows)

1. compute: our trace vs torch.nn.MultiheadAttention(need_weights=True, average_attn_weights=False)
2. figure payload: bytes of the heads figure sent to the browser, vs a plain px.imshow facet figure
3. browser: slider change -> all heads repainted; bundled-model layer change; h=12, T=512; first load
4. server memory: peak RSS of the Streamlit process with the bundled model loaded
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mha_viz
from mha_viz.figures import heads_figure
from tests.browser import chromium, painted_heatmaps, slider, streamlit_server, wait_for_heatmaps

rows: list[tuple[str, str, str]] = []


def report(name: str, value: str, note: str = "") -> None:
    rows.append((name, value, note))
    print(f"{name:<58} {value:>14}  {note}", flush=True)


def median_times(fns, repeats: int = 31) -> list[float]:
    """Median seconds of each function, calls interleaved so that both see the same machine load."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - start)
    return [statistics.median(ts) for ts in times]


def compute() -> None:
    torch.manual_seed(0)
    T, d, H = 512, 768, 12
    ref = torch.nn.MultiheadAttention(d, H).eval()
    ours = mha_viz.MultiHeadAttention.from_torch(ref)
    x = torch.randn(T, d)
    with torch.inference_mode():
        t_ref, t_ours = median_times([lambda: ref(x, x, x, need_weights=True, average_attn_weights=False), lambda: ours(x)])
    report("compute: torch MHA, T=512 d=768 h=12 (median)", f"{t_ref * 1e3:.1f} ms")
    report("compute: mha_viz trace (all intermediates, numpy)", f"{t_ours * 1e3:.1f} ms", f"ratio {t_ours / t_ref:.2f} (target <= 1.3)")


def payload() -> None:
    import plotly.express as px

    mha = mha_viz.MultiHeadAttention(768, 12, seed=0)
    for T in (16, 64, 128, 512):
        tokens, x = mha_viz.embed_text(" ".join(f"w{i % 97}" for i in range(T)), 768)
        trace = mha(x, query_tokens=tokens)
        ours = len(heads_figure(trace).to_json().encode())
        note = "target <= 5 MB" if T == 512 else ""
        if T == 512:
            naive = len(px.imshow(trace.weights.astype(np.float64), facet_col=0, facet_col_wrap=4).to_json().encode())
            note += f"; plain px.imshow facet (float64): {naive / 1e6:.1f} MB, {naive / ours:.0f}x larger"
        report(f"payload: heads figure, h=12, T={T}", f"{ours / 1e6:.3f} MB", note)


PAUSE = 0.3  # seconds between steps, like a user stepping through values (not holding a key down)


def step(page, action, count: int) -> float:
    """Seconds from an action to `count` heatmaps painted, all different from the ones before."""
    time.sleep(PAUSE)
    old = painted_heatmaps(page)
    start = time.perf_counter()
    action()
    wait_for_heatmaps(page, count, changed_from=old)
    return time.perf_counter() - start


def open_seed_box(page):
    """Open the Advanced section; return its seed input."""
    page.get_by_text("Advanced").click()
    box = page.get_by_label("Seed (weights and token vectors)")
    box.wait_for()
    return box


def type_seed(box, seed: int) -> None:
    box.fill(str(seed))
    box.press("Enter")


def close_advanced(page, box) -> None:
    """Close the Advanced section again (the page is back to its default layout)."""
    page.get_by_text("Advanced").click()
    box.wait_for(state="detached")


def report_steps(name: str, first: list[float], again: list[float], target: float) -> None:
    """First visits (nothing cached on the server or in the browser) and revisits, each a median."""
    report(f"{name}: new value (median of {len(first)})", f"{statistics.median(first):.3f} s", f"target <= {target} s")
    report(f"{name}: revisited value (median of {len(again)})", f"{statistics.median(again):.3f} s", f"target <= {target} s")


def browser() -> None:
    with streamlit_server() as (url, proc), chromium() as b:
        page = b.new_page(viewport={"width": 1400, "height": 1000})

        start = time.perf_counter()
        page.goto(url)
        wait_for_heatmaps(page, 4, timeout=120)
        report("browser: first page load -> first heatmaps painted", f"{time.perf_counter() - start:.2f} s", "cold server")
        page.goto(url)
        start = time.perf_counter()
        wait_for_heatmaps(page, 4)
        report("browser: page load -> heatmaps painted (warm server)", f"{time.perf_counter() - start:.2f} s")

        # Defaults but d_model = 48, so that h = 3 is valid too: one key press is one rerun. A new
        # seed (typed in, same page) before each first step makes its value new to the server's
        # caches and to the browser; revisits step back and forth between two values seen before.
        page.goto(f"{url}/?d_model=48")
        wait_for_heatmaps(page, 4)
        thumb = slider(page, "Number of heads")
        first = []
        for seed in range(1, 9):
            count = 4 if seed % 2 == 0 else 3
            box = open_seed_box(page)
            step(page, lambda box=box, seed=seed: type_seed(box, seed), 7 - count)
            close_advanced(page, box)
            thumb.focus()
            first.append(step(page, lambda seed=seed: thumb.press("ArrowRight" if seed % 2 == 0 else "ArrowLeft"), count))
        again = [step(page, lambda i=i: thumb.press("ArrowLeft" if i % 2 == 0 else "ArrowRight"), 3 if i % 2 == 0 else 4)
                 for i in range(10)]
        report_steps("browser: h slider step -> all heads repainted", first, again, 0.3)

        first, again = [], []
        for text in ("The animal didn't cross the street because it was too tired",
                     "A quick brown fox jumps over the lazy dog near the river bank"):
            page.goto(f"{url}/?mode=Pretrained&text={urllib.parse.quote(text)}")
            wait_for_heatmaps(page, 12, timeout=180)
            thumb = slider(page, "Layer")
            thumb.focus()
            first += [step(page, lambda t=thumb: t.press("ArrowRight"), 12) for _ in range(5)]  # layers 1..5
            again += [step(page, lambda t=thumb: t.press("ArrowLeft"), 12) for _ in range(5)]  # back to 0
        report_steps("browser: bundled MiniLM layer change -> 12 heads", first, again, 0.5)
        rss = peak_rss_mb(proc.pid)
        report("server: peak RSS with the bundled model loaded", f"{rss:.0f} MB")

        text = urllib.parse.quote(" ".join(f"w{i % 97}" for i in range(512)))
        page.goto(f"{url}/?h=12&d_model=768&text={text}")
        wait_for_heatmaps(page, 12, timeout=120)
        seed_box = open_seed_box(page)
        toggle = page.get_by_text("Causal mask (no looking ahead)")
        first = []
        for seed in range(1, 5):
            step(page, lambda seed=seed: type_seed(seed_box, seed), 12)
            first.append(step(page, toggle.click, 12))
        again = [step(page, toggle.click, 12) for _ in range(6)]
        report_steps("browser: h=12, T=512, causal toggle -> 12 heads", first, again, 1.5)


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


if __name__ == "__main__":
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads")
    compute()
    payload()
    if Path("/usr/bin/chromium").exists():
        browser()
    else:
        print("browser rows skipped: /usr/bin/chromium is not installed")
