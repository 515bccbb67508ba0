"""Train mode: train a one-layer model in seconds and watch its heads split the task's relations."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import monotonic
from typing import TypeVar

import numpy as np
import streamlit as st

from ..analysis.redundancy import redundancy
from ..config import MHAConfig
from ..figures.analysis import divergence_figure
from ..figures.training import (
    accuracy_by_heads_figure,
    accuracy_vs_cache_figure,
    curves_figure,
    heads_at_step_figure,
    heads_through_training_figure,
    relation_scores_figure,
)
from ..parts import bounds
from ..serve.hosting import FULL_SIZE
from ..serve.training_budget import UNCALIBRATED, Calibration, calibration, run_budget, training_seconds
from ..trace import AttentionTrace
from ..training import DEFAULT_TASK, TASKS, TrainedLayer, TrainingRun, train
from ..training.isolated import train_isolated
from ..training.layer import MHA
from ..training.precomputed import precomputed_layer
from ..training.variants import mean_divergence, precomputed_variant_grid, variant_label
from ..variants import LayerVariant
from .cache import shared_cache
from .controls import (
    TRAINED_D_MODELS,
    _keep_heads_valid,
    explain_invalid_heads,
    head_choices,
    heads_slider,
    variant_controls,
)
from .fair import heavy
from .state import confine, keep, put, take, widget
from .state import value as field_value
from .style import column_width
from .views import WhileHeld, chart

SAME = 0.01  # accuracies closer than this count as "about as well"
REPLAY_SECONDS = 0.4  # between two snapshots while the replay plays
RERUN_PAGE = "_train_rerun_page"  # session key: the replay's next run reruns the whole page
PLAY_FROM_START = "_train_play_from_start"  # session key (+ the run's name): the first playing run shows the first
T = TypeVar("T")


@contextmanager
def progress_bar(what: str, steps: int) -> Iterator[Callable[[int], None]]:
    """A progress bar while `what` trains for `steps` steps; yields the on_step callback that moves it."""
    bar = st.progress(0.0, text=f"Training {what}…")
    every = max(1, steps // 40)

    def on_step(step: int) -> None:
        if step % every == 0 or step == steps:
            bar.progress(step / steps, text=f"Training {what}: step {step} of {steps}")

    try:
        yield on_step
    finally:
        bar.empty()


STOPPED = "_stopped_trainings"  # session key: the trainings this session stopped


def stoppable(key: tuple, train: Callable[[], T]) -> T | None:
    """train() with a Stop button above it; None (and a way to start again) once this session has stopped it.

    A click on Stop reruns the page, which interrupts the training at its next progress update
    (Streamlit stops a run at its next element), so no other work waits for it.
    """
    stopped = keep(STOPPED, set)
    if key in stopped:
        st.info("Training stopped. Change a setting, or train this one again.")
        st.button("Train again", key=f"train_again_{abs(hash(key))}", on_click=stopped.discard, args=(key,),
                  icon=":material/play_arrow:")
        return None
    slot = st.empty()
    slot.button("Stop training", key=f"stop_{abs(hash(key))}", on_click=stopped.add, args=(key,), icon=":material/stop:")
    try:
        return train()  # a run that has to train takes the heavy turn itself (_budgeted); a cached one does not
    finally:
        slot.empty()


_page = threading.local()  # this script run's training budget (set_training_budget); each session runs in its thread


def set_training_budget(seconds: float | None, machine: Calibration = UNCALIBRATED) -> None:
    """The CPU seconds this run's page may spend training (a public demo's max_training_seconds; None: no limit),
    and this machine's Calibration for the estimates: the page's training runs share it, each stopped when the
    page's time is spent (run_budget)."""
    _page.budget = None if seconds is None else (seconds, machine)
    _page.spent = 0.0


@contextmanager
def _budgeted(h: int, d_model: int, steps: int, variant: LayerVariant | None, diversity: float
              ) -> Iterator[dict[str, float]]:
    """One training run as heavy work (fair.heavy with its estimate; light when that is small), yielding train()'s
    time-budget arguments: what is left of the page's (none without a page budget)."""
    page = getattr(_page, "budget", None)
    estimate = training_seconds(h, d_model, steps, variant, diversity, calibration() if page is None else page[1])
    share = None if page is None else run_budget(page[0], _page.spent)
    with heavy("Training", estimate, None if share is None else max(0.0, share.wall_seconds)):
        started = monotonic()
        try:
            yield {} if share is None else {"max_seconds": share.wall_seconds, "max_cpu_seconds": share.cpu_seconds}
        finally:
            if page is not None:
                _page.spent += monotonic() - started


def budget_notice(what: str, reached: int, asked: int, loss: float, accuracy: float) -> None:
    """Say that a training run was stopped at the demo's time budget, and what it reached."""
    st.warning(f"Training {what} was stopped at this demo's time budget: it reached step {reached} of {asked} (loss "
               f"{loss:.4f}, mean accuracy {accuracy:.1%} there), and what follows shows the model as it was then. "
               f"To {FULL_SIZE}.", icon=":material/timer_off:")


_isolated = False  # train in child processes (a public demo: page.py calls train_in_child_processes())


def train_in_child_processes() -> None:
    """From now on, this server trains in child processes (mha_viz.training.isolated): a training run then
    never holds the interpreter that every other session's page needs."""
    global _isolated
    _isolated = True


def _train(task: str, h: int, d_model: int, steps: int, seed: int, on_step: Callable[[int], None],
           **options: object) -> TrainingRun:
    """train() (in the worker process when isolated); options: its variant, diversity and diversity_kind."""
    run = train_isolated if _isolated else train
    return run(task, h, d_model, steps, seed, on_step=on_step, **options)


def _cached_training(key: tuple, h: int, d_model: int, steps: int, variant: LayerVariant, diversity: float,
                     what: str, run: Callable[[Callable[[int], None], dict[str, float]], T]) -> T:
    """The shared cache's value for key, or run(on_step, time limits) with a progress bar, as heavy work (_budgeted).

    The heavy turn is taken before the cache computes, never while it holds the key: a request waiting for the turn
    then keeps nobody who holds the turn waiting for that key."""
    cache = shared_cache()
    if key in cache:
        found = cache.peek(key)
        if found is not None:
            return found
    with _budgeted(h, d_model, steps, variant, diversity) as limits, progress_bar(what, steps) as on_step:
        return cache.get(key, lambda: run(on_step, limits))


def trained_run(task: str, h: int, d_model: int, steps: int, seed: int, variant: LayerVariant = MHA,
                diversity: float = 0.0) -> TrainingRun:
    """One training run, kept in the shared cache on its plain arguments; shows a progress bar while it trains."""
    options = {} if variant == MHA and not diversity else {"variant": variant, "diversity": diversity}
    return _cached_training(("training run", task, h, d_model, steps, seed, variant, diversity), h, d_model, steps,
                            variant, diversity, f"h = {h}",
                            lambda on_step, limits: _train(task, h, d_model, steps, seed, on_step, **limits, **options))


def cached_trained_layer(task: str, h: int, d_model: int, steps: int, seed: int,
                         variant: LayerVariant = MHA, diversity: float = 0.0) -> TrainedLayer:
    """The trained layer for these arguments (the attention variant, the head-diversity penalty on head outputs):
    shipped with the package, or trained now with a progress bar (kept in the shared cache)."""
    plain = variant == MHA and not diversity
    if plain:  # read (and checked against its sha256) once
        shipped = shared_cache().get(("shipped layer", task, h, d_model, seed, steps),
                                     lambda: precomputed_layer(task, h, d_model, seed, steps))
        if shipped is not None:
            return shipped
    options = {} if plain else {"variant": variant, "diversity": diversity}
    return _cached_training(
        ("trained layer", task, h, d_model, steps, seed, variant, diversity), h, d_model, steps, variant, diversity,
        f"h = {h}, d_model = {d_model} on {TASKS[task].title}",
        lambda on_step, limits: _train(task, h, d_model, steps, seed, on_step, **limits, **options).layer)


def who_takes_what(scores: np.ndarray, relations: tuple[str, ...]) -> str:
    """Final relation scores [H, R] in words: which head puts most attention on each relation."""
    if scores.shape[0] == 1:
        masses = ", ".join(f"{r} {v:.2f}" for r, v in zip(relations, scores[0]))
        return f"Attention mass of the one head: {masses}."
    best = scores.argmax(0).tolist()  # (R,) the top head of each relation
    parts = [f"{r}: head {b} ({scores[b, i]:.2f})" for i, (r, b) in enumerate(zip(relations, best))]
    shared = [
        f" Head {b} is the top head of " + " and ".join(r for r, top in zip(relations, best) if top == b) + "."
        for b in sorted(set(best)) if best.count(b) > 1
    ]
    return "Attention mass of the top head per relation: " + "; ".join(parts) + "." + "".join(shared)


def accuracy_by_heads(layer: TrainedLayer, name: str) -> None:
    """Accuracy for every h the slider offers at this d_model (those trained or shipped so far), this h marked."""
    choices = head_choices(layer.d_model)
    seen = keep("_trained_heads", dict).setdefault(
        (layer.task, layer.d_model, layer.seed, layer.steps), {1})  # the h this session has trained: cache hits
    seen.add(layer.num_heads)
    known = [cached_trained_layer(layer.task, h, layer.d_model, layer.steps, layer.seed) for h in choices
             if h in seen or precomputed_layer(layer.task, h, layer.d_model, layer.seed, layer.steps)]  # h = 1: seconds
    chart(accuracy_by_heads_figure(known, layer.num_heads), "accuracy_by_heads", f"{name}-accuracy-by-h")
    st.caption(f"Mean accuracy on the task after {layer.steps} steps, for each h at d_model = {layer.d_model} "
               f"(seed {layer.seed}); this h in red. Hover a bar for each relation's top head.")
    for k in known:
        if k.cut:
            st.caption(f"h = {k.num_heads} was stopped at this demo's time budget after {k.steps} of {layer.steps} "
                       "steps: its bar shows the accuracy it had reached.")
    missing = [h for h in choices if h not in {k.num_heads for k in known}]
    if missing:
        st.caption(f"Drag h to {', '.join(map(str, missing))} to train and add {'it' if len(missing) == 1 else 'them'}.")

def diversity_effect(layer: TrainedLayer, trace: AttentionTrace, sequence: str, name: str) -> None:
    """With a head-diversity penalty: this layer's redundancy matrix beside the same layer trained without it (cached),
    on the same sequence, each with its mean Jensen-Shannon divergence and accuracy."""
    if not layer.diversity:
        return
    st.markdown("**What the head-diversity penalty did**")
    if layer.variant.spec.training.signed:
        st.info(f"The {layer.variant.spec.name} layer's heads have signed weights, which are not "
                "distributions: the Jensen-Shannon redundancy matrix is not defined for them.")
        return
    if len(trace.weights) < 2:
        st.caption("One head has no other head to differ from: pick h ≥ 2 to see the penalty's effect.")
        return
    base = cached_trained_layer(layer.task, layer.num_heads, layer.d_model, layer.steps, layer.seed, layer.variant, 0.0)
    if base.cut:
        st.caption(f"The layer without the penalty was stopped at this demo's time budget after {base.steps} steps.")
    base_trace = base.trace(sequence or None)
    columns = st.columns(2)
    for column, (what, trained, weights) in zip(columns, (
            ("without the penalty", base, base_trace.weights),
            (f"with penalty {layer.diversity:g}", layer, trace.weights))):
        fig = divergence_figure(redundancy(weights))
        fig.update_layout(title={"text": f"{what}: mean JSD {mean_divergence(weights):.3f} bits,"
                                          f"<br>accuracy {trained.mean_accuracy:.1%}"}, width=column_width(0.5))
        with column:
            chart(fig, f"diversity_redundancy_{0 if trained is base else 1}",
                  f"{name}-redundancy-{'plain' if trained is base else 'diverse'}")
    st.caption(f"The same layer ({layer.task}, h = {layer.num_heads}, seed {layer.seed}, {layer.steps} steps) trained "
               f"without and with the penalty on head {layer.diversity_kind}: Jensen-Shannon divergence between each "
               "pair of heads' attention on this sequence (0 bits = identical, 1 = disjoint; the Redundancy section's "
               "matrix). Higher mean JSD = less redundant heads. bench/RESULTS-variants-training.md measures it over "
               "seeds.")


def variants_quality(current: str, name: str) -> None:
    """What each variant costs in quality: the shipped grid of trained variants, accuracy against KV cache."""
    rows = precomputed_variant_grid()
    if not rows:
        return
    r0 = rows[0]
    st.markdown("**What a variant costs in quality**")
    chart(accuracy_vs_cache_figure(rows, current), "variants_quality", f"{name}-accuracy-vs-kv-cache")
    st.caption(f"Each point: one attention variant trained on {TASKS[r0.task].title} (h = {r0.num_heads}, d_model = "
               f"{r0.d_model}, {r0.steps} steps) with {len(r0.seeds)} seeds; mean accuracy ± standard deviation against "
               "the bytes one token adds to one layer's KV cache (a window bounds how many tokens are cached, not the bytes of "
               "each; MoH caches every head's K and V). Hollow points (d=…): MHA trained with the head-diversity "
               "penalty. Measured by bench/bench_variants_training.py (the reading: bench/RESULTS-variants-training.md)"
               f" and shipped with the package; this layer's variant ({current}) ringed in red.")


def training_controls() -> None:
    """Sidebar widgets of train mode; their keys are the ViewState fields task, h, d_model, steps, seed."""
    confine("task", tuple(TASKS), DEFAULT_TASK)
    if field_value("d_model") not in TRAINED_D_MODELS:
        put("d_model", TRAINED_D_MODELS[-1])
        _keep_heads_valid()
    st.selectbox("Task", list(TASKS), key="task", format_func=lambda name: TASKS[name].title)
    heads_slider(field_value("d_model"))
    st.selectbox("d_model", TRAINED_D_MODELS, key="d_model", on_change=_keep_heads_valid,
                 help="Width of the embeddings; each head gets d_model / h.")
    st.number_input("Training steps", *bounds("steps"), key="steps", step=100, help="Adam steps on random sequences.")
    st.number_input("Seed (weights and training data)", *bounds("seed"), key="seed", step=1)
    if field_value("h") in head_choices(field_value("d_model")):
        variant_controls(field_value("h"))
    st.slider("Head diversity penalty", *bounds("diversity"), step=0.1, key="diversity",
              help="loss = task loss + this weight × the mean pairwise cosine similarity of the h heads' outputs (the "
              "disagreement regulariser of Li et al. 2018). The single head beside them has no pair to push apart.")


def _comparison(run: TrainingRun, single: TrainingRun) -> None:
    """Measured loss and accuracy of h heads next to one head, and what they say."""
    h, f, f1 = run.num_heads, run.final, single.final
    st.table(
        {
            "measure": ["loss", "accuracy (mean)"] + [f"accuracy: {r}" for r in run.relations],
            "h = 1": [f"{f1.loss:.4f}", f"{f1.mean_accuracy:.1%}"] + [f"{a:.1%}" for a in f1.accuracy],
            f"h = {h}": [f"{f.loss:.4f}", f"{f.mean_accuracy:.1%}"] + [f"{a:.1%}" for a in f.accuracy],
        }
    )
    gap = f.mean_accuracy - f1.mean_accuracy
    if abs(gap) < SAME:
        st.info(f"On this task, at this d_model and budget, one head does about as well as {h} heads "
                f"(mean accuracy {f1.mean_accuracy:.1%} vs {f.mean_accuracy:.1%}).")
    else:
        (better, fb), (worse, fw) = ((h, f), (1, f1)) if gap > 0 else ((1, f1), (h, f))
        st.success(
            f"h = {better} ends {100 * abs(gap):.1f} percentage points more accurate than h = {worse} (mean accuracy "
            f"{fb.mean_accuracy:.1%} vs {fw.mean_accuracy:.1%}; loss {fb.loss:.4f} vs {fw.loss:.4f})."
        )


def _run_column(run: TrainingRun, name: str, reload: Callable[[], TrainingRun]) -> None:
    """One run's heads through training and its relation scores; reload: the run from the shared cache (training it
    again on a miss), for the replay's later reruns."""
    H = run.num_heads
    what = "" if run.variant.kind == "mha" else f" ({variant_label(run.variant, H)})"
    penalty = f", diversity penalty {run.diversity:g}" if run.diversity else ""
    st.markdown(f"**h = {H}**{what}: {H} head{'s' if H > 1 else ''} of width d_k = {run.d_model // H}{penalty}")
    _replay(WhileHeld(weakref.ref(run), reload), name)
    chart(relation_scores_figure(run.final.scores, run.relations), f"train_scores{name}", f"train-h{H}-relations")
    st.caption(who_takes_what(run.final.scores, run.relations))


def _replay(load: Callable[[], TrainingRun], name: str) -> None:
    """Every head at one snapshot, picked by a step slider (Streamlit's: the keyboard moves it) or played. A fragment:
    a step redraws this chart only; while playing, it runs every REPLAY_SECONDS (run_every is set when the whole page
    runs, so the Play toggle reruns the page). The report keeps the replay of every snapshot (Plotly's slider and
    play button)."""
    playing = widget(f"train_play{name}", False)
    st.fragment(_replay_step, run_every=REPLAY_SECONDS if playing else None)(load, name)


def _play_changed(name: str, first: int, last: int) -> None:
    """Play at the last snapshot starts again from the first (shown first); the page reruns to start the timer."""
    if widget(f"train_play{name}") and widget(f"train_step{name}") == last:
        put(f"train_step{name}", first)
        put(PLAY_FROM_START + name, True)
    put(RERUN_PAGE, True)


def _replay_step(load: Callable[[], TrainingRun], name: str) -> None:
    if take(RERUN_PAGE, False):
        st.rerun()  # scope "app": the fragment's timer starts or stops
    run = load()
    steps, H = tuple(run.snapshot_steps), run.num_heads
    key, play = f"train_step{name}", f"train_play{name}"
    confine(key, steps, steps[-1])  # opens at the last snapshot; a new run's steps may not hold the one shown
    if widget(play) and not take(PLAY_FROM_START + name, False):  # playing: each run shows the next snapshot
        if widget(key) == steps[-1]:
            put(play, False)
            st.rerun()  # a full rerun: the fragment stops running every REPLAY_SECONDS
        put(key, steps[steps.index(widget(key)) + 1])
    step = st.select_slider(f"Replay h = {H}: training step", steps, key=key, format_func=_step_format)
    st.toggle("Play", key=play, on_change=_play_changed, args=(name, steps[0], steps[-1]),
              help=f"Step through the snapshots, one every {REPLAY_SECONDS:g} s.")
    snapshot = run.snapshots[steps.index(step)]
    chart(heads_at_step_figure(snapshot.trace, cols=min(H, 2)), f"train_heads{name}", f"train-h{H}-heads",
          report=lambda: heads_through_training_figure([s.trace for s in run.snapshots], steps, cols=min(H, 2)))


def _step_format(step: int) -> str:
    return f"step {step}"


def training_page(h: int, d_model: int, steps: int, seed: int, task: str, variant: LayerVariant | None = None,
                  diversity: float = 0.0) -> AttentionTrace | None:
    """Train h heads (of this attention variant, with this head-diversity penalty) and one MHA head on the task; show
    both through training. Returns the trained h-head trace."""
    spec = TASKS.get(task or DEFAULT_TASK)
    if spec is None:
        st.error(f"Unknown task {task!r}; choose one of {', '.join(TASKS)}.")
        return None
    if d_model % h:
        explain_invalid_heads(h, d_model, advanced=False)
        return None
    variant = variant or MHA
    try:
        variant.check(MHAConfig(d_model, h))
    except ValueError as err:
        st.error(f"**This variant cannot be trained with these settings.** {err}.")
        return None
    st.subheader(spec.title)
    st.caption(
        f"{spec.description} Model: token + position embedding (d_model = {d_model}) → one causal multi-head "
        "attention layer → a linear readout per relation, no residual: the readout sees only what the heads fetched. "
        f"{steps} Adam steps, seed {seed}. Loss and accuracy are measured on a fixed batch of evaluation sequences; "
        "the heatmaps show one fixed probe sequence."
    )
    run = stoppable((spec.name, h, d_model, steps, seed, variant, diversity),
                    lambda: trained_run(spec.name, h, d_model, steps, seed, variant, diversity))
    single = stoppable((spec.name, 1, d_model, steps, seed), lambda: trained_run(spec.name, 1, d_model, steps, seed)
                       ) if h > 1 and run is not None else None
    if run is None or (h > 1 and single is None):
        return None
    for r in (run, single):
        if r is not None and r.cut:
            budget_notice(f"h = {r.num_heads}", r.steps_done, steps, r.final.loss, r.final.mean_accuracy)
    if single is not None:
        _comparison(run, single)
    else:
        st.info("Pick h > 1 to train several heads next to this single head.")
    st.caption(
        "Heatmaps: row = query token, column = key token; move the step slider above them or press Play to "
        "replay training. "
        "Relation scores: the attention mass each head puts on each relation's key, averaged over the evaluation "
        "queries where the relation is defined and its key differs from the other relations' keys."
    )
    runs = {"_single": single, "": run} if single is not None else {"": run}
    reloads = {"_single": lambda: trained_run(spec.name, 1, d_model, steps, seed),
               "": lambda: trained_run(spec.name, h, d_model, steps, seed, variant, diversity)}
    for col, (name, r) in zip(st.columns(len(runs)), runs.items()):
        with col:
            _run_column(r, name, reloads[name])
    curves = {f"h = {r.num_heads}": r for r in runs.values()}
    chart(
        curves_figure(
            run.snapshot_steps,
            loss={k: np.array([s.loss for s in r.snapshots]) for k, r in curves.items()},
            accuracy={k: np.array([s.mean_accuracy for s in r.snapshots]) for k, r in curves.items()},
            train_loss={k: r.train_loss for k, r in curves.items()},
        ),
        "train_curves",
        "train-curves",
    )
    return run.final.trace
