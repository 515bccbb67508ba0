"""Train every task for h in {1, 2, 4} over several seeds; print loss, accuracy, relation scores, time.

    python bench/bench_training.py [--d-model 64] [--steps 600] [--seeds 3]

Relation scores: for each head, the attention mass it puts on each relation's keys (one row of the
[H, R] score matrix; relations in the order of the section header). Times are the training loop's
wall time. The timing tables: the train page's two runs (h heads and one head) with one torch
thread (train()'s default) and, for d_model 32, torch's default thread count; then the whole train
page (mha_viz.ui.training.training_page in Streamlit's AppTest, nothing cached: both runs, figures).
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
from time import perf_counter

import numpy as np
import torch

from mha_viz.training import DEFAULT_TASK, TASKS, train
from mha_viz.training.trainer import EVAL_BATCH


def fmt_scores(scores: np.ndarray) -> str:
    return " | ".join(f"head{h} " + "/".join(f"{v:.2f}" for v in row) for h, row in enumerate(scores))


def train_page_app() -> None:
    """The train page alone, driven by AppTest (settings come in through session_state)."""
    import streamlit as st

    from mha_viz.ui.training import training_page

    s = st.session_state
    training_page(s["h"], s["d_model"], s["steps"], s["seed"], s["task"])


def page_seconds(h: int, d_model: int, steps: int, seed: int) -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(train_page_app, default_timeout=600)
    for key, value in {"task": DEFAULT_TASK, "h": h, "d_model": d_model, "steps": steps, "seed": seed}.items():
        at.session_state[key] = value
    start = perf_counter()
    at.run()
    if at.exception:
        raise RuntimeError(at.exception[0].message)
    return perf_counter() - start


def load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    defaults = {k: p.default for k, p in inspect.signature(train).parameters.items()}
    print(f"torch {torch.__version__}, {platform.machine()}, os.cpu_count()={os.cpu_count()}, "
          f"torch default threads={torch.get_num_threads()}, {load()}")
    print(f"d_model={args.d_model}, steps={args.steps}, batch {defaults['batch_size']}, Adam lr {defaults['lr']}; "
          f"loss and accuracy on {EVAL_BATCH} fixed evaluation sequences")
    start = perf_counter()
    train(DEFAULT_TASK, 1, 16, 5)
    first = perf_counter() - start
    print(f"first train() call in this process (5 steps; torch.optim imports torch._dynamo): {first:.2f} s\n")

    for name, task in TASKS.items():
        print(f"## {name}: relations {' / '.join(task.relation_names)}")
        print(f"{'h':>2} {'seed':>4} {'loss':>7} {'acc':>6}  {'acc per relation':<22} {'time s':>6}  scores per head")
        summary: dict[int, list[tuple[float, float]]] = {}
        for h in (1, 2, 4):
            for seed in range(args.seeds):
                run = train(name, h, args.d_model, args.steps, seed)
                f = run.final
                summary.setdefault(h, []).append((f.loss, f.mean_accuracy))
                per_rel = " ".join(f"{a:.3f}" for a in f.accuracy)
                print(f"{h:>2} {seed:>4} {f.loss:7.4f} {f.mean_accuracy:6.3f}  {per_rel:<22} {run.seconds:6.2f}  "
                      f"{fmt_scores(f.scores)}")
        for h, rows in summary.items():
            loss, acc = np.array(rows).T
            print(f"   h={h}: mean loss {loss.mean():.4f}, mean accuracy {acc.mean():.3f} over {len(rows)} seeds")
        print()

    print(f"## the train page's two runs ({DEFAULT_TASK}, {args.steps} steps, seed 0): h heads + one head; {load()}")
    print(f"{'threads':>12} {'d_model':>7} {'h':>2} {'h-run s':>7} {'1-run s':>7} {'total s':>7}")
    configs = {1: ((32, 2), (64, 2), (64, 4)), None: ((32, 2),)}  # default threads can take minutes on a busy machine
    for threads, sizes in configs.items():
        for d_model, h in sizes:
            many = train(DEFAULT_TASK, h, d_model, args.steps, 0, threads=threads)
            one = train(DEFAULT_TASK, 1, d_model, args.steps, 0, threads=threads)
            label = "1" if threads else f"{torch.get_num_threads()} (default)"
            total = many.seconds + one.seconds
            print(f"{label:>12} {d_model:>7} {h:>2} {many.seconds:7.2f} {one.seconds:7.2f} {total:7.2f}")
    print(load())

    print(f"\n## the whole train page in AppTest ({DEFAULT_TASK}, {args.steps} steps, fresh seeds: nothing cached)")
    for d_model, h in ((32, 2), (64, 4)):
        times = [page_seconds(h, d_model, args.steps, seed) for seed in (100, 101, 102)]
        print(f"h={h} d_model={d_model}: " + ", ".join(f"{t:.2f} s" for t in times) + f"; {load()}")


if __name__ == "__main__":
    main()
