"""train() in a worker process: the same run, without holding the calling process's interpreter.

Training a tiny model is mostly Python between small torch operations, so in a server's thread it
holds the interpreter lock most of the time and every other session's page waits for it. Here the run
happens in one long-lived worker process (`python -m mha_viz.training.isolated`, started on first use:
torch is imported once); jobs and their progress and results travel as pickles over its stdin and
stdout, one job at a time, at a lower CPU priority than the server (WORKER_NICE). If the caller stops
waiting (an exception in on_step, e.g. Streamlit stopping a run), the worker is killed and the next job
starts a new one.

(multiprocessing's spawn and forkserver re-import the parent's __main__ module in the child, which in
a Streamlit server is the app script itself; a plain subprocess has no such surprise.)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

from .trainer import TrainingRun, train

PROGRESS_UPDATES = 40  # progress messages per run at most
WORKER_NICE = 10  # the worker's CPU priority below the server's: a core it shares goes to light pages first
_worker: subprocess.Popen | None = None
_lock = threading.Lock()  # one job at a time


def _send(stream: IO[bytes], message: Any) -> None:
    pickle.dump(message, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def _serve() -> None:
    """The worker: read (task, num_heads, d_model, steps, seed, options) jobs from stdin (options: train()'s
    keyword arguments variant, diversity, diversity_kind), write ("step", n) now and
    then, then ("done", run) or ("error", exception) to the original stdout (prints go to stderr)."""
    os.nice(WORKER_NICE)
    jobs = os.fdopen(os.dup(0), "rb")
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the pickles
    while True:
        try:
            task, num_heads, d_model, steps, seed, options = pickle.load(jobs)
        except EOFError:
            return
        every = max(1, steps // PROGRESS_UPDATES)

        def progress(step: int, total: int = steps, every: int = every) -> None:
            if step % every == 0 or step == total:
                _send(results, ("step", step))

        try:
            _send(results, ("done", train(task, num_heads, d_model, steps, seed, on_step=progress, **options)))
        except Exception as err:  # noqa: BLE001 - handed to the caller, which raises it
            _send(results, ("error", err))


def _start() -> subprocess.Popen:
    global _worker
    if _worker is None or _worker.poll() is not None:
        _worker = subprocess.Popen([sys.executable, "-m", "mha_viz.training.isolated"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return _worker


def start_worker() -> None:
    """Start the worker process now (it imports torch while nothing waits for it), so that the first job does not
    wait for its start; a worker already running is kept."""
    with _lock:
        _start()


def _stop() -> None:
    global _worker
    if _worker is not None:
        _worker.kill()
        _worker.wait(10)
        _worker = None


def train_isolated(
    task: str, num_heads: int, d_model: int, steps: int = 600, seed: int = 0,
    *, on_step: Callable[[int], None] | None = None, **options: Any,
) -> TrainingRun:
    """train(task, num_heads, d_model, steps, seed, **options) run in the worker process; on_step(step) as progress
    arrives. options: train()'s keyword arguments variant, diversity, diversity_kind.

    The result is the same TrainingRun train() gives in this process (train is deterministic).
    """
    with _lock:
        worker = _start()
        finished = False
        try:
            _send(worker.stdin, (task, num_heads, d_model, steps, seed, options))
            while True:
                try:
                    kind, value = pickle.load(worker.stdout)  # waits without holding the interpreter lock
                except EOFError:
                    raise RuntimeError(f"the training process ended without a result (exit code {worker.poll()})"
                                       ) from None
                if kind == "done":
                    finished = True
                    return value
                if kind == "error":
                    finished = True
                    raise value
                if on_step is not None:
                    on_step(value)
        finally:
            if not finished:  # the caller stopped waiting, or the worker broke: start afresh next time
                _stop()


if __name__ == "__main__":
    _serve()
