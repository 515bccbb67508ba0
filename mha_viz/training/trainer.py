"""Train the one-layer model on a task with Adam and record snapshots along the way.

    loss = mean over defined (b, t, r) of  -log softmax(logits[b, t, r])[y_r(t)]
         + diversity * head similarity (diversity.py; diversity 0, the default, leaves the loss as it is)
         + MOH_BALANCE * L_b               (mixture-of-heads layers only: the MoH paper's load-balance loss)
The attention layer is that of a LayerVariant (mha_viz.variants; default multi-head attention).
Each snapshot measures the model on a fixed evaluation batch (loss, accuracy per relation,
relation scores) and traces it on the task's fixed probe sequence.
Deterministic for a seed: the same arguments give identical losses and traces. A run given a time budget
(max_seconds of wall time on a monotonic clock, max_cpu_seconds of the training thread's CPU time) stops when it is
spent and returns what it reached, marked cut; that run alone depends on the machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import monotonic, perf_counter, thread_time

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..trace import AttentionTrace
from ..variants import LayerVariant
from .diversity import DIVERSITY_KINDS, head_similarity
from .layer import MHA, TrainedLayer
from .model import TinyAttentionModel
from .scores import relation_masks, relation_scores
from .tasks import IGNORE, Task, get_task

EVAL_SEED = 12_345
EVAL_BATCH = 128
MOH_BALANCE = 0.01  # weight of a variant's training loss term (Training.loss: MoH's load-balance loss), the paper's beta


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The model after `step` optimiser steps."""

    step: int
    loss: float  # evaluation cross-entropy
    accuracy: np.ndarray  # [R] evaluation accuracy per relation
    scores: np.ndarray  # [H, R] relation scores on the evaluation batch
    trace: AttentionTrace  # the probe sequence
    similarity: dict[str, float] = field(default_factory=dict)  # head similarity of each kind (diversity.py)

    @property
    def mean_accuracy(self) -> float:
        """Accuracy averaged over relations (each relation weighs the same)."""
        return float(self.accuracy.mean())


@dataclass(frozen=True, eq=False)
class TrainingRun:
    task: str
    num_heads: int
    d_model: int
    seed: int
    relations: tuple[str, ...]
    train_loss: np.ndarray  # [steps] loss on each optimiser step's batch
    snapshots: tuple[Snapshot, ...]  # step 0 (untrained) ... the last step
    seconds: float  # wall time of the training loop (the only field that varies between equal runs)
    final_state: dict[str, np.ndarray]  # the model's state_dict after the last step
    variant: LayerVariant = MHA  # the attention layer's variant
    diversity: float = 0.0  # weight of the head-diversity penalty in the loss
    diversity_kind: str = "outputs"  # what the penalty compares (diversity.DIVERSITY_KINDS)
    steps_asked: int | None = None  # the steps asked for (None: as many as were done)
    cut: bool = False  # stopped by its time budget before steps_asked: train_loss and the last snapshot end earlier

    @property
    def steps_done(self) -> int:
        """The optimiser steps taken (steps_asked unless the run was cut)."""
        return len(self.train_loss)

    @property
    def final(self) -> Snapshot:
        return self.snapshots[-1]

    @property
    def layer(self) -> TrainedLayer:
        """The trained model as a TrainedLayer (weights and final scores), to trace any sequence."""
        f = self.final
        return TrainedLayer(self.task, self.num_heads, self.d_model, self.seed, f.step, self.relations, f.loss,
                            f.accuracy, f.scores, self.final_state, self.variant, self.diversity, self.diversity_kind,
                            self.cut)

    @property
    def snapshot_steps(self) -> np.ndarray:
        return np.array([s.step for s in self.snapshots])


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with n torch threads (None: leave the setting alone), then restore the previous count."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.flatten(0, 2), targets.flatten(), ignore_index=IGNORE)  # logits (B, T, R, V)


def _accuracy(logits: Tensor, targets: Tensor) -> np.ndarray:
    defined = targets != IGNORE  # (B, T, R)
    correct = (logits.argmax(-1) == targets) & defined  # (B, T, R)
    return (correct.sum((0, 1)) / defined.sum((0, 1))).numpy()  # (R,)


def _batches(
    task: Task, steps: int, batch_size: int, generator: torch.Generator, chunk: int = 100
) -> Iterator[tuple[Tensor, Tensor]]:
    """`steps` training batches (tokens (B, T), targets (B, T, R)), sampled `chunk` steps at a time.

    One sample for many steps saves small ops per step (in an A/B run of 300 steps at h=4, d_model=64
    on the 2-core machine: best of 4, 1.6 s instead of 2.2 s).
    """
    for start in range(0, steps, chunk):
        n = min(chunk, steps - start)
        tokens = task.sample(n * batch_size, generator)  # (n*B, T)
        targets = task.targets(tokens)  # (n*B, T, R)
        yield from zip(tokens.unflatten(0, (n, batch_size)), targets.unflatten(0, (n, batch_size)))


def train(
    task: str | Task,
    num_heads: int,
    d_model: int,
    steps: int = 600,
    seed: int = 0,
    *,
    batch_size: int = 32,
    lr: float = 3e-3,
    num_snapshots: int = 30,
    threads: int | None = 1,
    on_step: Callable[[int], None] | None = None,
    variant: LayerVariant | None = None,
    diversity: float = 0.0,
    diversity_kind: str = "outputs",
    max_seconds: float | None = None,
    max_cpu_seconds: float | None = None,
) -> TrainingRun:
    """Train a fresh TinyAttentionModel for `steps` Adam steps, with snapshots at num_snapshots + 1
    evenly spaced steps from 0 to `steps` (fewer when steps < num_snapshots).

    threads: torch threads while training (1 by default: the matrices are tiny, and on the busy
    2-core machine of bench/RESULTS-training.md torch's default of 2 was several times slower).
    on_step(step) is called after every step.
    variant: the attention layer's LayerVariant (None: multi-head attention); ValueError if it cannot run at these
    dims (a mixture-of-heads layer also adds MOH_BALANCE times its router's load-balance loss). diversity ≥ 0 weighs the head-similarity penalty of kind diversity_kind ("outputs" or "maps") in the loss.
    max_seconds, max_cpu_seconds: a time budget (None: none), counted from the call: wall seconds on a monotonic clock,
    and CPU seconds of this thread (time.thread_time: the work of other threads and sessions is not counted; with
    threads > 1 torch's other threads are not either). Checked after every step: once either is spent the run stops
    (after at least one step), snapshots the model where it is, and returns it with cut=True.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if not (isinstance(diversity, (int, float)) and math.isfinite(diversity) and diversity >= 0):
        raise ValueError(f"diversity must be a number ≥ 0, got {diversity!r}")
    if diversity_kind not in DIVERSITY_KINDS:
        raise ValueError(f"diversity_kind must be one of {', '.join(DIVERSITY_KINDS)}, got {diversity_kind!r}")
    variant = variant or MHA
    spec = get_task(task) if isinstance(task, str) else task
    probe = spec.probe()  # (T,)
    names = spec.token_names(probe)
    eval_tokens = spec.sample(EVAL_BATCH, torch.Generator().manual_seed(EVAL_SEED))  # (N, T)
    eval_targets = spec.targets(eval_tokens)  # (N, T, R)
    eval_masks = relation_masks(spec.positions(eval_tokens).numpy(), spec.seq_len)  # (N, R, T, T)
    record = set(np.linspace(0, steps, num_snapshots + 1).round().astype(int).tolist())
    for name, limit in (("max_seconds", max_seconds), ("max_cpu_seconds", max_cpu_seconds)):
        if limit is not None and not (isinstance(limit, (int, float)) and not math.isnan(limit)):
            raise ValueError(f"{name} must be a number of seconds or None, got {limit!r}")
    wall_end = monotonic() + max_seconds if max_seconds is not None else math.inf
    cpu_end = thread_time() + max_cpu_seconds if max_cpu_seconds is not None else math.inf

    with torch_threads(threads):
        model = TinyAttentionModel(len(spec.vocab), spec.seq_len, d_model, num_heads, len(spec.relations), seed=seed,
                                   variant=variant)
        optimiser = torch.optim.Adam(model.parameters(), lr=lr, fused=True)

        @torch.no_grad()
        def snapshot(step: int) -> Snapshot:
            logits, att = model(eval_tokens)  # (N, T, R, V)
            return Snapshot(
                step=step,
                loss=float(_loss(logits, eval_targets)),
                accuracy=_accuracy(logits, eval_targets),
                scores=relation_scores(att.weights.numpy(), eval_masks),  # (H, R); diff: signed net mass, h/2 rows
                trace=model.trace(probe, names, {"task": spec.name, "step": step}),
                similarity={kind: float(head_similarity(att, kind)) for kind in DIVERSITY_KINDS},
            )

        snapshots = [snapshot(0)]
        losses = np.empty(steps, dtype=np.float32)
        cut = False
        start = perf_counter()
        batches = _batches(spec, steps, batch_size, torch.Generator().manual_seed(seed))
        extra = variant.spec.training.loss  # a variant's own loss term (MoH: its router's load balance), or None
        for step, (tokens, targets) in enumerate(batches, start=1):
            logits, att = model(tokens)  # (B, T, R, V)
            loss = _loss(logits, targets)
            if diversity:  # skipped at 0: the default run computes exactly what it did before the regulariser
                loss = loss + diversity * head_similarity(att, diversity_kind)
            if extra is not None:  # MoH: keeps the router from sending every token to the same heads
                loss = loss + MOH_BALANCE * extra(model, tokens, variant)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses[step - 1] = loss.item()
            cut = step < steps and (monotonic() >= wall_end or thread_time() >= cpu_end)
            if step in record or cut:
                snapshots.append(snapshot(step))
            if on_step is not None:
                on_step(step)
            if cut:
                losses = losses[:step]
                break
        seconds = perf_counter() - start
        state = {name: t.detach().numpy().copy() for name, t in model.state_dict().items()}
    return TrainingRun(spec.name, num_heads, d_model, seed, spec.relation_names, losses, tuple(snapshots), seconds, state,
                       variant, float(diversity), diversity_kind, steps, cut)
