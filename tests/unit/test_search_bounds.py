"""The model-guided search's predictions held to the workers' fastest measured pace
(:func:`pipecheck.stress.search.fastest_worker_batches_per_s`): a trial with many workers whose
CPU the host sampler missed is modelled CPU-bound, and would predict fewer workers each far
faster than a worker was ever measured. Runs come from the fake-clock simulator."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from fake_pipeline import MAIN_PID, FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.runner import Sweep
from pipecheck.stress.trial import TrialResult

search = importlib.import_module("pipecheck.stress.search")

SLEEPING = FakeRun(num_workers=1, production_s=0.04, step_s=0.0005, worker_cpu_fraction=0.02,
                   main_step_cpu_fraction=1.0, batches_per_epoch=200, batch_size=4)
"""A latency-bound loader: 40 ms a batch, 2% of it on the CPU."""


def trial(record, settings):
    rate = analyze(record).consumer.batches_per_s
    return TrialResult(config=settings, samples_per_s=rate * 4, batches_per_s=rate,
                       stall_fraction=0.9, startup_s=0.0, batches=record.consumer.batches,
                       wall_s=1.5, record=record)


def without_worker_cpu(record):
    """``record`` with the workers' CPU unmeasured (the host sampler saw the main process only)."""
    host = dataclasses.replace(record.host, workers_cpu_s=None, processes=[
        p for p in record.host.processes if p.pid == MAIN_PID])
    return dataclasses.replace(record, host=host)


def test_fewer_workers_are_never_predicted_faster_than_a_worker_was_measured():
    one = LoaderSettings(num_workers=1, prefetch_factor=2)
    eight = LoaderSettings(num_workers=8, prefetch_factor=2)
    single = trial(simulate(SLEEPING), one)
    many_record = without_worker_cpu(simulate(dataclasses.replace(SLEEPING, num_workers=8)))
    many = trial(many_record, eight)
    unbounded = analyze(many_record).model
    per_worker = analyze(single.record).model.per_worker_batches_per_s
    # The unmeasured CPU is taken as CPU-bound: the model alone predicts 2 workers far faster
    # than 2 x the pace one worker measured.
    two = LoaderSettings(num_workers=2, prefetch_factor=2)
    assert unbounded.predict(two).steady_batches_per_s > 2.5 * per_worker
    fastest = search.fastest_worker_batches_per_s([single, many])
    assert fastest == pytest.approx(max(per_worker, unbounded.per_worker_batches_per_s))
    sweep = Sweep(trials=[single, many])
    remaining = [two, LoaderSettings(num_workers=3, prefetch_factor=2)]
    assert search._predict(sweep, remaining, [one]) == set(remaining)
    for config in remaining:
        predicted = sweep.predicted[config]["batches_per_s"]
        assert 0 < predicted <= config.num_workers * fastest * (1 + 1e-9)
    assert search.fastest_worker_batches_per_s([trial(simulate(dataclasses.replace(
        SLEEPING, num_workers=0)), LoaderSettings(num_workers=0))]) is None
