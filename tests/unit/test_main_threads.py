"""The main process's torch intra-op threads as a setting (issue 26, item 4): the model of the
step on one thread (:meth:`ThroughputModel.one_thread_step_s`), when the pool would wait at
its barriers beside workers (:meth:`ThroughputModel.pool_waits_beside`), and the
``torch_num_threads`` recommendation (:func:`pipecheck.recommend.rules.main_threads`) in the
rules' chain, the JSON and the terminal. Runs come from the fake-clock simulator."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from fake_pipeline import MAIN_PID, FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.analysis.model import POOL_EVIDENCE_MIN_CORES, pool_extra_cores
from pipecheck.loader_settings import LoaderSettings
from pipecheck.recommend import recommend
from pipecheck.report import build_report

PRODUCING = FakeRun(num_workers=0, production_s=0.4, step_s=0.02, worker_cpu_fraction=1.0,
                    main_step_cpu_fraction=1.0, batches_per_epoch=200)
"""CPU-bound production 20x the step, measured at num_workers=0 on 2 cores."""


def pooled(run, *, threads=2, thread_share=0.5, step_on_cpu=1.0, step_cores=1.6):
    """``run`` (``num_workers=0``) on ``threads`` torch intra-op threads: production's calling
    thread ran ``thread_share`` of the process's CPU; during the step the calling thread was
    on a core ``step_on_cpu`` of the time and the process used ``step_cores`` cores."""
    consumer = run.consumer
    wall_s = consumer.sampled_compute_wall_s
    consumer = dataclasses.replace(
        consumer, sampled_wait_thread_cpu_s=consumer.sampled_wait_cpu_s * thread_share,
        sampled_compute_thread_cpu_s=step_on_cpu * wall_s,
        sampled_compute_cpu_s=step_cores * wall_s)
    environment = dataclasses.replace(run.environment, intra_op_threads=threads)
    return dataclasses.replace(run, consumer=consumer, environment=environment)


def test_one_thread_step_lies_between_the_calling_threads_cpu_and_the_processs():
    model = analyze(pooled(simulate(PRODUCING))).model
    assert model.pool_threads == 2 and not model.pool_starved
    wall_s = 1.0 / model.demand_batches_per_s
    point, low, high = model.one_thread_step_s()
    # The calling thread ran the whole step; the process used 1.6 cores.
    assert low == pytest.approx(wall_s / model.load.share, rel=1e-6)
    assert high == pytest.approx(1.6 * wall_s / model.load.share, rel=1e-6)
    assert point == pytest.approx(math.sqrt(low * high), rel=1e-6)


def test_the_pool_waits_beside_cpu_bound_workers_and_one_thread_is_proposed():
    run = pooled(simulate(PRODUCING))
    analysis = analyze(run)
    model = analysis.model
    recommendations = recommend(run, analysis)
    settings = [r.setting for r in recommendations]
    assert settings[:2] == ["num_workers", "torch_num_threads"]
    workers, threads = recommendations[:2]
    assert model.pool_waits_beside(workers.proposed)
    # The worker count states no figure of its own: its pool's barrier waits are not priced.
    assert workers.expected.samples_per_s is None
    assert "torch_num_threads=1" in workers.reason
    assert (threads.current, threads.proposed) == (2, 1)
    expected = threads.expected
    proposed = LoaderSettings(num_workers=workers.proposed, prefetch_factor=None,
                              in_order=True, torch_num_threads=1)
    predicted = model.predict(proposed)
    assert expected.samples_per_s == pytest.approx(predicted.samples_per_s)
    assert expected.samples_per_s_low <= expected.samples_per_s <= expected.samples_per_s_high
    assert expected.samples_per_s > analysis.consumer.samples_per_s
    # Never above the one-thread step's own ceiling.
    point_step_s = model.one_thread_step_s()[0]
    assert predicted.batches_per_s <= 1.0 / point_step_s * (1 + 1e-9)
    assert "torch.set_num_threads(1)" in threads.reason
    report = build_report(run)
    saved = json.loads(report.to_json())
    entry = next(r for r in saved["recommendations"] if r["setting"] == "torch_num_threads")
    assert (entry["current"], entry["proposed"]) == (2, 1)
    assert entry["expected"]["samples_per_s"] == pytest.approx(expected.samples_per_s)
    text = " ".join(report.render(width=160, verbose=True).split())
    assert "torch_num_threads" in text and "torch.set_num_threads(1)" in text


def test_the_worker_count_is_weighed_with_the_step_on_one_thread():
    # The count chosen is the best predicted on one thread, the setting the chain ends with.
    run = pooled(simulate(PRODUCING))
    analysis = analyze(run)
    model = analysis.model
    workers = next(r for r in recommend(run, analysis) if r.setting == "num_workers")
    rates = {n: model.predict(LoaderSettings(n, torch_num_threads=1)).steady_batches_per_s
             for n in range(1, 5)}
    assert rates[workers.proposed] >= max(rates.values()) / 1.05


def test_thread_counts_the_model_cannot_price_raise_with_the_setting_named():
    model = analyze(pooled(simulate(PRODUCING), threads=4)).model
    assert model.main_threads == 4
    for threads in (None, 1, 4, 8):
        assert model.threads_priced(threads)
    assert not model.threads_priced(2)
    with pytest.raises(ValueError, match="torch_num_threads=2"):
        model.predict(LoaderSettings(2, torch_num_threads=2))
    with pytest.raises(ValueError, match="torch_num_threads=2"):
        model.interval(LoaderSettings(2, torch_num_threads=2))
    # As many threads as measured, or more, change nothing.
    assert (model.predict(LoaderSettings(2, torch_num_threads=8))
            == model.predict(LoaderSettings(2)))


def test_an_idle_pool_prices_one_thread_as_measured():
    model = analyze(pooled(simulate(PRODUCING), thread_share=1.0, step_cores=1.0)).model
    assert model.pool_threads == 0 and model.main_threads == 2
    assert model.threads_priced(1)
    assert (model.predict(LoaderSettings(2, torch_num_threads=1))
            == model.predict(LoaderSettings(2)))


def test_no_thread_change_where_one_thread_cannot_be_priced():
    run = pooled(simulate(PRODUCING))
    busy_s = run.host.main_cpu_s  # waited for a core as long as it ran: a starved pool
    host = dataclasses.replace(run.host, processes=[
        dataclasses.replace(p, runqueue_s=busy_s) if p.pid == MAIN_PID else p
        for p in run.host.processes])
    starved = dataclasses.replace(run, host=host)
    with_workers = pooled(simulate(dataclasses.replace(PRODUCING, num_workers=2)))
    unsampled = dataclasses.replace(run, consumer=dataclasses.replace(
        run.consumer, sampled_compute_thread_cpu_s=None))
    assert analyze(starved).model.pool_starved
    for case in (starved, with_workers, unsampled):
        analysis = analyze(case)
        assert analysis.model.one_thread_step_s() is None
        assert not analysis.model.threads_priced(1) or analysis.model.pool_threads == 0
        threads = [r for r in recommend(case, analysis) if r.setting == "torch_num_threads"]
        if case is starved:  # one thread proposed, with no figure (starved_pool_threads)
            assert [r.expected.samples_per_s for r in threads] == [None]
        else:
            assert not threads


def test_a_pool_with_cores_to_spare_keeps_its_threads():
    # 8 cores, a light producer: the workers leave the step's 2 threads their cores.
    spec = dataclasses.replace(PRODUCING, usable_cpus=8, production_s=0.05)
    run = pooled(simulate(spec))
    analysis = analyze(run)
    recommendations = recommend(run, analysis)
    workers = next(r for r in recommendations if r.setting == "num_workers")
    assert not analysis.model.pool_waits_beside(workers.proposed)
    assert workers.expected.samples_per_s is not None
    assert all(r.setting != "torch_num_threads" for r in recommendations)


def test_the_thread_setting_is_no_dataloader_keyword_but_is_saved():
    settings = LoaderSettings(num_workers=2, prefetch_factor=2, torch_num_threads=1)
    assert "torch_num_threads" not in settings.to_kwargs()
    assert settings.to_dict()["torch_num_threads"] == 1
    assert LoaderSettings.from_dict(settings.to_dict()) == settings
    assert "torch_num_threads" not in LoaderSettings(num_workers=2).to_dict()
    assert "torch_num_threads=1" in settings.label()
    assert "torch_num_threads" not in settings.short_label()
    assert settings.model_view().torch_num_threads == 1


def starved(run):
    """``run`` on a host where the main process waited for a core as long as it ran."""
    busy_s = run.host.main_cpu_s
    host = dataclasses.replace(run.host, processes=[
        dataclasses.replace(p, runqueue_s=busy_s) if p.pid == MAIN_PID else p
        for p in run.host.processes])
    return dataclasses.replace(run, host=host)


SLEEPING = FakeRun(num_workers=0, production_s=0.04, step_s=0.00005, worker_cpu_fraction=0.02,
                   main_step_cpu_fraction=1.0, batches_per_epoch=200)
"""A latency-bound loader (2% of a core while producing) before a near-free step."""


def test_ratios_resting_on_a_few_microseconds_are_no_evidence_of_a_pool():
    # The process's CPU 1.25x the calling thread's in production and 1.3x in the step, as
    # pipecheck's sampler landing in short windows gives (benchmarks/pool_evidence.py): the
    # other threads used about 0.005 cores over the loop, under POOL_EVIDENCE_MIN_CORES.
    run = starved(pooled(simulate(SLEEPING), thread_share=0.8, step_cores=1.3))
    extra = pool_extra_cores(run.consumer)
    assert 0 < extra < POOL_EVIDENCE_MIN_CORES
    analysis = analyze(run)
    assert analysis.model.pool_threads == 0 and not analysis.model.pool_starved
    assert all(r.setting != "torch_num_threads" for r in recommend(run, analysis))
    # The same ratios on CPU-bound production rest on a tenth of a core: a starved pool.
    working = starved(pooled(simulate(PRODUCING), thread_share=0.8, step_cores=1.3))
    assert pool_extra_cores(working.consumer) > 10 * POOL_EVIDENCE_MIN_CORES
    analysis = analyze(working)
    assert analysis.model.pool_threads == 2 and analysis.model.pool_starved
    assert "torch_num_threads" in [r.setting for r in recommend(working, analysis)]


WAITING = FakeRun(num_workers=0, production_s=0.05, step_s=0.09, worker_cpu_fraction=0.05,
                  main_step_cpu_fraction=1.0, batches_per_epoch=200)
"""Latency-bound production (5% of a core) beside a 90 ms step on 2 cores: the shape of
``benchmarks/calibration.py``'s latency pipeline beside a busy process, whose 88 ms step was
mostly its starved pool's waits."""


def test_a_starved_pool_sizes_waiting_workers_for_the_producer_not_the_measured_step():
    run = starved(pooled(simulate(WAITING), step_cores=1.8))
    analysis = analyze(run)
    model = analysis.model
    assert model.pool_threads == 2 and model.pool_starved
    recommendations = recommend(run, analysis)
    workers = next(r for r in recommendations if r.setting == "num_workers")
    # Sized to the measured 90 ms step, 1 worker (20 batches/s against 11 demanded) is
    # roomy; the step on one thread may be far shorter, so the count follows the producer.
    capacities = {n: model.capacity(n)[0] for n in range(1, workers.proposed + 1)}
    assert capacities[1] >= 1.2 * model.demand_batches_per_s
    assert workers.proposed > 1
    assert capacities[workers.proposed] * 1.05 >= max(
        model.capacity(n)[0] for n in range(1, 4 * model.usable_cpus + 1))
    assert "producer's best capacity" in workers.reason
    threads = next(r for r in recommendations if r.setting == "torch_num_threads")
    assert threads.proposed == 1 and threads.expected.samples_per_s is None
    # CPU-bound production keeps its count: past the best rate workers take the step's cores.
    cpu_bound = starved(pooled(simulate(dataclasses.replace(WAITING, worker_cpu_fraction=1.0)),
                               step_cores=1.8))
    cpu_workers = [r for r in recommend(cpu_bound, analyze(cpu_bound))
                   if r.setting == "num_workers"]
    assert all("producer's best capacity" not in r.reason for r in cpu_workers)
