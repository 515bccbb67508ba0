"""Exports of the largest trace, before and after issue 15: time, file size, peak memory. Prints tables; asserts nothing.

    python bench/bench_export.py [--before REV]     (REV default: git merge-base HEAD main)

The trace: the configurable layer, h = 16, d_model = 768, cross-attention, 512 tokens a side (the
largest the app offers; the issue's 234 MB "Trace (.json)"). "before" is mha_viz/export.py at REV,
loaded beside the working tree's; "after" is the working tree's. Each row runs in a fresh process:
the trace is built, the process's peak RSS is reset (/proc/self/clear_refs), and "peak +MB" is the
peak RSS during the export above the RSS before it, the result included (kept, as Streamlit keeps
a download; a str result is a second copy of the bytes).
"3 at once" runs three exports in three threads at the same moment, like three people clicking (the app builds
its downloads with mha_viz.serve.slot.build_export: one large export at a time).
Then: export_size's answer and cost, the HTML report of this trace (and of the widest heads the CLI
allows), and `python -m mha_viz report` at its limits and beyond them.

    python bench/bench_export.py --figures [--before REV]     (only the next table)

Figures for a paper (mha_viz.paper.figure_bytes, SVG and PDF of a 4-head grid, paper preset): in a fresh process, the
first figure (cold: Chromium starts) and the next ones (warm), "before" (mha_viz/paper.py at REV) and "after".
Results: bench/RESULTS-export.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT = " ".join(f"w{i}" for i in range(512))
CONTEXT = " ".join(f"v{i}" for i in range(512))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def status(field: str) -> float:
    """A /proc/self/status memory field in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def big_trace(d_head: int | None = None):
    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_trace

    return configurable_trace(TEXT, MHAConfig(768, 16, d_k=d_head, d_v=d_head), context=CONTEXT)


def module_before(name: str, before: str | None):
    """mha_viz.<name> of the working tree, or of git revision `before` (loaded as mha_viz._<name>_before)."""
    import importlib

    if before is None:
        return importlib.import_module(f"mha_viz.{name}")
    path = Path(tempfile.mkdtemp()) / f"{name}_before.py"
    path.write_text(git("show", f"{before}:mha_viz/{name}.py"))
    spec = importlib.util.spec_from_file_location(f"mha_viz._{name}_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def builder(name: str, module):
    """The export called `name`: a function trace -> the export (str or bytes), or its size when written to a file."""
    from mha_viz.serve.slot import build_export  # the app's: the working tree's, whatever `module` is

    def to_file(write, **options):
        def run(trace):
            with tempfile.TemporaryFile() as file:
                write(trace, file, **options)
                return file.tell()
        return run

    return {
        "json (str)": lambda t: module.trace_to_json(t),
        "json lists, export_bytes": lambda t: module.export_bytes(t, "json"),
        "json lists, write_json to a file": to_file(getattr(module, "write_json", None)),
        "json base64, export_bytes": lambda t: module.export_bytes(t, "json", array_format="base64"),
        "json base64, build_export": lambda t: build_export(t, "json", array_format="base64"),
        "json base64 float16": lambda t: module.export_bytes(t, "json", array_format="base64", dtype="float16"),
        "json lists float16": lambda t: module.export_bytes(t, "json", dtype="float16"),
        "npz compressed": lambda t: module.trace_to_npz(t),
        "npz uncompressed": lambda t: module.trace_to_npz(t, compress=False),
        "npz, write_npz to a file": to_file(getattr(module, "write_npz", None), compress=False),
    }[name]


def one(name: str, before: str | None, copies: int) -> dict:
    """Run in a fresh process: build the trace, then `copies` exports at once; time, size, peak."""
    import torch

    torch.set_num_threads(1)
    trace = big_trace()
    build = builder(name, module_before("export", before))
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM)
    rss = status("VmRSS")
    results: list[str | bytes | int] = []  # kept until the peak is read, as Streamlit keeps a download
    threads = [threading.Thread(target=lambda: results.append(build(trace))) for _ in range(copies)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    peak = status("VmHWM") - rss
    size = results[0] if isinstance(results[0], int) else len(results[0])
    return {"seconds": seconds, "mb": size / 1e6, "peak": peak, "done": len(results)}


def run_one(name: str, before: str | None, copies: int = 1) -> dict:
    cmd = [sys.executable, __file__, "--one", name, "--copies", str(copies)] + (["--before", before] if before else [])
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(label: str, result: dict) -> str:
    if "error" in result:
        return f"{label:<44} {result['error']}"
    return f"{label:<44} {result['seconds']:8.2f} {result['mb']:9.1f} {result['peak']:9.0f}"


def exports(before: str) -> None:
    print(f"\n## Exports of h = 16, d_model = 768, cross-attention, 512 x 512 tokens (before: {before})\n")
    print(f"{'export':<44} {'seconds':>8} {'file MB':>9} {'peak +MB':>9}")
    for name in ("json (str)", "npz compressed", "npz uncompressed"):
        print(row(f"before  {name}", run_one(name, before)))
    for name in ("json (str)", "json lists, export_bytes", "json lists, write_json to a file",
                 "json base64, export_bytes", "json base64 float16", "json lists float16", "npz compressed",
                 "npz uncompressed", "npz, write_npz to a file"):
        print(row(f"after   {name}", run_one(name, None)))
    print(f"\n{'three at once (3 threads, results kept)':<44} {'seconds':>8} {'file MB':>9} {'peak +MB':>9}")
    print(row("before  json (str) x 3", run_one("json (str)", before, 3)))
    print(row("after   json (str) x 3", run_one("json (str)", None, 3)))
    print(row("after   json base64, build_export x 3", run_one("json base64, build_export", None, 3)))
    print(row("before  npz compressed x 3", run_one("npz compressed", before, 3)))
    print(row("after   npz compressed x 3", run_one("npz compressed", None, 3)))


def sizes() -> None:
    import torch

    from mha_viz.export import export_bytes, export_size

    torch.set_num_threads(1)
    trace = big_trace()
    print("\n## export_size before the click (same trace)\n")
    print(f"{'export':<28} {'export_size MB':>14} {'ms':>7} {'actual MB':>10} {'error':>8}")
    for label, fmt, options in (("npz (uncompressed)", "npz", {"compress": False}), ("npz (compressed)", "npz", {}),
                                ("json lists", "json", {}), ("json base64", "json", {"array_format": "base64"})):
        size_options = {k: v for k, v in options.items() if k != "compress"}
        start = time.perf_counter()
        estimate = export_size(trace, fmt, **size_options)
        ms = (time.perf_counter() - start) * 1e3
        actual = len(export_bytes(trace, fmt, **options))
        print(f"{label:<28} {estimate / 1e6:14.2f} {ms:7.1f} {actual / 1e6:10.2f} {(estimate - actual) / actual:+8.2%}")


def reports() -> None:
    import torch

    from mha_viz.report import html_report

    torch.set_num_threads(1)
    print("\n## HTML report (default figures)\n")
    print(f"{'trace':<46} {'seconds':>8} {'file MB':>8}  figures left out")
    for label, d_head in (("h=16, d_model=768, d_k=d_v=48, 512x512", None),
                          ("h=16, d_model=768, d_k=d_v=256, 512x512", 256)):
        trace = big_trace(d_head)
        start = time.perf_counter()
        page = html_report(trace, title="bench")
        seconds = time.perf_counter() - start
        print(f"{label:<46} {seconds:8.2f} {len(page.encode()) / 1e6:8.2f}  {page.count('is left out: it would add')}")


def cli() -> None:
    print("\n## python -m mha_viz report\n")
    print(f"{'command':<72} {'exit':>4} {'seconds':>8} {'peak MB':>8}")
    widest = ["--heads", "16", "--d-model", "768", "--d-k", "256", "--d-v", "256", "--text", TEXT, "--context", CONTEXT]
    cases = {
        "--d-model 65536 --heads 1 --out r.html": ["--d-model", "65536", "--heads", "1", "--out", "r.html"],
        "--heads 4096 --d-model 4096 --out r.html": ["--heads", "4096", "--d-model", "4096", "--out", "r.html"],
        "h=16 d_model=768 d_k=d_v=256 512x512 --out --npz --json": [*widest, "--out", "r.html", "--npz", "t.npz",
                                                                     "--json", "t.json"],
        "  the same with --json-arrays base64": [*widest, "--npz", "t.npz", "--json", "t.json", "--json-arrays",
                                                 "base64"],
    }
    for label, args in cases.items():
        with tempfile.TemporaryDirectory() as folder:
            code = ("import resource, subprocess, sys, time; start = time.perf_counter();"
                    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode;"
                    "print(rc, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "mha_viz", "report", *args],
                                 check=True, capture_output=True, text=True, cwd=folder, env=env).stdout.split()
            files = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in sorted(Path(folder).iterdir()))
            print(f"{label:<72} {out[0]:>4} {float(out[1]):8.2f} {int(out[2]) / 1024:8.0f}  {files}")


def one_figure(fmt: str, before: str | None, calls: int = 4) -> dict:
    """Run in a fresh process: `calls` figures in fmt one after the other, each call's seconds."""
    import mha_viz
    from mha_viz.figures import heads_figure

    tokens = ["The", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "too", "tired"]
    fig = heads_figure(mha_viz.MultiHeadAttention(48, 4, seed=0)(mha_viz.embed_tokens(tokens, 48), query_tokens=tokens))
    paper = module_before("paper", before)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        paper.figure_bytes(fig, fmt)
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds}


def figures(before: str) -> None:
    print(f"\n## Figures for a paper: the first in a fresh process (cold) and the next 3 (warm; median) (before: {before})\n")
    print(f"{'code':<7} {'format':<6} {'first s':>8} {'next s':>8} {'first/next':>11}")
    for label, rev in (("before", before), ("after", None)):
        for fmt in ("svg", "pdf"):
            cmd = [sys.executable, __file__, "--one-figure", fmt] + (["--before", rev] if rev else [])
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
            if done.returncode:
                print(f"{label:<7} {fmt:<6} {done.stderr.strip().splitlines()[-1]}")
                continue
            first, *rest = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
            warm = sorted(rest)[len(rest) // 2]
            print(f"{label:<7} {fmt:<6} {first:8.2f} {warm:8.2f} {first / warm:11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git revision of the 'before' export module (default: merge-base HEAD main)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--copies", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--figures", action="store_true", help="only the figures for a paper (cold and warm)")
    parser.add_argument("--one-figure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.before, args.copies)))
        return
    if args.one_figure:
        print(json.dumps(one_figure(args.one_figure, args.before)))
        return
    before = args.before or git("merge-base", "HEAD", "main")
    print(f"# bench/bench_export.py at {git('rev-parse', '--short', 'HEAD')} (working tree"
          f"{' with changes' if git('status', '--porcelain', '--untracked-files=no') else ''}), "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.2f}; "
          f"peak RSS of this process so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.figures:
        figures(before)
        return
    exports(before)
    figures(before)
    sizes()
    reports()
    cli()
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
