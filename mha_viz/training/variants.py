"""What an attention variant costs in quality: train each variant on a task over several seeds and measure it.

    train_variant_grid(task, num_heads, d_model, steps, seeds)  -> [VariantRow]
A row holds, for one variant (and diversity weight): the mean accuracy of each seed's run on the trainer's evaluation
batch, the KV-cache bytes per token per layer of that layer (mha_viz.variants_cost, bf16), the redundancy of the
trained heads (mean pairwise Jensen-Shannon divergence of their maps on the probe, mha_viz.divergence) and
the head similarity the diversity regulariser penalises (diversity.py). The grid is every registered variant's
(mha_viz.variants.spec.Training.grid), so it grows as variants are added.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..config import MHAConfig
from ..divergence import head_divergence
from ..variants import VARIANTS, LayerVariant
from ..variants_cost import VariantShape, kv_bytes_per_token
from .trainer import TrainingRun, train

GRID_FILE = Path(__file__).parent / "precomputed" / "variants-grid.json"
KV_DTYPE_BYTES = 2  # bf16, as the Shapes & cost page counts


def variant_label(variant: LayerVariant, num_heads: int) -> str:
    """A short name, its spec's training label: MHA, GQA kv=2, MQA, MLA c=16, Window w=4 (logit sinks), Diff, MoH k=2."""
    return variant.spec.training.label(variant, num_heads)


def variant_shape(cfg: MHAConfig, variant: LayerVariant) -> VariantShape:
    """The VariantShape (mha_viz.variants_cost) of the layer variant_layer(cfg, variant) builds (without biases, as
    the trained layer has none in its cost)."""
    return variant.spec.shape(replace(cfg, bias=False, kv_heads=variant.spec.kv_heads(variant)), variant)


def grid_variants(num_heads: int) -> list[LayerVariant]:
    """The default grid at h heads: each registered variant's training grid (MHA, GQA at each kv_heads between 1 and
    h, MQA, MLA at latent widths 4, 8 and 16, window 2 and 4 with sink logits, diff, MoH with moh_k 1 and 2 without
    and with one shared head), each only where valid for h."""
    cfg = MHAConfig(8 * num_heads, num_heads)
    return [v for spec in VARIANTS.values() for v in spec.training.grid(num_heads) if _fits(v, cfg)]


def _fits(variant: LayerVariant, cfg: MHAConfig) -> bool:
    try:
        variant.check(cfg)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class VariantRow:
    """One variant (and diversity weight) trained over seeds; per-seed lists in the order of `seeds`."""

    task: str
    label: str
    kind: str
    params: dict[str, object]
    num_heads: int
    d_model: int
    steps: int
    diversity: float
    diversity_kind: str
    seeds: list[int]
    accuracy: list[float]  # mean accuracy over relations, per seed
    redundancy: list[float]  # mean pairwise JS divergence (bits) of the trained heads on the probe; NaN: not defined
    similarity: list[float]  # the head similarity of diversity_kind on the evaluation batch
    kv_bytes_per_token: int  # per layer, bf16

    @property
    def variant(self) -> LayerVariant:
        return LayerVariant(self.kind, **self.params)

    @property
    def accuracy_mean(self) -> float:
        return float(np.mean(self.accuracy))

    @property
    def accuracy_std(self) -> float:
        """Standard deviation over seeds (population, ddof 0)."""
        return float(np.std(self.accuracy))

    @property
    def redundancy_mean(self) -> float:
        r = np.asarray(self.redundancy, dtype=float)
        return float(np.nanmean(r)) if np.isfinite(r).any() else float("nan")


def mean_pairwise_divergence(run: TrainingRun) -> float:
    """Mean off-diagonal Jensen-Shannon divergence (bits) between the final heads' maps on the probe sequence;
    NaN with one head, or for differential attention, whose weights (map 1 - lambda map 2) are signed and so not
    distributions (even on a probe where none happens to be negative)."""
    return float("nan") if run.variant.spec.training.signed else mean_divergence(run.final.trace.weights)


def mean_divergence(weights: np.ndarray) -> float:
    """weights [H, T, S] -> mean off-diagonal entry of head_divergence (bits); NaN with one head or signed weights."""
    w = np.asarray(weights)
    if len(w) < 2 or (w < 0).any():
        return float("nan")
    D = head_divergence(w)
    return float(D[~np.eye(len(D), dtype=bool)].mean())


def train_variant_grid(
    task: str, num_heads: int, d_model: int, steps: int, seeds: Sequence[int] = (0, 1, 2), *,
    variants: Sequence[LayerVariant] | None = None, diversities: Sequence[float] = (0.0,),
    diversity_kind: str = "outputs", diversity_variants: Sequence[str] = ("mha",),
    on_run: Callable[[VariantRow, int], None] | None = None,
) -> list[VariantRow]:
    """Train every variant (default grid_variants(num_heads)) for each seed; each variant whose kind is in
    diversity_variants also with each positive diversity weight. on_run(row, seed) after every finished row's seed
    loop (for progress)."""
    cfg = MHAConfig(d_model, num_heads)
    rows = []
    for variant in variants if variants is not None else grid_variants(num_heads):
        variant.check(cfg)
        weights = [w for w in diversities if w == 0 or variant.kind in diversity_variants]
        for weight in weights:
            runs = [train(task, num_heads, d_model, steps, seed, variant=variant, diversity=weight,
                          diversity_kind=diversity_kind, num_snapshots=1) for seed in seeds]
            row = VariantRow(
                task, variant_label(variant, num_heads), variant.kind, variant.params(), num_heads, d_model, steps,
                float(weight), diversity_kind, list(seeds), [r.final.mean_accuracy for r in runs],
                [mean_pairwise_divergence(r) for r in runs], [r.final.similarity[diversity_kind] for r in runs],
                kv_bytes_per_token(variant_shape(cfg, variant), KV_DTYPE_BYTES))
            rows.append(row)
            if on_run is not None:
                on_run(row, len(rows))
    return rows


def rows_to_json(rows: Sequence[VariantRow]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=1, allow_nan=True) + "\n"


def rows_from_json(text: str) -> list[VariantRow]:
    return [VariantRow(**r) for r in json.loads(text)]


def precomputed_variant_grid() -> list[VariantRow]:
    """The grid bench/bench_variants_training.py measured and shipped with the package ([] if none is shipped)."""
    return rows_from_json(GRID_FILE.read_text()) if GRID_FILE.is_file() else []
