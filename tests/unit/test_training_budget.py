"""Training that holds its budget on any machine: a time-bounded trainer, an estimate calibrated on this machine
and counting every run a page makes, and a running request whose work left never reads 0."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz.params import ViewState
from mha_viz.serve.hosting import Budget, within_budget
from mha_viz.serve.training_budget import (
    UNCALIBRATED,
    calibrate,
    calibration,
    measure_calibration,
    page_runs,
    page_training_seconds,
    run_budget,
    set_calibration,
    training_seconds,
)
from mha_viz.training import train
from mha_viz.variants import LayerVariant


def test_a_deadline_already_spent_stops_after_one_step_and_says_it_was_cut() -> None:
    for budget in ({"max_seconds": -1.0}, {"max_cpu_seconds": 0.0}):
        run = train("prev-first", 2, 16, 500, **budget)
        assert run.cut and run.steps_done == 1 and run.steps_asked == 500
        assert run.final.step == 1 and len(run.train_loss) == 1  # what it reached: a snapshot where it stopped
        assert np.isfinite(run.final.loss) and run.layer.cut and run.layer.steps == 1


def test_a_generous_deadline_and_no_deadline_finish_the_same_run() -> None:
    timed = train("prev-first", 2, 16, 30, max_seconds=600, max_cpu_seconds=600)
    free = train("prev-first", 2, 16, 30)
    assert not timed.cut and not free.cut and timed.steps_done == free.steps_done == 30
    assert np.array_equal(timed.train_loss, free.train_loss) and timed.final.step == 30 and not timed.layer.cut
    with pytest.raises(ValueError, match="max_seconds must be a number"):
        train("prev-first", 2, 16, 30, max_seconds="soon")


def test_the_calibration_scales_the_estimate_and_can_be_injected() -> None:
    as_fitted = lambda h, d, steps: training_seconds(h, d, 1) - training_seconds(h, d, 0)  # the constants' own step
    fitted = measure_calibration(as_fitted)
    assert fitted.fixed == pytest.approx(1.0) and fitted.width == pytest.approx(1.0, rel=1e-6)
    slow = measure_calibration(lambda h, d, steps: 3 * as_fitted(h, d, steps))  # a machine 3 times slower
    assert slow.fixed == pytest.approx(3.0) and slow.width == pytest.approx(3.0, rel=1e-6)
    assert training_seconds(8, 64, 600, calibration=slow) == pytest.approx(3 * training_seconds(8, 64, 600))
    link = ViewState(mode="Train", h=8, d_model=8, steps=5000)
    fast_cut, _ = within_budget(link, Budget(), UNCALIBRATED)
    slow_cut, notices = within_budget(link, Budget(), slow)
    assert slow_cut.steps < fast_cut.steps and page_training_seconds(slow_cut, slow) <= Budget().max_training_seconds
    assert "on this machine" in notices[0]
    wild = measure_calibration(lambda h, d, steps: 1e6)  # a disturbed probe is clamped, not believed
    assert wild.fixed <= 10 and wild.width <= 10
    try:
        set_calibration(slow)
        assert calibrate(lambda *probe: pytest.fail("measured again")) is slow and calibration() is slow
        set_calibration(None)
        assert calibration() is UNCALIBRATED  # before it is measured nothing is measured behind your back
        assert calibrate(lambda h, d, steps: 3 * as_fitted(h, d, steps)) == slow  # measured once, then kept
        assert calibrate(lambda *probe: pytest.fail("measured again")) == slow
    finally:
        set_calibration(None)


def test_the_estimate_counts_the_variants_widths_and_every_run_a_page_makes() -> None:
    mla = LayerVariant("mla", kv_latent=256, q_latent=256, rope_dim=32)
    assert training_seconds(16, 128, 100, mla) > 5 * training_seconds(16, 128, 100)  # measured: 8 times (h 16 MHA)
    link = ViewState(weights="trained", variant="mla", kv_latent=256, q_latent=256, rope_dim=32, h=16, d_model=128,
                     steps=5000)
    assert page_training_seconds(link) == pytest.approx(training_seconds(16, 128, 5000, mla))
    plain = ViewState(weights="trained", h=4, d_model=64, steps=600)
    assert [h for h, _, _ in page_runs(plain)] == [4, 1]  # the accuracy-by-h chart's h = 1 beside h = 4
    assert page_training_seconds(plain) == pytest.approx(training_seconds(4, 64, 600) + training_seconds(1, 64, 600))
    diverse = ViewState(weights="trained", h=4, d_model=64, steps=600, diversity=0.5)
    assert len(page_runs(diverse)) == 2  # the same layer without the penalty, for the comparison
    assert page_training_seconds(diverse) > 2 * training_seconds(4, 64, 600)  # and the penalty's steps cost more
    assert page_training_seconds(diverse) > page_training_seconds(ViewState(weights="trained", h=4, d_model=64,
                                                                            steps=600, view="Lines"))
    train_page = ViewState(mode="Train", view="Training", h=4, d_model=64, steps=600)
    assert [h for h, _, _ in page_runs(train_page)] == [4, 1]  # h heads beside one head


def test_a_runs_time_budget_is_what_its_page_has_left() -> None:
    first = run_budget(10, 0.0)
    assert first.cpu_seconds == 10 and first.wall_seconds >= first.cpu_seconds
    later = run_budget(10, 7.5)  # after runs that took 7.5 s
    assert later.cpu_seconds == pytest.approx(2.5) and later.wall_seconds < first.wall_seconds
    assert run_budget(10, 30).cpu_seconds < 0  # spent: the next run stops after its first step
