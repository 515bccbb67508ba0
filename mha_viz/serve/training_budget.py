"""What a page's training costs, on this machine: the estimate a public demo's Budget cuts steps by, and the share
of the page's time budget each of its training runs is stopped at.

    seconds of one run   = TRAIN_SECONDS_PER_RUN + steps * ((fixed + per_head * h) * c.fixed * v_fixed
                            + per_d_model_squared * width * c.width * v_width) * (penalty factor if diversity > 0)
    v_fixed, v_width     = the variant's Training.step_cost: what its step costs beyond its weights (1, 1 for MHA and GQA)
    width                = the attention layer's weights / 4 (d_model² for multi-head attention; a variant's own widths:
                           MLA's kv_latent, q_latent and rope_dim, GQA's fewer key/value heads, MoH's router, ...)
    c                    = the Calibration: this machine's measured step cost against the constants (fitted elsewhere)
A page runs what it shows: Train mode's Training view trains h heads and one head; trained weights train the layer,
plus h = 1 for the accuracy-by-h chart (multi-head attention without penalty, Heads view) and, with a diversity
penalty, the same layer without it (the comparison's second run).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from time import thread_time

from ..params import VIEWS, ViewState
from ..variants import LayerVariant

# What one training step costs, in CPU seconds on one torch thread (a public demo's setting): a fixed part (the
# optimiser, autograd, the batch), a part per head and one growing with d_model squared (the projections), plus
# the run's 31 evaluation snapshots. Least-squares fit of 24 points of bench/bench_training_cost.py (two runs, two
# tasks, h 1 and 8, d_model 8, 32 and 128, 300 steps each) on the 2-core AMD EPYC of bench/RESULTS-training-cost.md,
# rounded; every point within 30 % of it, most within 15 %. A step's tokens are the tasks' batch of 32 sequences of
# 10 tokens, the same for every task and setting: they are in the fixed part. calibrate() rescales it on this machine.
TRAIN_SECONDS_PER_STEP = {"fixed": 2.1e-3, "per_head": 0.3e-3, "per_d_model_squared": 1.7e-7}
TRAIN_SECONDS_PER_RUN = 0.1
DIVERSITY_STEP_FACTOR = 1.3  # a step with the head-diversity penalty against one without (its similarity and gradient)
TIME_SLACK = 1.5  # a run's wall-clock budget against its CPU budget (a busy machine gives the trainer less than a core)


@dataclass(frozen=True)
class Calibration:
    """This machine's training step against TRAIN_SECONDS_PER_STEP's: a factor on its fixed and per-head part and one
    on its width part (1, 1: as on the machine the constants were fitted on)."""

    fixed: float = 1.0
    width: float = 1.0


UNCALIBRATED = Calibration()
PROBES = ((2, 16, 24), (2, 256, 10))  # (h, d_model, steps) measured: a step's fixed part, then its width part
CALIBRATION_RANGE = (0.2, 10.0)  # a measured factor outside it is clamped (a probe disturbed by a burst of load)
_measured: list[Calibration] = []  # this process's calibration, once measured
_calibrating = threading.Lock()


def layer_width(h: int, d_model: int, variant: LayerVariant | None = None) -> float:
    """The attention layer's weights / 4: d_model² for multi-head attention, a variant's own count otherwise (the
    projections' share of a step grows with it). A variant that cannot run at these dims counts as multi-head."""
    if variant is None or variant.kind == "mha":
        return float(d_model**2)
    from ..config import MHAConfig
    from ..training.variants import variant_shape
    from ..variants_cost import parameters

    try:
        cfg = MHAConfig(d_model, h)
        variant.check(cfg)
        return sum(parameters(variant_shape(cfg, variant)).values()) / 4
    except ValueError:
        return float(d_model**2)


def step_seconds(h: int, d_model: int, variant: LayerVariant | None = None, diversity: float = 0.0,
                 calibration: Calibration = UNCALIBRATED) -> float:
    """Estimated CPU seconds of one training step (one torch thread)."""
    c = TRAIN_SECONDS_PER_STEP
    on_fixed, on_width = variant.spec.training.step_cost if variant is not None else (1.0, 1.0)
    step = ((c["fixed"] + c["per_head"] * h) * calibration.fixed * on_fixed
            + c["per_d_model_squared"] * layer_width(h, d_model, variant) * calibration.width * on_width)
    return step * (DIVERSITY_STEP_FACTOR if diversity and h > 1 else 1.0)


def training_seconds(h: int, d_model: int, steps: int, variant: LayerVariant | None = None, diversity: float = 0.0,
                     calibration: Calibration = UNCALIBRATED) -> float:
    """Estimated CPU seconds of one training run of steps Adam steps with h heads at d_model (one torch thread)."""
    return TRAIN_SECONDS_PER_RUN * calibration.fixed + steps * step_seconds(h, d_model, variant, diversity, calibration)


def state_variant(state: ViewState) -> LayerVariant:
    """The page state's attention variant, with the parameters its kind reads."""
    return LayerVariant.of(state)


def page_runs(state: ViewState) -> list[tuple[int, LayerVariant | None, float]]:
    """The training runs (h, variant, diversity) a page asks for, at its d_model and steps (see the module docstring;
    a view its mode does not offer opens the mode's first). Runs a page finds cached or shipped cost less: this
    counts them all."""
    if state.mode == "Train":
        if state.view in VIEWS.menu("Train") and not VIEWS.part(state.view).can("trains"):  # the plain h-head layer
            return [(state.h, None, 0.0)]
        return [(state.h, state_variant(state), state.diversity)] + ([(1, None, 0.0)] if state.h > 1 else [])
    if state.mode == "Configurable" and state.weights == "trained":
        variant = state_variant(state)
        runs = [(state.h, variant, state.diversity)]
        if state.diversity:
            runs.append((state.h, variant, 0.0))  # what the penalty did: the same layer trained without it
        elif variant.kind == "mha" and state.h > 1 and state.view not in VIEWS.menu("Configurable")[1:]:  # Heads
            runs.append((1, None, 0.0))  # the accuracy-by-h chart: h = 1 beside this h
        return runs
    return []


def page_training_seconds(state: ViewState, calibration: Calibration = UNCALIBRATED) -> float:
    """Estimated CPU seconds of all the training a page asks for (page_runs)."""
    return sum(training_seconds(h, state.d_model, state.steps, variant, diversity, calibration)
               for h, variant, diversity in page_runs(state))


def steps_within(state: ViewState, seconds: float, calibration: Calibration = UNCALIBRATED) -> int:
    """The most steps (at least 1) whose page_training_seconds fit in seconds: the cost is affine in steps."""
    fixed = page_training_seconds(replace(state, steps=0), calibration)
    per_step = page_training_seconds(replace(state, steps=1), calibration) - fixed
    return max(1, int((seconds - fixed) / per_step)) if per_step > 0 else state.steps


def measure_step(h: int, d_model: int, steps: int) -> float:
    """CPU seconds (this thread's) of one training step at h, d_model, measured over a short run (its first steps,
    which warm up, and its last, which snapshots, left out)."""
    from ..training import train

    marks: list[float] = []
    train("prev-first", h, d_model, steps, num_snapshots=1, on_step=lambda _: marks.append(thread_time()))
    return (marks[-2] - marks[2]) / (len(marks) - 4)


def measure_calibration(measure: Callable[[int, int, int], float] = measure_step) -> Calibration:
    """This machine's Calibration from the PROBES' measured step costs (measure(h, d_model, steps) -> seconds a step)."""
    (h, small, n_small), (h2, large, n_large) = PROBES
    c = TRAIN_SECONDS_PER_STEP
    fixed_part = measure(h, small, n_small)
    fixed = fixed_part / (c["fixed"] + c["per_head"] * h + c["per_d_model_squared"] * small**2)
    width_part = measure(h2, large, n_large) - fixed_part * (c["fixed"] + c["per_head"] * h2) / (
        c["fixed"] + c["per_head"] * h + c["per_d_model_squared"] * small**2)
    width = width_part / (c["per_d_model_squared"] * large**2)
    lo, hi = CALIBRATION_RANGE
    clamp = lambda x: min(hi, max(lo, x)) if math.isfinite(x) else 1.0
    return Calibration(clamp(fixed), clamp(width))


def calibrate(measure: Callable[[int, int, int], float] = measure_step) -> Calibration:
    """This process's Calibration: measured once (well under a second), then kept (calibration() returns it)."""
    with _calibrating:
        if not _measured:
            _measured.append(measure_calibration(measure))
        return _measured[0]


def calibration() -> Calibration:
    """The Calibration calibrate() measured in this process, or UNCALIBRATED before it has run (nothing measured)."""
    return _measured[0] if _measured else UNCALIBRATED


def set_calibration(value: Calibration | None) -> None:
    """Use value as this process's Calibration (None: forget it, the next calibrate() measures again); for tests
    and for operators who measured their machine."""
    with _calibrating:
        _measured.clear()
        if value is not None:
            _measured.append(value)


@dataclass(frozen=True)
class RunBudget:
    """The time one training run may take: CPU seconds of its thread and wall seconds (TIME_SLACK times more)."""

    cpu_seconds: float
    wall_seconds: float


def run_budget(page_seconds: float, spent: float) -> RunBudget:
    """What a run may take when its page may train for page_seconds of CPU and its earlier runs took spent seconds
    (wall time, at least their CPU time): the rest, and TIME_SLACK times the page's seconds of wall time in all."""
    return RunBudget(page_seconds - spent, page_seconds * TIME_SLACK - spent)
