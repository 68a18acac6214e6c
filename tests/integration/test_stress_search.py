"""The model-guided stress search (:mod:`pipecheck.stress.search`)."""

from __future__ import annotations

import dataclasses

import pytest

import pipecheck
from pipecheck.errors import BadInputError
from pipecheck.records import BatchTiming
from pipecheck.stress.search import (
    AUTO_PREFETCH_FACTORS,
    MAX_AUTO_WORKERS,
    auto_workers,
    candidate_configs,
    rate_noise_fraction,
)
from pipecheck.stress.runner import run_trial
from pipecheck.stress.settings import usable_cpus
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.trial import TrialLimits
from stress_targets import sleepy_loader


def _latency_loader():
    # 4 samples x 10 ms of sleep per batch: 25 batches/s per worker, no CPU used.
    return sleepy_loader(batch_size=4)


@pytest.fixture(scope="module")
def searched():
    """One search and one explicit-list grid over the same latency-bound loader."""
    search = pipecheck.stress(_latency_loader(), trial_batches=40, trial_s=1.5).stress
    grid = pipecheck.stress(_latency_loader(), num_workers=[0, 2, 4, 8], prefetch_factors=[2],
                            trial_batches=40, trial_s=1.5).stress
    return search, grid


@pytest.mark.slow
def test_search_measures_fewer_configs_and_finds_a_good_one(searched):
    search, grid = searched
    measured = [t for t in search.trials if t.measured]
    candidates = candidate_configs()
    assert search.search.candidates == len(candidates) == len(search.trials)
    assert len(measured) < len(candidates) / 2
    assert search.search.measured == len(measured)
    # Latency-bound: many workers overlap the sleeps, so the search must go well past 1 worker,
    # as the explicit grid's best does. How near the grid's best rate it lands is a speed
    # target (benchmarks/stress_search.py): the two sweeps run at different moments, and on a
    # loaded 2-core machine the same 8 workers measured 457 and 947 samples/s in them.
    assert search.best.config["num_workers"] >= 4
    assert grid.best.config["num_workers"] >= 4
    assert search.search.stop_reason


@pytest.mark.slow  # the module fixture runs two real stress searches
def test_search_best_is_a_measured_trial_and_predictions_are_recorded(searched):
    search, _ = searched
    measured = [t for t in search.trials if t.measured]
    assert search.best.config in [t.config for t in measured]
    assert search.best.samples_per_s == max(t.samples_per_s for t in measured)
    calibration = search.search.calibration
    assert [c["num_workers"] for c in calibration] == [0, 1]
    for trial in measured:
        if trial.config in calibration:
            assert trial.predicted_samples_per_s is None
        else:
            assert trial.predicted_samples_per_s > 0
    assert len(measured) > len(calibration)  # the model chose at least one trial


@pytest.mark.slow
def test_skipped_candidates_carry_predictions_and_measured_false(searched):
    search, _ = searched
    unmeasured = [t for t in search.trials if not t.measured]
    assert unmeasured
    for trial in unmeasured:
        assert trial.predicted_samples_per_s > 0
        assert trial.samples_per_s == trial.predicted_samples_per_s
        assert trial.batches_per_s > 0 and 0.0 <= trial.stall_fraction <= 1.0
        assert trial.error is None and trial.batches == 0
    configs = [t.config for t in search.trials]
    assert len(configs) == len({tuple(sorted(c.items())) for c in configs})
    # The model saw a latency-bound loader: more workers are predicted no slower. Not strictly
    # faster: on a loaded 2-core machine the prediction can reach the measured CPU ceiling at 2
    # workers, where one more worker adds only its own cost (CI saw 791.7 then 790.6 samples/s).
    by_workers = {t.config["num_workers"]: t.predicted_samples_per_s for t in unmeasured
                  if t.config["prefetch_factor"] == 2}
    if 2 in by_workers and 3 in by_workers:
        assert by_workers[3] >= 0.95 * by_workers[2]


@pytest.mark.slow  # the module fixture's two searches (13 s); the other users are slow too
def test_explicit_worker_list_runs_the_plain_grid(searched):
    _, grid = searched
    assert [t.config["num_workers"] for t in grid.trials] == [0, 2, 4, 8]
    assert all(t.measured and t.predicted_samples_per_s is None for t in grid.trials)
    assert grid.search is None


def test_search_grid_measures_every_candidate_in_order():
    report = pipecheck.stress(_latency_loader(), search="grid", budget_s=1e-6, trial_batches=3)
    section = report.stress
    assert section.search is None
    assert len(section.trials) == 1 and section.trials[0].config["num_workers"] == 0
    assert len(section.skipped) == len(candidate_configs()) - 1


def test_bad_search_and_workers_values_are_bad_input():
    with pytest.raises(BadInputError, match="search must be"):
        pipecheck.stress(_latency_loader(), search="random")
    with pytest.raises(BadInputError, match="num_workers must be"):
        pipecheck.stress(_latency_loader(), num_workers="many")


def test_candidates_span_zero_to_four_per_cpu_with_two_prefetch_factors():
    assert auto_workers(2) == list(range(9))
    assert auto_workers(4) == list(range(17))
    assert auto_workers(64)[-1] == MAX_AUTO_WORKERS
    configs = candidate_configs(cpus=2)
    assert configs[0].num_workers == 0 and configs[0].prefetch_factor is None
    in_order = [c for c in configs if c.in_order is not False]
    assert len(in_order) == 1 + 8 * len(AUTO_PREFETCH_FACTORS)
    # in_order=False only where it can matter: 2 or more workers (torch >= 2.6 has it).
    out_of_order = [c for c in configs if c.in_order is False]
    assert len(out_of_order) == 7 * len(AUTO_PREFETCH_FACTORS)
    assert min(c.num_workers for c in out_of_order) == 2
    assert {c.prefetch_factor for c in configs[1:]} == set(AUTO_PREFETCH_FACTORS)
    assert candidate_configs()[-1].num_workers == min(max(8, 4 * usable_cpus()),
                                                      MAX_AUTO_WORKERS)


def test_rate_noise_is_zero_for_steady_batches_and_grows_with_spread():
    record = _latency_loader_record()
    steady = _with_loops(record, [0.01] * 40)
    assert rate_noise_fraction(steady) == pytest.approx(0.0, abs=1e-9)
    uneven = _with_loops(record, [0.01] * 10 + [0.02] * 10 + [0.01] * 10 + [0.02] * 10)
    noise = rate_noise_fraction(uneven)
    assert 0.1 < noise < 1.0
    assert rate_noise_fraction(_with_loops(record, [0.01] * 5)) is None
    assert rate_noise_fraction(None) is None


def _latency_loader_record():
    """A real trial's wrap record (3 batches, no workers), whose timeline the tests replace."""
    result = run_trial(_latency_loader(), LoaderSettings(0), TrialLimits(batches=3), step=None,
                       timeout_s=30.0)
    assert result.record is not None
    return result.record


def _with_loops(record, loops):
    """``record`` with a one-epoch timeline of batches whose loop times are ``loops`` (the
    first batch, warm-up, is added in front and left out by the estimate)."""
    timeline = [BatchTiming(index=i, epoch=0, start_at_s=float(i), wait_s=0.0, compute_s=loop,
                            samples=4) for i, loop in enumerate([1.0] + loops)]
    consumer = dataclasses.replace(record.consumer, timeline=timeline)
    return dataclasses.replace(record, consumer=consumer)
