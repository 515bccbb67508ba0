"""Train every registered attention variant on the multi-relation tasks over several seeds; print accuracy (mean ±
standard deviation over seeds), KV-cache bytes per token per layer, redundancy and head similarity of the trained heads,
and write them to bench/RESULTS-variants-training.md.

    python bench/bench_variants_training.py [--h 4] [--d-model 32] [--steps 150 300] [--seeds 3]
        [--diversity 0 0.3 1] [--diversity-kind outputs] [--diversity-variants mha] [--tasks ...] [--ship]

The variants (mha_viz.training.variants.grid_variants): MHA, GQA at each kv_heads, MQA, MLA with kv_latent 4, 8 and 16,
window 2 and 4 with sink logits, diff, and MoH with moh_k 1 and 2, without and with one shared head. The positive
diversity weights are trained on the kinds of --diversity-variants (MHA by default; the regulariser of Li et al. 2018,
mha_viz.training.diversity). A mixture-of-heads layer adds its router's load-balance loss with weight
mha_viz.training.trainer.MOH_BALANCE. Each task is trained for each budget of steps (a short budget shows what a
variant costs in speed of learning; a long one, whether it gets there). The defaults take about 9 minutes on the
2-core machine (15 rows x 3 seeds x 3 tasks x 2 budgets).
--ship also writes the rows of the first task and budget as mha_viz/training/precomputed/variants-grid.json, the grid
the app's figure shows. The file's hand-written reading (between the READING markers) is kept on a re-run; everything
else is regenerated.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from pathlib import Path
from time import perf_counter

import torch

from mha_viz.training import TASKS
from mha_viz.training.trainer import MOH_BALANCE
from mha_viz.training.variants import GRID_FILE, KV_DTYPE_BYTES, VariantRow, rows_to_json, train_variant_grid

RESULTS = Path(__file__).parent / "RESULTS-variants-training.md"
READING = ("<!-- reading: written by hand, kept as it is when the script rewrites the file -->", "<!-- /reading -->")
MULTI = [name for name, task in TASKS.items() if len(task.relations) > 1]


def fmt(value: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def table(rows: list[VariantRow]) -> list[str]:
    lines = [("| variant | diversity | accuracy (mean ± sd) | per seed | KV bytes / token / layer | redundancy (JS, bits) "
              "| head similarity |"), "|---|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        sim = sum(r.similarity) / len(r.similarity)
        lines.append(f"| {r.label} | {r.diversity:g} | {r.accuracy_mean:.3f} ± {r.accuracy_std:.3f} | "
                     + " ".join(f"{a:.3f}" for a in r.accuracy)
                     + f" | {r.kv_bytes_per_token} | {fmt(r.redundancy_mean)} | {sim:.3f} |")
    return lines


def hand_written_reading(path: Path) -> str:
    """The hand-written reading between the READING markers of the results file (a placeholder if there is none)."""
    text = path.read_text() if path.is_file() else ""
    start, end = text.find(READING[0]), text.find(READING[1])
    if start < 0 or end < start:
        return "(No reading yet: write one from the output below.)"
    return text[start + len(READING[0]):end].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--h", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--steps", type=int, nargs="+", default=[150, 300])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--diversity", type=float, nargs="+", default=[0.0, 0.3, 1.0])
    parser.add_argument("--diversity-kind", choices=("outputs", "maps"), default="outputs")
    parser.add_argument("--diversity-variants", nargs="+", default=["mha"], help="kinds trained with each weight")
    parser.add_argument("--tasks", nargs="+", choices=MULTI, default=MULTI)
    parser.add_argument("--ship", action="store_true", help="write the first task's rows as the app's shipped grid")
    args = parser.parse_args()
    machine = (f"torch {torch.__version__}, {platform.machine()}, os.cpu_count()={os.cpu_count()}, "
               f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    settings = (f"h={args.h}, d_model={args.d_model}, steps {' and '.join(map(str, args.steps))}, seeds "
                f"0-{args.seeds - 1}, diversity {' '.join(f'{w:g}' for w in args.diversity)} on {args.diversity_kind} "
                f"({', '.join(args.diversity_variants)}), KV cache in bf16 ({KV_DTYPE_BYTES} bytes a number)")
    out = [machine, settings, ""]
    print("\n".join(out), flush=True)
    shipped = None
    for steps in args.steps:
        for task in args.tasks:
            start = perf_counter()
            rows = train_variant_grid(task, args.h, args.d_model, steps, range(args.seeds),
                                      diversities=args.diversity, diversity_kind=args.diversity_kind,
                                      diversity_variants=args.diversity_variants)
            block = [f"### {task} ({' / '.join(TASKS[task].relation_names)}), {steps} steps", "", *table(rows), "",
                     f"({len(rows)} rows x {args.seeds} seeds in {perf_counter() - start:.0f} s)", ""]
            print("\n".join(block), flush=True)
            out += block
            shipped = shipped or rows
    command = " ".join(["bench/bench_variants_training.py", *sys.argv[1:]])
    header = ["# What an attention variant costs in quality: trained variants", "",
              (f"`python {command}`, run once on the machine of RESULTS-training.md (2 shared cores); everything under "
               "Output is what the script printed."), "",
              ("- accuracy: mean accuracy over relations on the trainer's 128 fixed evaluation sequences after the "
               "last step; mean ± standard deviation over seeds, then each seed's."),
              "- KV bytes / token / layer: what one token adds to one layer's KV cache (mha_viz.variants_cost, bf16).",
              ("- redundancy: mean pairwise Jensen-Shannon divergence (bits, 0 = identical maps, 1 = disjoint) of the "
               "trained heads on the task's probe sequence (mha_viz.analysis.redundancy); higher = less redundant; n/a for "
               "Diff, whose weights are signed (not distributions)."),
              ("- head similarity: the quantity the diversity regulariser penalises (mean pairwise cosine of head "
               "outputs, or overlap of maps) on the evaluation batch."),
              (f"- MoH layers train with their router's load-balance loss added at weight {MOH_BALANCE:g} "
               "(mha_viz.training.trainer.MOH_BALANCE)."), "",
              "## Reading (hand-written; check it against the output after a re-run)", "", READING[0],
              hand_written_reading(RESULTS), READING[1], "", "## Output", ""]
    RESULTS.write_text("\n".join(header + out))
    print(f"wrote {RESULTS}")
    if args.ship and shipped:
        GRID_FILE.write_text(rows_to_json(shipped))
        print(f"wrote {GRID_FILE}")


if __name__ == "__main__":
    main()
