"""The step measured at ``num_workers=0`` with its intra-op pool starved of cores, and the run's
first step (a warm-up), in the what-if model: fake runs, exact figures."""

from __future__ import annotations

import dataclasses

import pytest

from fake_pipeline import FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.analysis.consumer import (first_step_s, steady_stall_fraction, steady_step_s,
                                         summarize_consumer, warmup_step_s)
from pipecheck.recommend import recommend
from pipecheck.records import DeviceRecord

# Latency-bound production (5% CPU), 128 ms a batch, a 40 ms step: input-bound at 0 workers.
LATENCY = FakeRun(num_workers=0, production_s=0.128, step_s=0.04, worker_cpu_fraction=0.05,
                  main_step_cpu_fraction=1.0, batches_per_epoch=60)


def starved_step(run, *, threads=2, pool=2.0, on_cpu=0.5):
    """``run`` recorded with ``threads`` intra-op threads, the step's process CPU ``pool`` x
    its calling thread's, and that thread on a core ``on_cpu`` of the step's wall time."""
    consumer = run.consumer
    wall_s = consumer.sampled_compute_wall_s
    consumer = dataclasses.replace(
        consumer, sampled_compute_thread_cpu_s=on_cpu * wall_s,
        sampled_compute_cpu_s=pool * on_cpu * wall_s,
        sampled_wait_thread_cpu_s=consumer.sampled_wait_cpu_s)
    environment = dataclasses.replace(run.environment, intra_op_threads=threads)
    return dataclasses.replace(run, consumer=consumer, environment=environment)


def test_a_starved_step_is_measured_but_never_predicted_faster_than_the_demand():
    # Issue 26: the reason said "production ... 62.2 batches/s (demand 33.1 batches/s)" and
    # then predicted the 62.2. The starved step's calling-thread time is recorded, but the
    # step's own ceiling (the measured step at num_workers=0) bounds every prediction.
    run = starved_step(simulate(LATENCY))
    model = analyze(run).model
    step_s = 1.0 / model.demand_batches_per_s
    assert step_s == pytest.approx(0.04)
    assert model.unstarved_step_s == pytest.approx(0.02)
    assert model.pool_threads == 2  # the step's pool is active
    assert any("ran 50% of the step" in words for words in model.assumptions)
    # Serial and beside workers: never faster than the measured step.
    assert model.step_s(0) == pytest.approx(0.04)
    assert model.step_s(4) >= 0.04
    many = LoaderSettings(num_workers=8)
    assert model.predict(many).steady_batches_per_s <= model.demand_batches_per_s
    assert model.predict(many).batches_per_s <= model.demand_batches_per_s
    # The interval's high end reaches the step at its calling thread's CPU time (beside
    # workers the pool may wait less), never beyond it.
    low, high = model.interval(many)
    assert 0 < low <= model.predict(many).batches_per_s <= high <= 1 / model.unstarved_step_s
    assert high > model.demand_batches_per_s


def test_workers_for_a_starved_step_are_predicted_within_the_demand():
    run = starved_step(simulate(LATENCY))
    analysis = analyze(run)
    proposal = next(r for r in recommend(run, analysis) if r.setting == "num_workers")
    demand_samples = analysis.model.demand_batches_per_s * analysis.model.samples_per_batch
    assert proposal.expected.samples_per_s <= demand_samples * (1 + 1e-9)
    unstarved_samples = analysis.model.samples_per_batch / analysis.model.unstarved_step_s
    assert proposal.expected.samples_per_s_high <= unstarved_samples * (1 + 1e-9)
    assert proposal.expected.samples_per_s_low < proposal.expected.samples_per_s
    assert "waited for a core" in proposal.reason
    assert "on a core 50.0% of it" in proposal.reason
    assert "the prediction keeps the measured step" in proposal.reason


@pytest.mark.parametrize("threads, pool, on_cpu", [
    (1, 1.0, 0.5),   # one thread: no pool to wait for
    (2, 1.05, 0.5),  # the calling thread alone ran the step (it slept or waited on I/O)
    (2, 2.0, 0.9),   # the pool ran, the calling thread had its core
])
def test_no_starved_step_without_a_busy_pool_and_a_waiting_thread(threads, pool, on_cpu):
    run = starved_step(simulate(LATENCY), threads=threads, pool=pool, on_cpu=on_cpu)
    assert analyze(run).model.unstarved_step_s is None


def test_no_starved_step_with_workers_measured_or_on_a_gpu():
    with_workers = starved_step(simulate(dataclasses.replace(LATENCY, num_workers=2)))
    assert analyze(with_workers).model.unstarved_step_s is None
    run = starved_step(simulate(LATENCY))
    on_gpu = dataclasses.replace(run, device=DeviceRecord(
        status="ok", backend="cuda", batches=run.consumer.batches, idle_s=1.0,
        idle_fraction=0.5))
    assert analyze(on_gpu).model.unstarved_step_s is None


def test_reports_from_before_the_step_thread_clock_have_no_starved_step():
    run = simulate(LATENCY)
    assert run.consumer.sampled_compute_thread_cpu_s is None
    run = dataclasses.replace(run, environment=dataclasses.replace(
        run.environment, intra_op_threads=2))
    assert analyze(run).model.unstarved_step_s is None


def with_first_step(run, first_s):
    """``run`` whose first step took ``first_s`` (lazy initialization) instead of its own."""
    consumer = run.consumer
    first = consumer.timeline[0]
    extra = first_s - first.compute_s
    timeline = [dataclasses.replace(first, compute_s=first_s)] + consumer.timeline[1:]
    epochs = [dataclasses.replace(consumer.epochs[0],
                                  compute_s=consumer.epochs[0].compute_s + extra)]
    epochs += consumer.epochs[1:]
    consumer = dataclasses.replace(consumer, timeline=timeline, epochs=epochs,
                                   compute_s=consumer.compute_s + extra)
    return dataclasses.replace(run, consumer=consumer)


def test_the_runs_first_step_is_a_warm_up_left_out_of_demand_and_predictions():
    plain = simulate(LATENCY)
    slow_start = with_first_step(plain, 2.0)
    record = slow_start.consumer
    assert first_step_s(record) == pytest.approx(2.0)
    assert steady_step_s(record) == pytest.approx(0.04)
    assert warmup_step_s(record) == pytest.approx(1.96)
    assert summarize_consumer(record).demand_batches_per_s == pytest.approx(25.0)
    assert steady_stall_fraction(record) == pytest.approx(
        steady_stall_fraction(plain.consumer))
    model, plain_model = analyze(slow_start).model, analyze(plain).model
    assert model.warmup_step_s == pytest.approx(1.96)
    for workers in (0, 1, 4):
        settings = LoaderSettings(num_workers=workers)
        assert model.predict(settings).batches_per_s == pytest.approx(
            plain_model.predict(settings).batches_per_s)


def test_one_measured_step_is_the_steady_step():
    run = simulate(dataclasses.replace(LATENCY, batches_per_epoch=2))
    record = dataclasses.replace(run.consumer, batches=1, compute_s=0.04,
                                 timeline=run.consumer.timeline[:1])
    assert steady_step_s(record) == pytest.approx(0.04)
    assert warmup_step_s(record) == 0.0


def test_the_intra_op_finding_shows_the_starved_steps_numbers():
    run = starved_step(simulate(LATENCY))
    finding = next(f for f in analyze(run).diagnosis.findings if f.kind == "intra-op-threads")
    assert "calling thread on a core 50.0% of the time" in finding.message
    assert "40.0 ms a step, 20.0 ms of that thread's CPU" in finding.message
    assert "batch production ran" not in finding.message  # production was not inflated
    assert finding.evidence["step_on_cpu_fraction"] == pytest.approx(0.5)
    assert finding.evidence["step_pool_inflation"] == pytest.approx(2.0)
    plain = analyze(simulate(LATENCY))
    assert all(f.kind != "intra-op-threads" for f in plain.diagnosis.findings)


def test_a_pool_sharing_cores_with_others_is_not_predicted_slower_beside_idle_workers():
    # Latency-bound production (5% CPU) beside one busy core: the step's 2 intra-op threads
    # shared the cores with the other process when measured, and workers that mostly wait
    # take almost nothing from them. The measured step's share counts the pool as the cycle
    # beside workers does, so the step stays near its measured time (it was predicted
    # slower, up to 2.1x, when the measured share counted one thread and the one beside
    # workers two).
    from test_contention_model import with_host

    # Its process ran 1 core during the step: 2 threads, each on a core half the time.
    run = with_host(starved_step(simulate(LATENCY)), others_cpus=1.0)
    model = analyze(run).model
    assert model.pool_threads == 2 and model.load.others_cpus == pytest.approx(1.0)
    assert model.load.step_cores == pytest.approx(1.0, rel=0.05)
    measured_s = 1.0 / model.demand_batches_per_s
    for workers in (1, 2, 4):
        assert measured_s <= model.step_s(workers) <= 1.2 * measured_s  # was 2.1x
