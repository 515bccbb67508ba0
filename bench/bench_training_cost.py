"""What one training step costs, to budget Train pages on a public demo (mha_viz.serve.training_budget.training_seconds).

    python bench/bench_training_cost.py [--steps 300]

Trains the default task (and the three-relation task) at a few (h, d_model) points with one torch thread,
as a public demo does, and prints the CPU seconds per step (process time, so other jobs on the machine
change it little) next to what the cost model in mha_viz/serve/hosting.py predicts. Its constants come from
this script's output (bench/RESULTS-training-cost.md).
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from mha_viz.serve.training_budget import TRAIN_SECONDS_PER_STEP, training_seconds
from mha_viz.training import DEFAULT_TASK, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, {args.steps} steps a point, one thread")
    print(f"model now: {TRAIN_SECONDS_PER_STEP}")
    print("task              h  d_model  cpu s/step  wall s/step  model s/step")
    for task in (DEFAULT_TASK, "prev-2back-first"):
        for d_model in (8, 32, 128):
            for h in (1, 8):
                if d_model % h:
                    continue
                train(task, h, d_model, 20, seed=0)  # warm: first-call costs out of the measurement
                cpu, wall = time.process_time(), time.perf_counter()
                train(task, h, d_model, args.steps, seed=0)
                cpu, wall = (time.process_time() - cpu) / args.steps, (time.perf_counter() - wall) / args.steps
                model = training_seconds(h, d_model, args.steps) / args.steps
                print(f"{task:16s} {h:2d}  {d_model:7d}  {cpu * 1e3:8.2f} ms  {wall * 1e3:8.2f} ms  {model * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
