"""mha_viz.training: tasks, relation scores, determinism, specialisation, figures, training in a child process
(the Streamlit view: tests/app/test_training_app.py)."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest
import torch

import mha_viz.training
from mha_viz.figures.training import curves_figure, heads_through_training_figure, relation_scores_figure
from mha_viz.trace import AttentionTrace
from mha_viz.training import TASKS, get_task, relation_masks, relation_scores, train
from mha_viz.training.tasks import DIGITS, IGNORE
from tests.plotly_json import heatmaps, z_matrix


@pytest.fixture(scope="module")
def small_run():
    return train("prev-first", 2, 16, 40, seed=3, num_snapshots=4)


# --- tasks -------------------------------------------------------------------------------------

def brute_force_key(name: str, tokens: list[int], t: int) -> int:
    """The key position of relation `name` for query t, straight from the definitions (-1: undefined)."""
    if name == "previous":
        return t - 1
    if name == "two back":
        return t - 2 if t >= 2 else -1
    if name == "first":
        return 0 if t >= 1 else -1
    if name == "same letter":
        same = [s for s in range(t) if tokens[s] // DIGITS == tokens[t] // DIGITS]
        return same[-1] if same else -1
    raise AssertionError(name)


@pytest.mark.parametrize("name", list(TASKS))
def test_targets_are_the_tokens_at_each_relations_key(name: str) -> None:
    task = TASKS[name]
    tokens = task.sample(32, torch.Generator().manual_seed(1))  # (B, T)
    targets = task.targets(tokens)  # (B, T, R)
    assert targets.shape == (32, task.seq_len, len(task.relations))
    for b in range(tokens.shape[0]):
        row = tokens[b].tolist()
        for t in range(task.seq_len):
            for r, rel in enumerate(task.relations):
                j = brute_force_key(rel.name, row, t)
                assert targets[b, t, r].item() == (row[j] if j >= 0 else IGNORE)
    assert (targets != IGNORE).any(dim=(0, 1)).all()  # every relation occurs


def test_probe_is_fixed_and_tasks_are_looked_up_by_name() -> None:
    task = get_task("")
    assert torch.equal(task.probe(), task.probe())
    assert len(task.token_names(task.probe())) == task.seq_len
    with pytest.raises(ValueError, match="unknown task"):
        get_task("no-such-task")


# --- relation scores ---------------------------------------------------------------------------

def test_relation_masks_count_only_queries_where_the_relations_keys_differ() -> None:
    task = TASKS["prev-first"]
    positions = task.positions(task.probe()[None])[0].numpy()  # (R, T)
    masks = relation_masks(positions, task.seq_len)  # (R, T, S)
    counted = masks.any(-1)  # (R, T)
    # t = 0: nothing before; t = 1: previous and first are both key 0
    assert counted[:, :2].sum() == 0 and counted[:, 2:].all()
    assert masks.sum(-1).max() == 1
    t = np.arange(2, task.seq_len)
    assert masks[0, t, t - 1].all() and masks[1, t, 0].all()


def test_relation_score_of_hand_built_attention() -> None:
    """Head 0 attends to the previous token only; head 1 spreads evenly over the causal keys."""
    T = 8
    previous = np.eye(T, k=-1)
    previous[0, 0] = 1.0
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    tokens = tuple("abcdefgh")
    trace = AttentionTrace(tokens, tokens, np.stack([previous, uniform]), causal=True)
    positions = TASKS["prev-first"].positions(torch.zeros(1, T, dtype=torch.long))[0].numpy()  # (R, T)
    scores = relation_scores(trace.weights, relation_masks(positions, T))  # (H, R)
    even = np.mean([1 / (t + 1) for t in range(2, T)])  # mass 1/(t+1) on each key, queries t = 2..T-1
    np.testing.assert_allclose(scores, [[1.0, 0.0], [even, even]], rtol=0, atol=1e-12)


def test_relation_scores_average_over_a_batch_and_mark_missing_relations() -> None:
    w = np.zeros((2, 1, 3, 3))
    w[0, 0, :, 0] = 1.0  # sequence 0: everything on key 0
    w[1, 0, :, 2] = 1.0  # sequence 1: everything on key 2
    masks = np.zeros((2, 2, 3, 3), dtype=bool)
    masks[:, 0, 2, 0] = True  # relation 0 at query 2 is key 0 in both sequences
    scores = relation_scores(w, masks)
    assert scores[0, 0] == 0.5 and np.isnan(scores[0, 1])


# --- training ----------------------------------------------------------------------------------

def test_same_seed_gives_identical_losses_and_traces(small_run) -> None:
    again = train("prev-first", 2, 16, 40, seed=3, num_snapshots=4)
    assert np.array_equal(small_run.train_loss, again.train_loss)
    for a, b in zip(small_run.snapshots, again.snapshots, strict=True):
        assert a.step == b.step and a.loss == b.loss
        assert np.array_equal(a.trace.weights, b.trace.weights) and np.array_equal(a.trace.output, b.trace.output)
        assert np.array_equal(a.scores, b.scores)
    other = train("prev-first", 2, 16, 40, seed=4, num_snapshots=4)
    assert not np.array_equal(small_run.train_loss, other.train_loss)


def test_snapshots_hold_full_traces_of_the_probe(small_run) -> None:
    assert small_run.snapshot_steps.tolist() == [0, 10, 20, 30, 40]
    assert small_run.train_loss.shape == (40,)
    task = get_task("prev-first")
    for snap in small_run.snapshots:
        trace = snap.trace
        assert trace.weights.shape == (2, task.seq_len, task.seq_len) and not trace.missing
        assert trace.query_tokens == task.token_names(task.probe())
        assert trace.meta["model"] == "trained" and trace.meta["step"] == snap.step
        np.testing.assert_allclose(trace.weights.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.triu(trace.weights, 1) == 0)  # causal
        assert max(trace.check_wo_path().values()) < 1e-5
        assert snap.scores.shape == (2, 2) and snap.accuracy.shape == (2,)


def test_training_lowers_the_loss() -> None:
    run = train("prev-2back-first", 4, 32, 150, seed=0, num_snapshots=3)
    assert run.final.loss < 0.5 * run.snapshots[0].loss
    assert run.train_loss[-20:].mean() < 0.5 * run.train_loss[:20].mean()
    assert run.final.mean_accuracy > run.snapshots[0].mean_accuracy + 0.3


@pytest.mark.parametrize("seed", [0, 1])
def test_two_heads_split_previous_and_first(seed: int) -> None:
    run = train("prev-first", 2, 32, 200, seed=seed, num_snapshots=1)
    scores = run.final.scores  # (H, R)
    owner = scores.argmax(0)  # (R,) the head with most mass on each relation
    assert sorted(owner.tolist()) == [0, 1]  # a permutation: one head per relation
    assert all(scores[owner[r], r] >= 0.9 for r in range(2)), scores


def test_package_docstring_example() -> None:
    result = doctest.testmod(mha_viz.training)
    assert result.attempted > 0 and result.failed == 0


# --- figures -----------------------------------------------------------------------------------

def test_heads_through_training_has_one_frame_per_snapshot(small_run) -> None:
    traces = [s.trace for s in small_run.snapshots]
    fig = json.loads(heads_through_training_figure(traces, small_run.snapshot_steps).to_json())
    assert len(fig["frames"]) == len(traces)
    assert [s["label"] for s in fig["layout"]["sliders"][0]["steps"]] == ["0", "10", "20", "30", "40"]
    for frame, trace in zip(fig["frames"], traces):
        for h, data in enumerate(frame["data"]):
            np.testing.assert_allclose(z_matrix(data), trace.weights[h], atol=1e-6)
    assert (fig["layout"]["coloraxis"]["cmin"], fig["layout"]["coloraxis"]["cmax"]) == (0, 1)  # frames compare
    for h, shown in enumerate(heatmaps(fig)):  # opens at the last step
        np.testing.assert_allclose(z_matrix(shown), traces[-1].weights[h], atol=1e-6)
    with pytest.raises(ValueError):
        heads_through_training_figure(traces, [0])


def test_the_report_opens_the_replay_paused_at_the_last_step(small_run) -> None:
    """Train mode's HTML report: Plotly's export would start the frames' animation on load (auto_play); the
    report shows the trained heads and waits for ▶."""
    from mha_viz.report import html_report

    traces = [s.trace for s in small_run.snapshots]
    fig = heads_through_training_figure(traces, small_run.snapshot_steps)
    page = html_report(small_run.final.trace, title="train", figures=[fig])
    assert ".addFrames(" in page and '"method":"animate"' in page  # the replay and its ▶ button are there
    assert "Plotly.animate(" not in page  # ... and nothing calls it when the page opens


def test_scores_and_curves_figures_show_the_numbers(small_run) -> None:
    fig = json.loads(relation_scores_figure(small_run.final.scores, small_run.relations).to_json())
    np.testing.assert_allclose(z_matrix(fig["data"][0]), small_run.final.scores, atol=1e-6)
    assert fig["layout"]["xaxis"]["ticktext"] == ["previous", "first"]
    steps = small_run.snapshot_steps
    loss = np.array([s.loss for s in small_run.snapshots])
    batch = small_run.train_loss
    curves = curves_figure(steps, {"a": loss, "b": loss / 2}, {"a": loss * 0, "b": loss * 0}, {"a": batch, "b": batch})
    assert len(curves.data) == 6 and curves.layout.yaxis.type == "log"


def test_training_in_a_child_process_gives_the_same_run_and_reports_progress() -> None:
    import os

    from mha_viz.training import isolated
    from mha_viz.training.isolated import train_isolated

    steps_seen: list[int] = []
    here = train("prev-first", 2, 16, 40, 3)
    there = train_isolated("prev-first", 2, 16, 40, 3, on_step=steps_seen.append)
    assert steps_seen and steps_seen[-1] == 40 and steps_seen == sorted(steps_seen)
    worker_nice = os.getpriority(os.PRIO_PROCESS, isolated._worker.pid)
    assert worker_nice == min(19, os.nice(0) + isolated.WORKER_NICE)  # light pages get a shared core first
    np.testing.assert_array_equal(there.train_loss, here.train_loss)
    for name, a in here.final_state.items():
        np.testing.assert_array_equal(there.final_state[name], a)


@pytest.mark.slow
def test_a_failed_child_training_raises_here_and_a_stopped_one_ends_the_child() -> None:
    from mha_viz.training.isolated import train_isolated

    with pytest.raises(ValueError, match="unknown task"):
        train_isolated("no-such-task", 2, 16, 10, 0)

    class Stop(Exception):
        pass

    def stop(step: int) -> None:
        raise Stop

    from mha_viz.training import isolated

    with pytest.raises(Stop):
        train_isolated("prev-first", 2, 16, 2000, 0, on_step=stop)
    assert isolated._worker is None  # the stopped worker was killed, not left training
    assert train_isolated("prev-first", 1, 16, 5, 0).num_heads == 1  # and the next job starts a new one
