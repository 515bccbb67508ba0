"""Long traces of pretrained models (issue 26): time, memory, figure and zoom against the model's own fast forward,
side by side in one run, from 1k to 16k tokens. Prints tables and writes a log-log plot; asserts nothing.

    python bench/bench_long_models.py                                  every model at 1024 ... 16384 tokens, bundled
    python bench/bench_long_models.py --models llama --sizes 1024,2048 --plot ""      a quick look
    python bench/bench_long_models.py --one llama 4096                 one measurement (what each subprocess runs)

Models (random weights, seed 0, the bundled MiniLM tokenizer's vocabulary; random token ids, seed 0):
  llama    Llama-style: hidden 256, 8 heads / 2 K/V heads (head dim 32), 4 layers, 16,384 positions, rotary
  mistral  the same in Mistral's form with a 4,096-token sliding window on every layer (Mistral 7B v0.1's window)
  gpt-oss  gpt-oss-style: the same sizes, learned sinks on every head, a 128-token window on alternate layers
           (gpt-oss's), 4 experts (2 per token); transformers has no SDPA kernel for it and refuses flex attention
           with sinks on CPU, so its only kernel here is eager, which makes [H, T, T]: timed only where that fits
  bundled  all-MiniLM-L6-v2 and mha-viz/induction-2l at their longest input (their positions allow no 4096), and
           mha-viz/recall-16k (issue 33: <= 2x its forward, <= 1 GB) at 16,384

Each (model, tokens) runs in a fresh subprocess: build the model, warm both kernels up on 64 tokens, then
  own      the model's base forward (use_cache=False) with its fast kernel (sdpa; eager for gpt-oss), best of n
  long     PretrainedModel.long_trace(ids=...) of every layer, best of n (the two interleaved, so both see the same
           load); ratio = long / own
  peak +MB the growth of the process's peak RSS (VmHWM, reset through /proc/self/clear_refs) over its RSS before,
           for the own forward and for the first long trace; kept MB = ModelLongTrace.nbytes
  figure   mha_viz.figures.heads.long_heads_figure of the last layer as the app draws it (every head, the zoom
           marked, the wide page's width): seconds to build and to serialise, and the JSON's bytes (fig.to_json(),
           what st.plotly_chart sends)
  zoom     long_heads_figure(..., zoom=...) of 4 heads (the app's default) near the end of the text, and one
           ModelLongTrace.block(layer, head, q, k, 128) of exact weights
n is 3 up to 4096 tokens, 1 above. The limit of this machine is extrapolated from the measured growth (printed
with how). The machine is shared: the load average is printed with every row.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = (1024, 2048, 4096, 8192, 16384)
MODELS = ("llama", "mistral", "gpt-oss")
BUNDLED = ("minilm", "induction-2l", "recall-16k")
TARGETS = {"ratio": 2.0, "peak_mb": 1000.0, "figure_s": 1.5, "json_mb": 5.0, "zoom_s": 0.5}  # issue 26
EAGER_LIMIT = 4 << 30  # gpt-oss's eager forward is timed only while 3 x [H, T, T] float32 stays below this
ZOOM_HEADS = 4  # the app's zoom shows 4 heads unless others are picked
POSITIONS = 16384
HERE = Path(__file__).resolve()


def status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE).group(1)) * 1024


def reset_peak() -> int:
    """Return freed heap to the system (glibc malloc_trim, so what an earlier step freed is not counted again), then
    reset VmHWM to the current RSS (Linux: clear_refs 5); returns that RSS."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def random_model(kind: str):
    """(PretrainedModel, fast kernel name) of a random long-context model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GptOssConfig, LlamaConfig, MistralConfig

    from mha_viz.pretrained import PretrainedModel, bundled_model_dir

    common = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=POSITIONS)
    if kind == "llama":
        config, kernel = LlamaConfig(**common, intermediate_size=512), "sdpa"
    elif kind == "mistral":
        config, kernel = MistralConfig(**common, intermediate_size=512, sliding_window=4096), "sdpa"
    elif kind == "gpt-oss":
        rope = {"rope_type": "yarn", "factor": POSITIONS / 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0}
        config = GptOssConfig(**common, intermediate_size=256, num_local_experts=4, num_experts_per_tok=2,
                              sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2,
                              rope_parameters=rope)
        kernel = "eager"
    else:
        raise ValueError(f"unknown model {kind!r}: pick from {MODELS}")
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(config, attn_implementation=kernel).eval()
    return PretrainedModel(lm, AutoTokenizer.from_pretrained(bundled_model_dir()), name=kind), kernel


def bundled_model(kind: str):
    from mha_viz.pretrained import load_model
    from mha_viz.pretrained.loading import INDUCTION_MODEL, RECALL_MODEL

    model = load_model({"minilm": None, "induction-2l": INDUCTION_MODEL, "recall-16k": RECALL_MODEL}[kind])
    return model, "sdpa"


def forward(model, ids) -> None:
    model.adapter.base(input_ids=ids, use_cache=False)


def best(fn, n: int) -> tuple[float, object]:
    """(the shortest of n runs' seconds, the first run's result)."""
    times, first = [], None
    for i in range(n):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        first = out if i == 0 else first
        del out
    return min(times), first


def measure(kind: str, T: int) -> dict:
    """One (model, tokens) measurement in this process (a fresh one)."""
    import numpy as np
    import torch

    from mha_viz.figures.common import WIDE_PX as width
    from mha_viz.figures.heads import long_heads_figure

    model, kernel = bundled_model(kind) if kind in BUNDLED else random_model(kind)
    limit = model.adapter.max_positions()
    T = min(T, limit) if limit else T
    rng = np.random.default_rng(0)
    low, high = (1000, 20000) if model.vocab_size > 20000 else (0, model.vocab_size)
    ids = rng.integers(low, high, T).tolist()
    n = 3 if T <= 4096 else 1
    lm = model.model
    heads = model.adapter.site(model.parts[0], 0).num_heads
    timed_own = kernel != "eager" or 3 * heads * T * T * 4 <= EAGER_LIMIT
    row: dict = {"model": kind, "tokens": T, "kernel": kernel, "layers": model.num_layers[model.parts[0]], "n": n,
                 "own_s": None, "own_peak_mb": None}
    lm.set_attn_implementation(kernel)  # long_trace switches to its own kernel and back to this one
    with torch.no_grad():
        forward(model, torch.tensor([ids[:64]]))
    model.long_trace(ids=ids[:64])
    own, long, trace = [], [], None
    for i in range(n):  # interleaved, so that both see the same load on this shared machine
        if timed_own:
            base = reset_peak()
            start = time.perf_counter()
            with torch.no_grad():
                forward(model, torch.tensor([ids]))
            own.append(time.perf_counter() - start)
            row["own_peak_mb"] = row["own_peak_mb"] or (status("VmHWM") - base) / 1e6
        trace = None
        base = reset_peak()
        start = time.perf_counter()
        trace = model.long_trace(ids=ids)
        long.append(time.perf_counter() - start)
        if i == 0:
            row["long_peak_mb"], row["rss_mb"] = (status("VmHWM") - base) / 1e6, base / 1e6
    row["own_s"] = min(own) if own else None
    row["long_s"] = min(long)
    row["kept_mb"] = trace.nbytes / 1e6

    layer = trace.layer(max(trace.layers))
    q0, k0 = max(0, T - 200), 0
    row["figure_s"], fig = best(lambda: long_heads_figure(layer, mark=(q0, k0), width=width), 3)
    row["json_s"], text = best(fig.to_json, 3)
    row["json_mb"] = len(text) / 1e6
    shown = list(range(min(layer.num_heads, ZOOM_HEADS)))
    row["zoom_s"], zoom = best(lambda: long_heads_figure(layer, shown, zoom=(q0, k0), cols=len(shown), width=width), 3)
    row["zoom_json_mb"] = len(zoom.to_json()) / 1e6
    row["block_s"], _ = best(lambda: trace.block(layer.layer, layer.num_heads - 1, q0, k0, 128), 3)
    row["load"] = loadavg()
    return row


def run_one(kind: str, T: int, timeout: float) -> dict:
    """measure() in a fresh subprocess; a failed run comes back with its error."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1]), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        done = subprocess.run([sys.executable, str(HERE), "--one", kind, str(T)], capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"model": kind, "tokens": T, "error": f"over {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"model": kind, "tokens": T, "error": f"exit {done.returncode}: {tail[:150]}"}


def cell(value: float | None, spec: str, target: float | None = None) -> str:
    if value is None:
        return format("—", f">{int(spec.split('.')[0]) + (0 if target is None else 3)}")
    text = format(value, spec)
    return text + ("" if target is None else (" ok" if value <= target else " OVER"))


HEADER = (f"{'model':<13}{'tokens':>7} {'own s':>7} {'long s':>7} {'ratio':>8} {'own +MB':>8} {'long +MB':>10} "
          f"{'kept MB':>8} {'fig s':>8} {'JSON MB':>9} {'zoom s':>8} {'block s':>8}  load")


def line(r: dict) -> str:
    if "error" in r:
        return f"{r['model']:<13}{r['tokens']:>7}  failed: {r['error']}"
    ratio = r["long_s"] / r["own_s"] if r["own_s"] else None
    return (f"{r['model']:<13}{r['tokens']:>7} {cell(r['own_s'], '7.2f')} {cell(r['long_s'], '7.2f')} "
            f"{cell(ratio, '5.2f', TARGETS['ratio']):>8} {cell(r['own_peak_mb'], '8.0f')} "
            f"{cell(r['long_peak_mb'], '6.0f', TARGETS['peak_mb']):>10} {r['kept_mb']:8.1f} "
            f"{cell(r['figure_s'] + r['json_s'], '5.2f', TARGETS['figure_s']):>8} "
            f"{cell(r['json_mb'], '6.2f', TARGETS['json_mb']):>9} {cell(r['zoom_s'], '5.3f', TARGETS['zoom_s']):>8} "
            f"{r['block_s']:8.4f}  {r['load']}")


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def limits(rows: list[dict]) -> None:
    """Where this machine stops, per model: memory from a straight-line fit of the peak RSS (and of what is kept)
    against tokens over the measured sizes, time from the log-log slope of the three longest."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    budget = 1024 * 2**20  # MHA_VIZ_CACHE_MB's default: what the app's shared cache may hold
    print(f"\nLimits of this machine ({total / 2**30:.1f} GiB RAM; the app's cache budget MHA_VIZ_CACHE_MB = 1024):")
    print("  memory: peak RSS = model RSS + a + b T and kept = c + d T fitted over the sizes measured, solved for "
          "the RAM and the budget;\n  time: t ~ T^k with k the log-log slope of the three longest runs, at that T")
    for kind in dict.fromkeys(r["model"] for r in rows):
        ok = [r for r in rows if r["model"] == kind and "error" not in r]
        if len(ok) < 2:
            continue
        xs = [r["tokens"] for r in ok]
        a, b = fit(xs, [r["long_peak_mb"] * 1e6 for r in ok])
        c, d = fit(xs, [r["kept_mb"] * 1e6 for r in ok])
        cache_T = (budget - c) / d
        k = fit([math.log(x) for x in xs[-3:]], [math.log(r["long_s"]) for r in ok[-3:]])[1]
        ram = "peak RSS does not grow over these sizes: no RAM limit to extrapolate"
        if b > 0:
            ram_T = (total - ok[-1]["rss_mb"] * 1e6 - a) / b
            ram_h = [ok[-1]["long_s"] * (ram_T / xs[-1]) ** e / 3600 for e in (k, 2)]  # hours at T^k, T^2
            ram = (f"{total / 2**30:.0f} GiB reached at ~{ram_T:,.0f} tokens (long trace ~{ram_h[0]:,.1f} h there at "
                   f"T^k, ~{ram_h[1]:,.1f} h at T^2)")
        cache_min = [ok[-1]["long_s"] * (cache_T / xs[-1]) ** e / 60 for e in (k, 2)]  # minutes at T^k, T^2
        print(f"  {kind}: peak +{b * 1024 / 1e6:.1f} MB per 1k tokens (+{a / 1e6:.0f} MB), kept {d * 1024 / 1e6:.1f} "
              f"MB per 1k tokens; {ram}, the 1 GiB cache budget at ~{cache_T:,.0f} tokens "
              f"(~{cache_min[0]:,.1f} min at T^k, ~{cache_min[1]:,.1f} min at T^2); time exponent k = {k:.2f}")


def plot(rows: list[dict], path: str) -> None:
    """Log-log: seconds (long trace solid, own forward dotted) and MB (peak growth solid, kept dotted) per token."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from mha_viz import save_figure

    titles = ("seconds: long trace (solid), own forward (dotted)",
              "MB: long trace peak RSS growth (solid), kept (dotted)")
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.1)
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
    random_rows = [r for r in rows if r["model"] in MODELS and "error" not in r]
    for colour, kind in zip(colours, dict.fromkeys(r["model"] for r in random_rows)):
        ok = [r for r in random_rows if r["model"] == kind]
        x = [r["tokens"] for r in ok]
        for col, key, name, dash in ((1, "long_s", "long trace", "solid"), (1, "own_s", "own forward", "dot"),
                                     (2, "long_peak_mb", "long trace peak +MB", "solid"),
                                     (2, "kept_mb", "kept (nbytes)", "dot")):
            fig.add_trace(go.Scatter(x=x, y=[r[key] for r in ok], name=f"{kind}: {name}", mode="lines+markers",
                                     line={"color": colour, "dash": dash}), row=1, col=col)
    fig.update_xaxes(type="log", title_text="tokens", tickvals=list(SIZES), ticktext=[f"{s // 1024}k" for s in SIZES])
    fig.update_yaxes(type="log")
    fig.update_layout(width=1100, height=480, template="plotly_white",
                      title="Long traces of random long-context models (4 layers, 8 heads / 2 K/V) on 2 shared cores")
    save_figure(fig, path, preset=None)
    print(f"\nwrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma list of {MODELS}")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--bundled", default=",".join(BUNDLED), help="bundled models at their longest input ('' none)")
    parser.add_argument("--plot", default="bench/long-growth.png", help="the log-log plot's path ('' none)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "TOKENS"), help="one measurement in this process")
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one[0], int(args.one[1]))), flush=True)
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE.parent, check=False).stdout.strip()
    print(f"# bench/bench_long_models.py at {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{os.cpu_count()} CPUs (shared), load average {loadavg()}")
    print("targets (issue 26): ratio <= 2, long trace peak <= 1000 MB, figure (build + JSON) <= 1.5 s, "
          "JSON <= 5 MB, zoom <= 0.5 s\n")
    print(HEADER, flush=True)
    rows = []
    for kind in filter(None, args.models.split(",")):
        for T in (int(s) for s in args.sizes.split(",")):
            rows.append(run_one(kind, T, args.timeout))
            print(line(rows[-1]), flush=True)
    for kind in filter(None, args.bundled.split(",")):
        rows.append(run_one(kind, max(SIZES), args.timeout))
        print(line(rows[-1]), flush=True)
    limits([r for r in rows if r["model"] in MODELS])
    if args.plot:
        plot(rows, args.plot)
    print(f"\nload average at the end {loadavg()}")


if __name__ == "__main__":
    main()
