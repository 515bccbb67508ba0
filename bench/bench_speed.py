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
    for T in (16, 128, 512):
        tokens, x = mha_viz.embed_text(" ".join(f"w{i % 97}" for i in range(T)), 768)
        trace = mha(x, query_tokens=tokens)
        ours = len(heads_figure(trace).to_json().encode())
        note = "target <= 5 MB" if T == 512 else ""
        if T == 512:
            naive = len(px.imshow(trace.weights.astype(np.float64), facet_col=0, facet_col_wrap=4).to_json().encode())
            note += f"; plain px.imshow facet (float64): {naive / 1e6:.1f} MB, {naive / ours:.0f}x larger"
        report(f"payload: heads figure, h=12, T={T}", f"{ours / 1e6:.3f} MB", note)


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

        page.goto(f"{url}/?d_model=48")  # every h from 1 to 4 divides 48: one key press, one rerun
        wait_for_heatmaps(page, 4)
        thumb = slider(page, "Number of heads")
        thumb.focus()
        times = []
        for i in range(10):
            key, n = ("ArrowLeft", 3) if i % 2 == 0 else ("ArrowRight", 4)
            start = time.perf_counter()
            thumb.press(key)
            wait_for_heatmaps(page, n)
            times.append(time.perf_counter() - start)
        report("browser: h slider step -> all heads repainted (median)", f"{statistics.median(times):.3f} s",
               "defaults but d_model=48; target <= 0.3 s")

        page.goto(f"{url}/?mode=Pretrained")
        wait_for_heatmaps(page, 12, timeout=180)
        thumb = slider(page, "Layer")
        thumb.focus()
        times = []
        for i in range(10):
            old = painted_heatmaps(page)
            start = time.perf_counter()
            thumb.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
            wait_for_heatmaps(page, 12, changed_from=old)
            times.append(time.perf_counter() - start)
        report("browser: bundled MiniLM layer change -> 12 heads (median)", f"{statistics.median(times):.3f} s", "target <= 0.5 s")
        rss = peak_rss_mb(proc.pid)
        report("server: peak RSS with the bundled model loaded", f"{rss:.0f} MB")

        text = urllib.parse.quote(" ".join(f"w{i % 97}" for i in range(512)))
        page.goto(f"{url}/?h=12&d_model=768&text={text}")
        wait_for_heatmaps(page, 12, timeout=120)
        page.get_by_text("Advanced").click()
        toggle = page.get_by_text("Causal mask (no looking ahead)")
        times = []
        for _ in range(6):
            old = painted_heatmaps(page)
            start = time.perf_counter()
            toggle.click()
            wait_for_heatmaps(page, 12, changed_from=old)
            times.append(time.perf_counter() - start)
        report("browser: h=12, T=512, causal toggle -> 12 heads (median)", f"{statistics.median(times):.3f} s", "target <= 1.5 s")


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
