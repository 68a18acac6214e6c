"""pipecheck.analysis on hand-built and fake-clock simulated RunRecords (deterministic)."""

from __future__ import annotations

import dataclasses

import pytest

from fake_pipeline import FakeRun, simulate
from pipecheck.analysis import Analysis, analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.analysis.producer import cpu_cap_batches_per_s
from pipecheck.analysis.stats import quantiles, ratio
from pipecheck.records import (
    BatchTiming,
    ConsumerRecord,
    Environment,
    EpochTiming,
    LoaderConfig,
    RunRecord,
)


def kinds(analysis: Analysis) -> list[str]:
    return [f.kind for f in analysis.diagnosis.findings]


def finding(analysis: Analysis, kind: str):
    (match,) = [f for f in analysis.diagnosis.findings if f.kind == kind]
    return match


def generic_run(consumer: ConsumerRecord) -> RunRecord:
    """A generic iterable: consumer side only."""
    return RunRecord(
        kind="wrap", created="2024-05-01T12:00:00+00:00",
        environment=Environment(cpu_count=2, usable_cpus=2, python="3.11.7", torch="2.13.0",
                                platform="Linux-x86_64", cuda=False),
        loader=LoaderConfig(type="generator"), consumer=consumer, workers=[],
        worker_probe="none", host=None)


def consumer_record(batches: int, wait_each_s: float, compute_each_s: float, *,
                    first_wait_s: float, ended: str = "exhausted", status: str = "complete",
                    tokens=None) -> ConsumerRecord:
    """One epoch: the first batch waits ``first_wait_s``, the others ``wait_each_s``."""
    waits = [first_wait_s] + [wait_each_s] * (batches - 1)
    timeline, at_s = [], 0.0
    for i, wait_s in enumerate(waits):
        last_unmeasured = ended == "break" and i == batches - 1
        timeline.append(BatchTiming(index=i, epoch=0, start_at_s=at_s, wait_s=wait_s,
                                    compute_s=None if last_unmeasured else compute_each_s,
                                    samples=4))
        at_s += wait_s + compute_each_s
    compute_s = compute_each_s * (batches - 1 if ended == "break" else batches)
    return ConsumerRecord(
        batches=batches, samples=4 * batches, tokens=tokens, wait_s=sum(waits),
        compute_s=compute_s, wall_s=at_s,
        epochs=[EpochTiming(epoch=0, started_at_s=0.0, batches=batches, samples=4 * batches,
                            wait_s=sum(waits), compute_s=compute_s, wall_s=at_s,
                            first_batch_s=first_wait_s, ended=ended)],
        timeline=timeline, timeline_stride=1, status=status)


# -- consumer side -----------------------------------------------------------------------------


def test_stall_and_rates_follow_the_counters_exactly():
    record = consumer_record(40, wait_each_s=0.01, compute_each_s=0.04, first_wait_s=0.61,
                             tokens=4000)
    consumer = analyze(generic_run(record)).consumer
    loop_s = 0.61 + 39 * 0.01 + 40 * 0.04  # wait + compute: the time inside the loop
    assert consumer.stall_fraction == pytest.approx(1.0 / loop_s)
    assert consumer.steady_stall_fraction == pytest.approx(0.39 / (0.39 + 39 * 0.04))
    assert consumer.batches_per_s == pytest.approx(40 / loop_s)
    assert consumer.samples_per_s == pytest.approx(160 / loop_s)
    assert consumer.tokens_per_s == pytest.approx(4000 / loop_s)
    assert consumer.demand_batches_per_s == pytest.approx(25.0)
    assert consumer.first_batch_s == pytest.approx(0.61)
    assert consumer.wait_time_s.p50 == pytest.approx(0.01)
    assert consumer.wait_time_s.mean == pytest.approx(1.0 / 40)
    assert consumer.compute_time_s.p99 == pytest.approx(0.04)


def test_demand_ignores_the_step_a_break_left_unmeasured():
    record = consumer_record(30, wait_each_s=0.0, compute_each_s=0.05, first_wait_s=0.2,
                             ended="break")
    consumer = analyze(generic_run(record)).consumer
    assert consumer.demand_batches_per_s == pytest.approx(20.0)
    assert consumer.tokens_per_s is None  # tokens were not counted


def test_zero_batches_gives_no_data_not_an_exception():
    empty = ConsumerRecord(batches=0, samples=0, tokens=None, wait_s=0.0, compute_s=0.0,
                           wall_s=0.01, epochs=[EpochTiming(0, 0.0, 0, 0, 0.0, 0.0, 0.01, None,
                                                            "exhausted")],
                           timeline=[], timeline_stride=1, status="complete")
    run = dataclasses.replace(simulate(FakeRun()), consumer=empty, workers=[])
    analysis = analyze(run)
    consumer = analysis.consumer
    assert (consumer.stall_fraction, consumer.samples_per_s, consumer.batches_per_s,
            consumer.demand_batches_per_s, consumer.wait_time_s) == (None, None, None, None, None)
    assert analysis.diagnosis.verdict == "no-data"
    assert analysis.diagnosis.bottleneck == "unknown"
    assert finding(analysis, "no-batches").severity == "critical"
    assert "no batch" in finding(analysis, "insufficient-data").message
    assert analysis.model is None
    assert analysis.producer.capacity_batches_per_s is None


# -- verdicts ----------------------------------------------------------------------------------


def test_input_bound_when_one_worker_cannot_keep_up():
    # One worker needs 100 ms a batch, the step 20 ms: the loop waits ~80 ms of every 100 ms.
    analysis = analyze(simulate(FakeRun(num_workers=1, production_s=0.1, step_s=0.02)))
    assert analysis.diagnosis.verdict == "input-bound"
    assert analysis.diagnosis.bottleneck == "input pipeline"
    assert analysis.consumer.steady_stall_fraction == pytest.approx(0.8, abs=0.01)
    verdict = finding(analysis, "input-bound")
    assert verdict.severity == "critical"  # the step waits more than it runs
    assert verdict.evidence["steady_stall_fraction"] == analysis.consumer.steady_stall_fraction
    assert "80.0%" in verdict.message and "10.0%" in verdict.message
    assert analysis.diagnosis.thresholds == {"input_bound_stall_fraction": 0.10,
                                             "compute_bound_stall_fraction": 0.03}


def test_compute_bound_when_workers_are_far_ahead():
    analysis = analyze(simulate(FakeRun(num_workers=2, production_s=0.01, step_s=0.05)))
    assert analysis.diagnosis.verdict == "compute-bound"
    assert analysis.diagnosis.bottleneck == "training step"
    assert finding(analysis, "compute-bound").severity == "info"
    assert analysis.consumer.steady_stall_fraction == pytest.approx(0.0, abs=1e-9)


def test_balanced_between_the_thresholds_and_thresholds_are_overridable():
    # Production (21.5 ms) just misses the step (20 ms): ~7% stall, between 3% and 10%.
    run = simulate(FakeRun(num_workers=1, production_s=0.0215, step_s=0.02,
                           worker_cpu_fraction=0.1))
    analysis = analyze(run)
    assert analysis.diagnosis.verdict == "balanced"
    assert analysis.diagnosis.bottleneck == "neither"
    assert 0.03 < analysis.consumer.steady_stall_fraction < 0.10
    stricter = analyze(run, input_bound_stall=0.05, compute_bound_stall=0.01)
    assert stricter.diagnosis.verdict == "input-bound"
    assert stricter.diagnosis.thresholds["input_bound_stall_fraction"] == 0.05
    with pytest.raises(ValueError, match="compute_bound_stall"):
        analyze(run, input_bound_stall=0.02, compute_bound_stall=0.05)


def test_verdict_judges_the_steady_stall_not_the_epoch_start():
    # A 1 s worker start-up in a ~5 s epoch of fast batches: the whole-run stall is ~20%, yet
    # in steady state the step never waits.
    analysis = analyze(simulate(FakeRun(num_workers=2, production_s=0.01, step_s=0.05,
                                        startup_s=1.0)))
    assert analysis.consumer.stall_fraction > 0.15
    assert analysis.diagnosis.verdict == "compute-bound"
    slow = finding(analysis, "slow-first-batch")
    assert slow.evidence["first_batch_s"] == pytest.approx(1.01)
    assert slow.evidence["epoch_share_fraction"] > 0.15
    assert "1.01 s" in slow.message


def test_no_slow_first_batch_without_a_start_up_cost():
    analysis = analyze(simulate(FakeRun(num_workers=2, production_s=0.01, step_s=0.05)))
    assert "slow-first-batch" not in kinds(analysis)


# -- status findings ---------------------------------------------------------------------------


def test_interrupted_and_failed_runs_are_reported():
    interrupted = analyze(simulate(FakeRun(status="interrupted")))
    assert finding(interrupted, "run-interrupted").severity == "warning"
    assert "100 batches" in finding(interrupted, "run-interrupted").message
    assert interrupted.consumer.status == "interrupted"
    failed = analyze(simulate(FakeRun(status="error")))
    error = finding(failed, "loader-error")
    assert error.severity == "critical" and "bad sample 17" in error.message
    assert failed.consumer.error == "ValueError: bad sample 17"
    clean = analyze(simulate(FakeRun()))
    assert not {"run-interrupted", "loader-error"} & set(kinds(clean))


# -- producer side -----------------------------------------------------------------------------


def test_workers_unbalanced_when_one_is_three_times_slower():
    analysis = analyze(simulate(FakeRun(num_workers=2, production_s=0.02,
                                        worker_slowdown={1: 3.0}, worker_cpu_fraction=0.2)))
    unbalanced = finding(analysis, "workers-unbalanced")
    assert unbalanced.evidence["rate_ratio"] == pytest.approx(3.0)
    assert unbalanced.evidence["slowest_worker_id"] == 1
    assert "3.0x" in unbalanced.message
    even = analyze(simulate(FakeRun(num_workers=2, production_s=0.02, worker_cpu_fraction=0.2)))
    assert "workers-unbalanced" not in kinds(even)


def test_per_worker_cpu_sums_every_process_that_served_the_worker_id():
    # Without persistent workers each of 3 epochs starts a new process per worker id.
    run = simulate(FakeRun(num_workers=2, production_s=0.04, epochs=3, batches_per_epoch=30,
                           worker_cpu_fraction=0.5, startup_s=0.1))
    producer = analyze(run).producer
    assert [len(w.pids) for w in run.workers] == [3, 3]
    for summary, record in zip(producer.workers, run.workers):
        assert summary.cpu_s == pytest.approx(0.5 * record.busy_s)
        assert summary.cpu_fraction == pytest.approx(0.5)
        assert summary.rate_batches_per_s == pytest.approx(25.0)
        assert summary.rss_max_bytes == 200 * 2**20
    assert producer.batch_time_s.p50 == pytest.approx(0.04)


def test_latency_bound_capacity_is_workers_times_rate():
    producer = analyze(simulate(FakeRun(num_workers=2, production_s=0.05, step_s=0.01,
                                        worker_cpu_fraction=0.05))).producer
    assert producer.per_worker_batches_per_s == pytest.approx(20.0)
    assert producer.capacity_batches_per_s == pytest.approx(40.0)
    assert producer.cpu_fraction == pytest.approx(0.05)
    assert "2 workers x 20.00 batches/s" in producer.capacity_basis
    assert producer.capacity_samples_per_s == pytest.approx(40.0 * 8)


def test_cpu_bound_workers_beyond_the_cpus_share_them():
    # 4 CPU-bound workers on 2 CPUs: each runs at half speed (100 ms of CPU takes 200 ms), so
    # each worker's rate halves and its CPU fraction reads 0.5; capacity stays at 2 CPUs' worth.
    run = simulate(FakeRun(num_workers=4, production_s=0.1, step_s=0.01,
                           main_step_cpu_fraction=0.1))
    producer = analyze(run).producer
    assert producer.per_worker_batches_per_s == pytest.approx(5.0)
    assert producer.cpu_fraction == pytest.approx(0.5)
    assert producer.cpu_per_batch_s == pytest.approx(0.1)
    assert producer.main_cpu_per_batch_s == pytest.approx(0.001)
    assert producer.capacity_batches_per_s == pytest.approx(20.0, rel=0.03)
    assert "CPU cap" in producer.capacity_basis and "100.0 ms worker CPU" in producer.capacity_basis
    saturated = finding(analyze(run), "cpu-saturated")
    assert saturated.evidence["busy_fraction"] > 0.9
    assert "cpu-saturated" not in kinds(analyze(simulate(FakeRun(worker_cpu_fraction=0.05))))


def test_main_process_capacity_is_one_over_production_time():
    run = simulate(FakeRun(num_workers=0, production_s=0.03, step_s=0.02))
    analysis = analyze(run)
    assert analysis.producer.probe == "main-process"
    assert analysis.producer.capacity_batches_per_s == pytest.approx(1 / 0.03)
    assert analysis.producer.workers[0].id == -1
    assert analysis.producer.cpu_fraction == pytest.approx(1.0)
    assert "30.0 ms" in analysis.producer.capacity_basis
    assert analysis.diagnosis.verdict == "input-bound"


def test_generic_iterable_has_a_verdict_but_no_producer_detail():
    record = consumer_record(60, wait_each_s=0.03, compute_each_s=0.02, first_wait_s=0.05)
    analysis = analyze(generic_run(record))
    assert analysis.diagnosis.verdict == "input-bound"
    assert analysis.producer.capacity_batches_per_s is None
    assert "generic iterable" in finding(analysis, "insufficient-data").message
    assert analysis.model is None


def test_short_run_is_flagged_and_not_modeled():
    analysis = analyze(simulate(FakeRun(batches_per_epoch=12)))
    assert finding(analysis, "short-run").evidence["steady_batches"] == 11
    assert "only 11 steady batches" in finding(analysis, "insufficient-data").message
    assert analysis.model is None
    assert "short-run" not in kinds(analyze(simulate(FakeRun(batches_per_epoch=40))))


def test_findings_are_well_formed():
    runs = [FakeRun(num_workers=1, production_s=0.1), FakeRun(startup_s=1.0, production_s=0.01),
            FakeRun(worker_slowdown={0: 4.0}, status="interrupted"), FakeRun(batches_per_epoch=5)]
    for spec in runs:
        for item in analyze(simulate(spec)).diagnosis.findings:
            assert item.severity in {"info", "warning", "critical"}
            assert item.kind == item.kind.lower() and " " not in item.kind
            assert any(ch.isdigit() for ch in item.message), item.message


# -- the what-if model -------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    FakeRun(num_workers=1, production_s=0.1, worker_cpu_fraction=0.05),
    FakeRun(num_workers=2, production_s=0.01, step_s=0.05),
    FakeRun(num_workers=0, production_s=0.03),
    FakeRun(num_workers=3, production_s=0.05, epochs=3, batches_per_epoch=40, startup_s=0.3,
            worker_cpu_fraction=0.3),
    FakeRun(num_workers=2, production_s=lambda i: 0.2 if i % 25 == 0 else 0.01,
            worker_cpu_fraction=0.2, batches_per_epoch=200),
], ids=["latency-bound", "compute-bound", "main-process", "epochs", "heavy-tail"])
def test_model_reproduces_the_measured_run(spec):
    analysis = analyze(simulate(spec))
    predicted = analysis.model.predict(analysis.model.measured)
    assert predicted.batches_per_s == pytest.approx(analysis.consumer.batches_per_s, rel=0.05)
    assert predicted.stall_fraction == pytest.approx(analysis.consumer.stall_fraction, abs=0.03)


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_model_predicts_latency_bound_scaling(workers):
    # Latency-bound workers (5% CPU): throughput grows with num_workers up to the demand.
    base = FakeRun(num_workers=1, production_s=0.1, step_s=0.02, worker_cpu_fraction=0.05,
                   startup_s=0.2)
    model = analyze(simulate(base)).model
    predicted = model.predict(LoaderSettings(num_workers=workers, prefetch_factor=2))
    actual = analyze(simulate(dataclasses.replace(base, num_workers=workers))).consumer
    assert predicted.batches_per_s == pytest.approx(actual.batches_per_s, rel=0.1)
    assert predicted.stall_fraction == pytest.approx(actual.stall_fraction, abs=0.05)


def test_model_caps_cpu_bound_work_at_the_usable_cpus():
    base = FakeRun(num_workers=1, production_s=0.1, step_s=0.02, main_step_cpu_fraction=0.02)
    model = analyze(simulate(base)).model
    assert model.worker_cpu_fraction == pytest.approx(1.0)
    rates = [model.predict(LoaderSettings(n, 2)).batches_per_s for n in (1, 2, 4, 8)]
    assert rates[1] == pytest.approx(2 * rates[0], rel=0.05)
    assert rates[2] == pytest.approx(rates[1], rel=0.02) and rates[3] == pytest.approx(rates[1])
    assert model.predict(LoaderSettings(8, 2)).limit == "cpu"
    actual = analyze(simulate(dataclasses.replace(base, num_workers=4))).consumer
    assert rates[2] == pytest.approx(actual.batches_per_s, rel=0.1)


def test_model_epoch_start_cost_and_persistent_workers():
    spec = FakeRun(num_workers=2, production_s=0.01, step_s=0.05, epochs=4,
                   batches_per_epoch=40, startup_s=0.5)
    model = analyze(simulate(spec)).model
    assert model.cold_start_s == pytest.approx(0.51)
    settings = LoaderSettings(num_workers=2, prefetch_factor=2, persistent_workers=True)
    predicted = model.predict(settings)
    actual = analyze(simulate(dataclasses.replace(spec, persistent_workers=True))).consumer
    assert predicted.batches_per_s == pytest.approx(actual.batches_per_s, rel=0.05)
    assert predicted.batches_per_s > model.predict(model.measured).batches_per_s
    with pytest.raises(ValueError):
        model.predict(settings, epochs=0)
    with pytest.raises(ValueError):
        model.capacity(-1)


def test_tail_replay_uses_the_prefetch_lead():
    spec = FakeRun(num_workers=2, production_s=lambda i: 0.2 if i % 25 == 0 else 0.01,
                   worker_cpu_fraction=0.2, batches_per_epoch=200, step_s=0.02)
    model = analyze(simulate(spec)).model
    assert model.lead_s(LoaderSettings(2, 2)) == pytest.approx(0.08)  # 2 x 2 / 50 per s
    assert model.tail_wait_s(LoaderSettings(2, 2)) == pytest.approx(0.04 * 0.12, rel=0.05)
    assert model.tail_wait_s(LoaderSettings(2, 5)) == 0.0
    assert model.predict(LoaderSettings(2, 2)).limit == "batch-time tail"


def test_out_of_order_delivery_removes_the_tail_but_not_uniform_slowness():
    heavy = FakeRun(num_workers=2, production_s=lambda i: 0.2 if i % 25 == 0 else 0.01,
                    worker_cpu_fraction=0.2, batches_per_epoch=200, step_s=0.02)
    model = analyze(simulate(heavy)).model
    assert model.tail_wait_s(LoaderSettings(2, 2, in_order=False)) == 0.0
    assert model.predict(LoaderSettings(2, 2, in_order=False)).batches_per_s > \
        model.predict(LoaderSettings(2, 2)).batches_per_s
    # Every batch 0.2 s: the median is the tail, so out-of-order delivery gains nothing.
    uniform = FakeRun(num_workers=2, production_s=lambda i: 0.2, worker_cpu_fraction=0.2,
                      batches_per_epoch=200, step_s=0.02)
    model = analyze(simulate(uniform)).model
    assert model.predict(LoaderSettings(8, 1, in_order=False)).batches_per_s == \
        pytest.approx(model.predict(LoaderSettings(8, 1)).batches_per_s)


# -- helpers -----------------------------------------------------------------------------------


def test_cpu_cap_shares_the_cpus_with_the_main_process():
    # 2 CPUs, 50 ms worker CPU + 50 ms main CPU per batch: 20 batches/s when the step could go
    # faster (demand 40/s); a step capped at 10/s holds 0.5 cores and leaves 1.5 to workers.
    assert cpu_cap_batches_per_s(2, 0.05, 0.05, demand_batches_per_s=40) == pytest.approx(20)
    assert cpu_cap_batches_per_s(2, 0.05, 0.05, demand_batches_per_s=10) == pytest.approx(30)
    at_demand = cpu_cap_batches_per_s(2, 0.05, 0.05, demand_batches_per_s=20)
    assert at_demand == pytest.approx(20)  # the two regimes meet at the demand
    assert cpu_cap_batches_per_s(2, 0.0, 0.05, demand_batches_per_s=20) is None


def test_stats_helpers():
    assert ratio(1.0, 0.0) is None and ratio(None, 2.0) is None and ratio(3.0, 2.0) == 1.5
    assert quantiles([]) is None
    q = quantiles([0.01] * 99 + [1.0])
    assert q.p50 == pytest.approx(0.01) and q.mean == pytest.approx(0.0199)
    assert q.p99 == pytest.approx(0.01 + 0.01 * 0.99)  # linear between the two top values


def test_model_keeps_the_cost_of_receiving_batches():
    # Each ready batch still costs the main thread 2 ms inside next(): with a 10 ms step that is
    # a 1/6 stall no number of workers removes.
    spec = FakeRun(num_workers=2, production_s=0.05, step_s=0.01, receive_s=0.002,
                   worker_cpu_fraction=0.05)
    analysis = analyze(simulate(spec))
    model = analysis.model
    assert model.receive_s == pytest.approx(0.002)
    assert model.predict(model.measured).batches_per_s == pytest.approx(
        analysis.consumer.batches_per_s, rel=0.05)
    many = model.predict(LoaderSettings(num_workers=16, prefetch_factor=2))
    assert many.steady_stall_fraction == pytest.approx(0.002 / 0.012)
    actual = analyze(simulate(dataclasses.replace(spec, num_workers=16))).consumer
    assert many.batches_per_s == pytest.approx(actual.batches_per_s, rel=0.05)


def test_slow_batch_handover_is_reported_with_workers_only():
    spec = FakeRun(num_workers=2, production_s=0.01, step_s=0.01, receive_s=0.003,
                   worker_cpu_fraction=0.05)
    handover = finding(analyze(simulate(spec)), "slow-batch-handover")
    assert handover.severity == "warning"
    assert handover.evidence["loop_share_fraction"] == pytest.approx(0.003 / 0.013)
    assert "3.0 ms" in handover.message
    for quiet in (dataclasses.replace(spec, receive_s=0.0001), FakeRun(num_workers=0)):
        assert "slow-batch-handover" not in kinds(analyze(simulate(quiet)))
