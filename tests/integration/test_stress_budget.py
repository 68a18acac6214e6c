"""Stress keeps its word: ``--budget`` bounds every trial, trials run for time across epochs, the
search's stop reasons are all kept, and a stress report's recommendations and findings agree.

The budget logic runs on a fake clock and a fake trial runner (pure logic); the trials, the
whole-run bound and the report run real loaders."""

from __future__ import annotations

import dataclasses
import time

import pytest
from torch.utils.data import DataLoader

import pipecheck
from pipecheck.analysis.model import MIN_STEADY_BATCHES
from pipecheck.report_sections import ExpectedRate
from pipecheck.stress import stress_report
from pipecheck.stress.runner import Sweep
from pipecheck.stress.search import run_search
from pipecheck.stress.settings import StepTime
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.tracker import Tracker
from pipecheck.stress.trial import TrialLimits, measure
from helpers_datasets import IndexDataset
from stress_fakes import FakeClock, fake_runner, short_trial
from stress_targets import sleepy_loader
from paths import STRESS_TARGETS

TARGETS = STRESS_TARGETS


@pytest.fixture(scope="module")
def short_result():
    return short_trial()


def _candidates(count: int) -> list[LoaderSettings]:
    return [LoaderSettings(0)] + [LoaderSettings(n, 2) for n in range(1, count)]


def test_no_trial_starts_unless_it_ends_within_the_budget_with_the_reserve_held(short_result):
    clock, started = FakeClock(), []
    limits = TrialLimits(seconds=3.0)
    tracker = Tracker(0, 40.0, reserve=lambda t: 8.0, clock=clock,
                      runner=fake_runner(clock, short_result, 2.0, started))
    sweep = run_search("target", _candidates(12), limits, step=None, budget_s=40.0,
                       timeout_s=10.0, tracker=tracker)
    # baseline 5 s, calibration 2 x 3 s + 2 s = 8 s, then 5 s each: 5 + 8 + 3 x 5 = 28 s, and a
    # fourth would end at 33 s, past 40 - 8 s held back.
    assert tracker.elapsed_s() <= 40.0 - 8.0
    assert tracker.elapsed_s() + 5.0 > 40.0 - 8.0
    assert len(sweep.trials) == len(started) == 5
    assert set(sweep.skipped.values()) == {"budget spent"}


def test_the_search_keeps_its_no_model_reason_when_the_budget_then_stops_it(short_result):
    clock, started = FakeClock(), []
    tracker = Tracker(0, 30.0, clock=clock,
                      runner=fake_runner(clock, short_result, 1.0, started))
    sweep = run_search("target", _candidates(12), TrialLimits(seconds=3.0), step=None,
                       budget_s=30.0, timeout_s=10.0, tracker=tracker)
    reasons = sweep.search.stop_reasons
    assert len(reasons) == 2
    first, last = reasons
    # The grid-order fallback says why, with the analysis's own figure and minimum.
    assert first.startswith("no model (") and "grid order" in first
    assert f"only {MIN_STEADY_BATCHES // 2 - 1} steady batches" in first
    assert str(MIN_STEADY_BATCHES) in first
    assert last.startswith("budget spent")
    assert sweep.search.stop_reason == f"{first}; {last}"


def test_expected_trial_time_is_its_limit_plus_the_largest_overhead_measured(short_result):
    clock, started = FakeClock(), []
    runner = fake_runner(clock, short_result, 0.0, started)
    overheads = iter([1.5, 4.0, 0.5])

    def uneven(*args, **kwargs):
        clock.now += next(overheads)
        return runner(*args, **kwargs)

    tracker = Tracker(3, 100.0, clock=clock, runner=uneven)
    limits = TrialLimits(seconds=2.0)
    assert tracker.expected_wall_s(limits) == 2.0
    for n in range(3):
        tracker.run("target", LoaderSettings(n, 2 if n else None), limits, step=None,
                    timeout_s=5.0, done=n)
    assert tracker.expected_wall_s(limits) == pytest.approx(6.0)
    later = tracker.follow_on(1)
    assert later.elapsed_s() == tracker.elapsed_s() and later.expected_wall_s(limits) == 6.0


def test_a_trial_runs_for_its_time_across_short_epochs():
    loader = DataLoader(IndexDataset(20), batch_size=4)  # 5 batches an epoch
    result = measure(loader, LoaderSettings(0), TrialLimits(seconds=1.2), StepTime(0.02))
    assert result.ok
    epochs = result.record.consumer.epochs
    assert len(epochs) >= 4 and all(e.batches == 5 for e in epochs[:-1])
    steady = sum(e.batches - 1 for e in epochs)
    assert steady >= MIN_STEADY_BATCHES
    assert result.wall_s >= 1.2


def test_a_batch_limit_counts_across_epochs_and_fixed_epochs_share_it():
    loader = DataLoader(IndexDataset(20), batch_size=4)
    crossed = measure(loader, LoaderSettings(0), TrialLimits(batches=12, seconds=30.0))
    assert crossed.batches == 12
    assert [e.batches for e in crossed.record.consumer.epochs] == [5, 5, 2]
    two = measure(loader, LoaderSettings(0), TrialLimits(batches=6, seconds=30.0, epochs=2))
    assert [e.batches for e in two.record.consumer.epochs] == [3, 3]


def test_trial_entries_count_their_epochs():
    report = pipecheck.stress(lambda **kw: DataLoader(IndexDataset(20), batch_size=4, **kw),
                              num_workers=[0], trial_s=0.5, stacks=False, persistent_workers=False,
                              step_time_s=0.01)
    (trial,) = report.stress.trials
    assert trial.epochs == report.consumer.epochs >= 2


def test_a_stress_report_never_says_no_recommendations_above_its_recommendations():
    # Trials of 12 batches: fewer steady batches than the model needs, so the analysis alone
    # says "No recommendations"; the section recommends 2 workers from the measurements.
    limits = TrialLimits(batches=12)
    serial = measure(sleepy_loader(), LoaderSettings(0), limits)
    parallel = measure(sleepy_loader(num_workers=2, prefetch_factor=2), LoaderSettings(2, 2),
                       limits)
    section = Sweep(trials=[serial, parallel]).section()
    assert section.recommended is not None
    section = dataclasses.replace(section, recommended=dataclasses.replace(
        section.recommended, config=parallel.config.to_dict(),
        expected=ExpectedRate(samples_per_s=parallel.samples_per_s,
                              stall_fraction=parallel.stall_fraction),
        changes={"num_workers": [0, 2], "prefetch_factor": [None, 2]}))
    report = stress_report(parallel.record, section)
    assert [r.setting for r in report.recommendations] == ["num_workers"]
    messages = [f.message for f in report.diagnosis.findings]
    assert not [m for m in messages if m.startswith("No recommendations")], messages
    gaps = [f for f in report.diagnosis.findings if f.kind == "insufficient-data"]
    assert gaps and "the recommendations are the sweep's measurements" in gaps[0].message
    assert f"only {parallel.batches - 1} steady batches" in gaps[0].message
    assert "No recommendations" not in " ".join(report.render(width=120).split())


@pytest.mark.slow
def test_the_budget_bounds_the_whole_run_later_trials_included():
    # Each trial runs in a child process (seconds of start-up on a busy machine); the old code
    # started the epoch-start pair and the profiling trial after the budget whatever it left.
    budget_s = 14.0
    began = time.perf_counter()
    report = pipecheck.stress(f"{TARGETS}:sleepy_loader", num_workers=[0, 2, 3, 4], trial_s=1.0,
                              budget_s=budget_s, stacks=True)
    elapsed = time.perf_counter() - began
    # A trial whose start-up runs longer than any before it can overrun its estimate a little.
    assert elapsed <= budget_s * 1.2, elapsed
    section = report.stress
    later = [section.epoch_start, section.profile]
    for entry in later:
        assert entry is not None and entry.status in ("ok", "skipped", "failed", "off")
        if entry.status == "skipped":
            assert entry.reason


@pytest.mark.slow
def test_the_headline_is_the_recommended_sweep_trials_never_the_profiling_trials():
    # A guard for the "414 against 712": the report's figures are the recommended
    # sweep trial's own record (whole run, its first batch included), the profiling trial
    # adds only hot stacks.
    report = pipecheck.stress(sleepy_loader, num_workers=[2], trial_s=1.0, stacks=True,
                              persistent_workers=False)
    section = report.stress
    (trial,) = [t for t in section.trials if t.measured]
    assert section.recommended.expected.samples_per_s == trial.samples_per_s
    assert report.consumer.batches == trial.batches
    assert report.consumer.epochs == trial.epochs
    assert report.consumer.wait_s + report.consumer.compute_s <= trial.wall_s
