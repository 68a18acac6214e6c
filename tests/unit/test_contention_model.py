"""The throughput model's contention terms on fake-clock runs: other processes' load, the step
slowed by workers taking its cores, a worker's cost from CPU time rather than contended wall
time, the prediction interval from the run's own noise, and the stress command that settles a
proposal the model cannot be sure of."""

from __future__ import annotations

import dataclasses
import html
import json

import pytest

from fake_pipeline import MAIN_PID, FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.recommend import recommend
from pipecheck.render.html import render_html
from pipecheck.render.markdown import render_markdown
from pipecheck.report import build_report, load

SERIAL = FakeRun(num_workers=0, production_s=0.03, step_s=0.02, worker_cpu_fraction=1.0,
                 main_step_cpu_fraction=1.0, batches_per_epoch=200)


def with_host(run, *, others_cpus=None, main_runqueue_s=None):
    """``run`` with other processes' load (cores, spread over the whole run) and the main
    process's run-queue wait set on its host record."""
    host = run.host
    if others_cpus is not None:
        ours = (host.main_cpu_s + (host.workers_cpu_s or 0.0)) / host.duration_s
        busy = 100.0 * (ours + others_cpus) / run.environment.cpu_count
        host = dataclasses.replace(host, system_cpu_percent_mean=busy)
    if main_runqueue_s is not None:
        host = dataclasses.replace(host, processes=[
            dataclasses.replace(p, runqueue_s=main_runqueue_s) if p.pid == MAIN_PID else p
            for p in host.processes])
    return dataclasses.replace(run, host=host)


def test_fair_shares_fill_small_wants_first_and_split_the_rest():
    from pipecheck.analysis.contention import fair_shares  # new in this change

    # 2 cores: a thread wanting 0.2 keeps it; the other 1.8 cores go to 3 full threads.
    assert fair_shares([(1, 0.2), (3, 1.0)], 2.0) == pytest.approx([1.0, 0.6])
    assert fair_shares([(1, 1.0), (1, 0.5)], 2.0) == [1.0, 1.0]  # nothing oversubscribed
    assert fair_shares([(2, 0.9), (1, 1.0), (0.35, 1.0)], 2.0) == pytest.approx(
        [2.0 / 3.35 / 0.9, 2.0 / 3.35, 2.0 / 3.35])
    with pytest.raises(ValueError):
        fair_shares([(1, 1.0)], 0.0)


def test_other_processes_load_lowers_the_prediction_for_workers():
    run = simulate(SERIAL)
    quiet = analyze(run).model
    busy = analyze(with_host(run, others_cpus=1.0)).model
    one = LoaderSettings(num_workers=1)
    assert busy.load.others_cpus == pytest.approx(1.0)
    # The worker (1 core) and the step (1 core) now share 2 cores with one busy neighbour.
    assert busy.predict(one).batches_per_s < 0.85 * quiet.predict(one).batches_per_s


def test_the_step_slows_when_workers_take_its_cores():
    # A step on 2 intra-op threads measured alone; one CPU-bound worker makes 3 runnable
    # threads on 2 cores, so each gets 2/3 of a core and the step takes 1.5x as long.
    spec = dataclasses.replace(SERIAL, main_step_cpu_fraction=2.0)
    model = analyze(simulate(spec)).model
    assert model.step_s(0) == pytest.approx(0.02)
    assert model.step_s(1) == pytest.approx(0.03, rel=0.05)
    prediction = model.predict(LoaderSettings(num_workers=1))
    # The old model overlapped a 30 ms worker with the 20 ms step: 33 batches/s.
    assert prediction.steady_batches_per_s < 0.8 * (1 / 0.03)


def test_a_worker_pays_the_cpu_time_not_the_contended_wall_time():
    # The main process produced each batch in 60 ms of wall time but only 30 ms of CPU, and
    # waited for a core half the time it wanted one: a worker on a quiet host needs 30 ms
    # (the step, mostly waiting on a device, leaves it the core).
    spec = dataclasses.replace(SERIAL, production_s=0.06, worker_cpu_fraction=0.5,
                               main_step_cpu_fraction=0.1)
    run = simulate(spec)
    main = next(p for p in run.host.processes if p.pid == MAIN_PID)
    model = analyze(with_host(run, main_runqueue_s=main.cpu_s)).model
    assert model.load.share == pytest.approx(0.5)
    assert model.worker_cpu_per_batch_s == pytest.approx(0.03)
    assert model.worker_off_s == pytest.approx(0.0, abs=1e-9)
    capacity, _ = model.capacity(1, others_cpus=0.0)
    assert capacity == pytest.approx(1 / 0.03, rel=0.05)


def test_batch_means_spread_follows_the_blocks():
    from pipecheck.analysis.stats import batch_means_spread  # new in this change

    assert batch_means_spread([1.0] * 40) == 0.0
    slow_half = [1.0] * 20 + [3.0] * 20
    assert batch_means_spread(slow_half) == pytest.approx(
        1.833 * 1.0540925533894598 * (1.1 ** 0.5) / 2.0)
    assert batch_means_spread([1.0] * 19) is None


NOISY = dataclasses.replace(
    SERIAL, production_s=lambda i: 0.05 if (i // 40) % 2 else 0.03, batches_per_epoch=400)
# Noisy, but less: an interval about 2.5x wide, under UNCERTAIN_WIDTH, so it is printed.
MILD = dataclasses.replace(NOISY, production_s=lambda i: 0.04 if (i // 40) % 2 else 0.03)


def test_recommendations_carry_an_interval_from_the_runs_noise_in_json_and_terminal():
    run = simulate(MILD)
    report = build_report(run)
    rec = next(r for r in report.recommendations if r.setting == "num_workers")
    expected = rec.expected
    assert expected.samples_per_s_low < expected.samples_per_s < expected.samples_per_s_high
    assert expected.uncertain is False
    assert report.to_dict()["recommendations"][0]["expected"]["samples_per_s_low"] == \
        pytest.approx(expected.samples_per_s_low)
    assert report.to_dict()["recommendations"][0]["expected"]["uncertain"] is False
    text = report.render(width=200, verbose=True)  # the caption names the model error
    assert f"{expected.samples_per_s_low:,.0f}-{expected.samples_per_s_high:,.0f}" in text
    # The run's own noise sets the inner interval; the model's measured error widens it.
    from pipecheck.records import SERIAL_TO_WORKERS_ERROR

    model = analyze(run).model
    proposed = LoaderSettings(num_workers=rec.proposed)
    low, high = model.interval(proposed, model_error=False)
    samples = model.samples_per_batch
    below, above = SERIAL_TO_WORKERS_ERROR  # measured at num_workers=0, proposed with workers
    assert expected.samples_per_s_low == pytest.approx(low * samples * (1 - below))
    # ... up to the step's own ceiling (a 20 ms step: 50 batches/s), which no noise outruns.
    assert high <= 50.0 * (1 + 1e-9)
    assert expected.samples_per_s_high == pytest.approx(
        min(high * (1 + above), 50.0) * samples)
    quiet = analyze(simulate(SERIAL)).model
    quiet_low, quiet_high = quiet.interval(LoaderSettings(num_workers=1), model_error=False)
    assert quiet_high - quiet_low < 0.2 * (high - low)
    assert ("model's own error (-10% to +5% from a num_workers=0 run, as measured on the"
            " calibration suite" in " ".join(text.split()))


def test_saved_reports_without_the_interval_still_load(tmp_path):
    data = build_report(simulate(SERIAL)).to_dict()
    for rec in data["recommendations"]:
        del rec["expected"]["samples_per_s_low"], rec["expected"]["samples_per_s_high"]
        del rec["expected"]["uncertain"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert load(str(path)).recommendations[0].expected.samples_per_s_low is None
    assert load(str(path)).recommendations[0].expected.uncertain is None


def test_an_interval_too_wide_to_bound_anything_is_called_uncertain_in_every_output(tmp_path):
    from pipecheck.records import UNCERTAIN_WIDTH

    # Production alternates 30 and 80 ms in blocks of 40 batches: a spread no model error
    # is needed for.
    noisier = dataclasses.replace(
        NOISY, production_s=lambda i: 0.08 if (i // 40) % 2 else 0.03)
    report = build_report(simulate(noisier))
    expected = report.recommendations[0].expected
    assert expected.samples_per_s_high / expected.samples_per_s_low > UNCERTAIN_WIDTH
    assert expected.uncertain is True
    assert report.to_dict()["recommendations"][0]["expected"]["uncertain"] is True
    interval = f"({expected.samples_per_s_low:,.0f}-{expected.samples_per_s_high:,.0f})"
    for text in (report.render(width=200, verbose=True), render_markdown(report),
                 render_html(report)):
        flat = html.unescape(" ".join(text.split()))
        assert "uncertain: its 90% interval is over 3x wide" in flat
        assert "'pipecheck stress' run, or wrap(tune=True) in the run, measures it" in flat
        assert interval not in flat
    short = " ".join(report.render(width=200).split())
    assert "(uncertain: its 90% interval is over 3x wide)" in short and interval not in short
    # The reason names the stress command (with the run's noise alone, its interval is
    # under 3x wide and printed).
    assert "--workers 0,1,2 --step-time " in report.recommendations[0].reason
    # A report written before the flag: the reader judges the range itself.
    data = report.to_dict()
    del data["recommendations"][0]["expected"]["uncertain"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = load(str(path))
    assert old.recommendations[0].expected.uncertain is None
    assert "uncertain: its 90% interval" in " ".join(old.render(width=200).split())


def test_an_uncertain_proposal_names_the_stress_command_that_settles_it():
    run = simulate(NOISY)
    unsure = [r for r in recommend(run, analyze(run)) if r.setting == "num_workers"][0]
    # 2 workers proposed, but 1 worker's interval overlaps theirs: measure 0, 1 and 2.
    assert unsure.proposed == 2
    assert "pipecheck stress" in unsure.reason and "--workers 0,1,2 --step-time " in unsure.reason
    quiet = simulate(SERIAL)
    certain = [r for r in recommend(quiet, analyze(quiet)) if r.setting == "num_workers"][0]
    assert "pipecheck stress" not in certain.reason


def with_own_child(run, cpus):
    """``run`` with a child process of its own (not a worker) busy ``cpus`` cores' worth,
    counted in the machine's busy CPU as well."""
    host = run.host
    child = dataclasses.replace(host.processes[0], pid=4242, role="child", worker_id=None,
                                cpu_s=cpus * host.duration_s)
    busy = host.system_cpu_percent_mean + 100.0 * cpus / run.environment.cpu_count
    return dataclasses.replace(run, host=dataclasses.replace(
        host, processes=[*host.processes, child], system_cpu_percent_mean=busy))


LIGHT_STEP = dataclasses.replace(SERIAL, main_step_cpu_fraction=0.1)


def test_processes_outside_the_run_keep_their_cores():
    # One core taken by another session's process: the workers share the one core left, so a
    # second CPU-bound worker adds nothing (it cannot take the neighbour's core).
    model = analyze(with_host(simulate(LIGHT_STEP), others_cpus=1.0)).model
    assert model.load.cores_left() == pytest.approx(1.0)
    one, two = (model.predict(LoaderSettings(num_workers=n)).steady_batches_per_s
                for n in (1, 2))
    assert two == pytest.approx(one, rel=0.05)


def test_the_runs_own_children_share_cores_thread_by_thread():
    # The same core's worth used by a child of the run (same scheduling group): a second
    # worker takes a fair part of it, so two workers beat one.
    model = analyze(with_own_child(simulate(LIGHT_STEP), 1.0)).model
    assert model.load.others_cpus == pytest.approx(0.0, abs=1e-9)
    assert model.load.children_cpus == pytest.approx(1.0)
    one, two = (model.predict(LoaderSettings(num_workers=n)).steady_batches_per_s
                for n in (1, 2))
    assert two > 1.2 * one


def test_processes_in_the_runs_scheduling_group_share_cores_thread_by_thread():
    # The same core's worth used by a process outside the run but in its group (a job started
    # from the same shell): the scans saw all of the others' CPU in the group, so it is taken
    # off "others" and competes per thread, and a second worker takes a fair part of it.
    run = with_host(simulate(LIGHT_STEP), others_cpus=1.0)
    scanned = dataclasses.replace(run.host, others_scanned_s=10.0, others_cpu_s=10.0,
                                  others_same_group_cpu_s=10.0)
    model = analyze(dataclasses.replace(run, host=scanned)).model
    assert model.load.others_cpus == pytest.approx(0.0, abs=1e-9)
    assert model.load.same_group_cpus == pytest.approx(1.0)
    one, two = (model.predict(LoaderSettings(num_workers=n)).steady_batches_per_s
                for n in (1, 2))
    assert two > 1.2 * one
    # Half of the others' CPU in the group: half a core stays with the other groups.
    half = dataclasses.replace(scanned, others_same_group_cpu_s=5.0)
    load = analyze(dataclasses.replace(run, host=half)).model.load
    assert load.others_cpus == pytest.approx(0.5)
    assert load.same_group_cpus == pytest.approx(0.5)


def test_the_contended_host_finding_names_the_part_in_the_runs_group():
    run = with_host(simulate(LIGHT_STEP), others_cpus=1.0)
    scanned = dataclasses.replace(run.host, others_scanned_s=10.0, others_cpu_s=10.0,
                                  others_same_group_cpu_s=8.0)
    report = build_report(dataclasses.replace(run, host=scanned))
    finding = next(f for f in report.diagnosis.findings if f.kind == "contended-host")
    assert finding.evidence["same_group_cpus"] == pytest.approx(0.8, rel=0.05)
    assert "0.8 of those CPUs went to processes in this run's CPU scheduling group" in (
        finding.message)


def test_markdown_and_html_show_the_interval_beside_the_figure():
    report = build_report(simulate(MILD))
    expected = report.recommendations[0].expected
    interval = f"({expected.samples_per_s_low:,.0f}-{expected.samples_per_s_high:,.0f})"
    assert interval in render_markdown(report)
    assert interval in render_html(report)


def test_no_recommendation_on_a_busy_host_points_to_stress():
    # Other processes leave half a core: a worker would load slower than the main process.
    # The main process waited for a core as long as it ran (it got half of one when runnable).
    serial = simulate(LIGHT_STEP)
    run = with_host(serial, others_cpus=1.5, main_runqueue_s=serial.host.main_cpu_s)
    report = build_report(run)
    assert report.diagnosis.verdict == "input-bound"
    assert not [r for r in report.recommendations if r.setting == "num_workers"]
    text = report.render(width=200)
    assert "no change is predicted to help on the cores left to this run (other processes " \
           "used 1.5 of 2 CPUs)" in text
    assert "'pipecheck stress FILE.py:make_loader --workers 0,1,2'" in text


def test_a_serial_run_charges_workers_the_estimated_hand_over():
    # Measured at num_workers=0 the main thread never received a batch from a worker; the
    # model charges the measured-elsewhere hand-over (by the batch's tensor count) instead of 0.
    from pipecheck.analysis.model import (RECEIVE_FIXED_S, RECEIVE_S_PER_TENSOR,
                                          SHM_MAIN_S_PER_BYTE)

    run = simulate(FakeRun(num_workers=0, prefetch_factor=None, step_s=0.004,
                           production_s=0.1, worker_cpu_fraction=0.05,
                           main_step_cpu_fraction=0.5))
    unmeasured = analyze(run).model
    assert unmeasured.receive_s == pytest.approx(RECEIVE_FIXED_S + 2 * RECEIVE_S_PER_TENSOR)
    run = dataclasses.replace(run, consumer=dataclasses.replace(
        run.consumer, batch_bytes=8_000_000, batch_tensors=32))  # a dict of 32 features
    model = analyze(run).model
    # the hand-over by tensor count, and the first touch of the batch's shared-memory pages
    assert model.receive_s == pytest.approx(RECEIVE_FIXED_S + 32 * RECEIVE_S_PER_TENSOR
                                            + 8_000_000 * SHM_MAIN_S_PER_BYTE)
    assert any("not measured (no workers)" in a for a in model.assumptions)
    many = model.predict(LoaderSettings(num_workers=64))
    assert many.steady_batches_per_s <= 1.0 / (0.004 + model.receive_s) * 1.001


def test_only_the_runnable_part_of_a_step_stretches_when_workers_take_cores():
    # A step that sleeps (or waits on a GPU) most of its time keeps under one thread runnable:
    # a worker taking cores slows only its CPU part. Seen under load: a 20 ms sleeping step
    # predicted at 26.6 ms beside 2 workers, which hid a 2-worker gain.
    from pipecheck.analysis.model import scaled_step_s

    assert scaled_step_s(0.02, 0.05, 3.0) == pytest.approx(0.02 * (0.95 + 0.05 * 3.0))
    assert scaled_step_s(0.2, 2.0, 1.25) == pytest.approx(0.25)  # all runnable: all stretches
    assert scaled_step_s(0.2, 1.0, 1.0) == pytest.approx(0.2)


def test_a_serial_producer_starved_of_cores_is_still_cpu_bound():
    # num_workers=0 production that computes all the time it runs but gets a core only 27% of
    # the time it wants one: 27% CPU per busy second alone reads as latency-bound (and would
    # invite many workers); its run-queue wait makes it CPU-bound.
    spec = dataclasses.replace(SERIAL, worker_cpu_fraction=0.27)
    run = simulate(spec)
    assert analyze(run).producer.workers_class == "latency-bound"
    main = next(p for p in run.host.processes if p.pid == MAIN_PID)
    starved = with_host(run, main_runqueue_s=main.cpu_s * 0.73 / 0.27)
    producer = analyze(starved).producer
    assert producer.workers_class == "cpu-bound"
    assert "waited for a core about 73.0%" in producer.workers_class_basis


def test_the_capacity_cpu_cap_counts_only_the_cores_left_to_the_run():
    # Two workers (50 ms a batch, 45% of it on a CPU) beside a light step: with another
    # group's process on one of the 2 cores, the CPU cap on capacity counts the one core left.
    spec = dataclasses.replace(SERIAL, num_workers=2, production_s=0.05,
                               worker_cpu_fraction=0.45, main_step_cpu_fraction=0.1,
                               contention=False)
    run = simulate(spec)
    quiet = analyze(run).producer
    busy = analyze(with_host(run, others_cpus=1.0)).producer
    assert "CPU cap" in quiet.capacity_basis and "(2 usable CPUs" in quiet.capacity_basis
    assert "(1.0 of 2 usable CPUs left to this run" in busy.capacity_basis
    assert busy.capacity_batches_per_s <= quiet.capacity_batches_per_s


def with_intra_op(run, *, threads, thread_share):
    """``run`` recorded with ``threads`` torch intra-op threads, the calling thread's CPU
    while producing ``thread_share`` of the process's."""
    consumer = dataclasses.replace(
        run.consumer, sampled_wait_thread_cpu_s=run.consumer.sampled_wait_cpu_s * thread_share)
    environment = dataclasses.replace(run.environment, intra_op_threads=threads)
    return dataclasses.replace(run, consumer=consumer, environment=environment)


def test_intra_op_inflated_production_is_charged_to_workers_at_the_calling_threads_cpu():
    # num_workers=0 production whose process CPU was twice the calling thread's on torch's 2
    # intra-op threads: a worker (one thread) is charged the thread's half, the interval runs
    # from the process's CPU to the calling thread's, and a finding says why.
    run = simulate(SERIAL)
    plain = analyze(run).model
    inflated_run = with_intra_op(run, threads=2, thread_share=0.5)
    inflated = analyze(inflated_run).model
    assert inflated.worker_cpu_per_batch_s == pytest.approx(plain.worker_cpu_per_batch_s / 2)
    assert inflated.worker_cpu_range_s == (
        pytest.approx(plain.worker_cpu_per_batch_s / 2),
        pytest.approx(plain.worker_cpu_per_batch_s))
    one = LoaderSettings(num_workers=1)
    low, high = inflated.interval(one)
    assert low <= plain.predict(one).batches_per_s * 1.001
    assert high >= inflated.predict(one).batches_per_s
    report = build_report(inflated_run)
    finding = next(f for f in report.diagnosis.findings if f.kind == "intra-op-threads")
    assert finding.evidence["inflation"] == pytest.approx(2.0)
    assert "pipecheck stress" in finding.message
    workers = next(r for r in report.recommendations if r.setting == "num_workers")
    assert "inflated by torch's intra-op threads" in workers.reason
    # The num_workers=0 prediction itself keeps the measured cost: the main process keeps
    # its threads.
    zero = LoaderSettings(num_workers=0)
    assert inflated.predict(zero).batches_per_s == pytest.approx(plain.predict(zero).batches_per_s)


@pytest.mark.parametrize("threads, thread_share", [(1, 0.5), (2, 0.9), (None, 0.5)])
def test_no_intra_op_inflation_with_one_thread_or_a_small_gap(threads, thread_share):
    run = with_intra_op(simulate(SERIAL), threads=threads, thread_share=thread_share)
    model = analyze(run).model
    assert model.worker_cpu_range_s is None
    assert model.worker_cpu_per_batch_s == pytest.approx(
        analyze(simulate(SERIAL)).model.worker_cpu_per_batch_s)
    assert all(f.kind != "intra-op-threads" for f in build_report(run).diagnosis.findings)


def test_a_pinned_run_counts_only_the_load_on_its_own_cpus():
    # 8 CPUs, this run may use 2 of them (affinity): its CPUs were 100% busy, the machine 25%.
    # Spread evenly, the others' 1 core would put a quarter on our CPUs; measured on them, it
    # is the whole core.
    run = simulate(dataclasses.replace(LIGHT_STEP, usable_cpus=2))
    environment = dataclasses.replace(run.environment, cpu_count=8, usable_cpus=2)
    ours = (run.host.main_cpu_s + (run.host.workers_cpu_s or 0.0)) / run.host.duration_s
    host = dataclasses.replace(run.host, system_cpu_percent_mean=25.0,
                               usable_cpu_percent_mean=100.0 * (ours + 1.0) / 2)
    spread = analyze(dataclasses.replace(run, environment=environment,
                                         host=dataclasses.replace(host,
                                                                  usable_cpu_percent_mean=None)))
    pinned = analyze(dataclasses.replace(run, environment=environment, host=host))
    assert pinned.model.load.others_cpus == pytest.approx(1.0)
    assert spread.model.load.others_cpus == pytest.approx((2.0 - ours) * 2 / 8)


def test_other_groups_above_the_fair_level_are_held_to_it():
    # Two other groups (e.g. two other sessions) used 0.75 core each of 2, the run a little.
    # Max-min over three groups gives each 2/3 of a core: the others drop to 2/3 when this run
    # wants more, so it gets 2/3, not the 0.5 "they keep their cores" would leave.
    run = with_host(simulate(LIGHT_STEP), others_cpus=1.5)
    scanned = dataclasses.replace(run.host, others_scanned_s=10.0, others_cpu_s=15.0,
                                  others_same_group_cpu_s=0.0,
                                  others_groups_cpu_s=[7.5, 7.5])
    load = analyze(dataclasses.replace(run, host=scanned)).model.load
    assert load.other_groups == pytest.approx((0.75, 0.75))
    assert load.cores_left() == pytest.approx(2.0 / 3.0)
    # A small group keeps what it used; the big one is held to the level.
    uneven = dataclasses.replace(scanned, others_groups_cpu_s=[13.0, 2.0])
    load = analyze(dataclasses.replace(run, host=uneven)).model.load
    assert load.cores_left() == pytest.approx((2.0 - 0.2) / 2)
    # Load no scan could attribute (another container's) keeps its cores (the run keeps at
    # least what it used).
    unseen = dataclasses.replace(scanned, others_groups_cpu_s=[])
    load = analyze(dataclasses.replace(run, host=unseen)).model.load
    assert load.cores_left() == pytest.approx(max(0.5, load.own_cpus))


def test_a_group_that_used_less_than_the_level_keeps_it():
    run = with_host(simulate(LIGHT_STEP), others_cpus=0.4)
    scanned = dataclasses.replace(run.host, others_scanned_s=10.0, others_cpu_s=4.0,
                                  others_same_group_cpu_s=0.0, others_groups_cpu_s=[4.0])
    load = analyze(dataclasses.replace(run, host=scanned)).model.load
    assert load.cores_left() == pytest.approx(1.6)


def test_a_very_noisy_run_never_gives_an_interval_down_to_zero():
    # A short run on a busy host: the batch means of loop time spread by 150%. The interval is
    # about loop time, so the rate's low end is r / 2.5, never 0, and its high end bounded.
    model = dataclasses.replace(analyze(simulate(SERIAL)).model, noise_fraction=1.5)
    one = LoaderSettings(num_workers=1)
    rate = model.predict(one).batches_per_s
    low, high = model.interval(one, model_error=False)
    assert low == pytest.approx(rate / 2.5, rel=0.05)
    assert rate < high <= rate * 10.001
    from pipecheck.records import SERIAL_TO_WORKERS_ERROR

    assert model.interval(one)[0] == pytest.approx(low * (1 - SERIAL_TO_WORKERS_ERROR[0]))
    # Small noise: about +-h, as before.
    quiet = dataclasses.replace(model, noise_fraction=0.05)
    low, high = quiet.interval(one, model_error=False)
    assert low == pytest.approx(rate / 1.05, rel=0.02) and high == pytest.approx(rate / 0.95,
                                                                                rel=0.02)


def test_a_few_slow_batches_over_many_seconds_still_support_a_recommendation():
    # 8 batches of 2 s each (num_workers=0 production crawling on a busy host): 7 steady
    # batches over 14 s are enough; 8 fast ones over a fraction of a second are not.
    slow = build_report(simulate(dataclasses.replace(SERIAL, production_s=2.0,
                                                     batches_per_epoch=8)))
    assert any(r.setting == "num_workers" for r in slow.recommendations)
    assert all(f.kind != "short-run" for f in slow.diagnosis.findings)
    fast = build_report(simulate(dataclasses.replace(SERIAL, batches_per_epoch=8)))
    assert not fast.recommendations
    assert any(f.kind == "short-run" for f in fast.diagnosis.findings)


def test_a_run_stopped_inside_its_epoch_is_predicted_over_whole_epochs():
    # 8 batches seen of a 64-batch epoch: the worker start-up of an epoch is spread over the
    # epoch's 64 batches, not the 8 the run happened to see.
    run = simulate(dataclasses.replace(SERIAL, production_s=2.0, batches_per_epoch=8))
    long_epoch = dataclasses.replace(run, loader=dataclasses.replace(run.loader,
                                                                     batches_per_epoch=64))
    short, full = analyze(run).model, analyze(long_epoch).model
    assert (short.batches, full.batches) == (8, 64)
    one = LoaderSettings(num_workers=1)
    assert full.predict(one).batches_per_s > short.predict(one).batches_per_s


def test_a_cheaper_worker_is_not_held_back_by_old_batch_times():
    # num_workers=0 production of 3 s a batch, 90% of it on the calling thread's CPU: a worker
    # predicted at a tenth of that CPU is bounded by the step, not by replaying the measured
    # 3 s batches.
    run = simulate(dataclasses.replace(SERIAL, production_s=3.0, step_s=0.08,
                                       batches_per_epoch=8))
    run = dataclasses.replace(run, loader=dataclasses.replace(run.loader, batches_per_epoch=64))
    model = analyze(run).model
    one = LoaderSettings(num_workers=1)
    measured = model.predict(one).batches_per_s
    cheap = dataclasses.replace(model, worker_cpu_per_batch_s=model.worker_cpu_per_batch_s / 10)
    assert cheap.predict(one).batches_per_s > 5 * measured


def test_a_starved_pools_interval_reaches_free_production():
    model = analyze(starved_pool_run()).model
    assert model.worker_cpu_range_s[0] == 0.0


def test_an_active_intra_op_pool_counts_as_runnable_threads_beside_workers():
    # num_workers=0 on 2 cores with torch's 2 intra-op threads active: beside CPU-bound
    # workers the main process counts as 2 runnable threads during the step and its other
    # thread for POOL_SPIN_S after it (OpenMP's busy-wait), so the workers get less than the
    # whole cores.
    from pipecheck.analysis.model import POOL_SPIN_S, _cycle

    spec = dataclasses.replace(SERIAL, production_s=0.4)
    run = with_intra_op(simulate(spec), threads=2, thread_share=0.5)
    model = analyze(run).model
    assert model.pool_threads == 2
    idle = dataclasses.replace(model, pool_threads=0)
    two = LoaderSettings(num_workers=2)
    share = model.shares(2).worker_share
    assert 0.5 < share <= idle.shares(2).worker_share + 1e-9
    assert model.predict(two).batches_per_s <= idle.predict(two).batches_per_s
    # Producer-bound: 2 workers x their share over the calling thread's CPU per batch.
    expected = 2 * share / model.worker_cpu_per_batch_s
    assert model.capacity(2)[0] == pytest.approx(expected, rel=0.02)
    assert any("busy-wait" in words for words in model.assumptions)
    # The spin tail takes cores between steps: without the pool the workers get more.
    load = model.load
    args = (2, 1.0 / model.demand_batches_per_s, None, model.worker_cpu_per_batch_s, 0.0, 1.0,
            model.receive_s, load.step_threads(), load.group_runnable(), load.cores_left())
    assert POOL_SPIN_S > 0
    assert _cycle(*args, pool_threads=2).worker_share < _cycle(*args).worker_share
    # The serial prediction is what was measured: the pool stays as it was.
    zero = LoaderSettings(num_workers=0)
    assert model.predict(zero).batches_per_s == pytest.approx(
        idle.predict(zero).batches_per_s)


@pytest.mark.parametrize("threads, thread_share", [(1, 0.5), (2, 0.9), (None, 0.5)])
def test_no_pool_threads_without_an_active_pool(threads, thread_share):
    run = with_intra_op(simulate(SERIAL), threads=threads, thread_share=thread_share)
    assert analyze(run).model.pool_threads == 0


def test_no_pool_threads_when_workers_were_measured_or_the_host_was_not():
    with_workers = with_intra_op(simulate(dataclasses.replace(SERIAL, num_workers=2)),
                                 threads=2, thread_share=0.5)
    assert analyze(with_workers).model.pool_threads == 0
    hostless = with_intra_op(simulate(dataclasses.replace(SERIAL, with_host=False)),
                             threads=2, thread_share=0.5)
    assert analyze(hostless).model.pool_threads == 0


def test_a_step_on_several_cores_marks_the_pool_active():
    # No inflation while producing, but the step itself ran on 1.5 cores.
    run = with_intra_op(simulate(dataclasses.replace(SERIAL, main_step_cpu_fraction=1.5)),
                        threads=2, thread_share=1.0)
    assert analyze(run).model.pool_threads == 2


def test_cpu_bound_workers_beside_an_active_pool_stay_within_the_cores_left():
    from pipecheck.recommend.limits import pool_worker_limit
    # 8 cores, production 10x the step: the fair-share model alone would go past the cores.
    spec = dataclasses.replace(SERIAL, usable_cpus=8, production_s=0.2)
    run = with_intra_op(simulate(spec), threads=8, thread_share=0.5)
    analysis = analyze(run)
    assert analysis.model.pool_threads == 8
    assert pool_worker_limit(analysis.model) == 8
    workers = next(r for r in recommend(run, analysis) if r.setting == "num_workers")
    assert 1 <= workers.proposed <= 8
    busy = with_host(run, others_cpus=5.0)
    busy_analysis = analyze(busy)
    limit = pool_worker_limit(busy_analysis.model)
    assert limit < 8
    proposals = [r for r in recommend(busy, busy_analysis) if r.setting == "num_workers"]
    assert all(r.proposed <= limit for r in proposals)


def starved_pool_run():
    """A serial run on 2 cores whose 2 intra-op threads waited for a core half the time they
    wanted one (production inflated 2x over the calling thread), the other core taken by
    another process."""
    spec = dataclasses.replace(SERIAL, production_s=0.4)
    run = with_intra_op(simulate(spec), threads=2, thread_share=0.5)
    busy_s = run.host.main_cpu_s  # as long waiting for a core as running
    return with_host(run, others_cpus=1.0, main_runqueue_s=busy_s)


def test_a_starved_pool_gets_workers_proposed_without_a_prediction():
    run = starved_pool_run()
    analysis = analyze(run)
    assert analysis.model.pool_starved
    workers = [r for r in recommend(run, analysis) if r.setting == "num_workers"]
    assert len(workers) == 1
    proposal = workers[0]
    assert proposal.current == 0 and proposal.proposed == 1  # the one core left to the run
    assert proposal.expected.samples_per_s is None
    assert proposal.expected.samples_per_s_low is None
    assert proposal.expected.note == "not predictable from this run"
    assert "waited for a core 50.0%" in proposal.reason
    assert "'pipecheck stress FILE.py:make_loader --workers 0,1 --step-time " in proposal.reason
    assert "torch_num_threads=1 (the change below)" in proposal.reason
    # After it, one thread for the main process, with no figure either, ending the chain.
    threads = next(r for r in recommend(run, analysis) if r.setting == "torch_num_threads")
    assert (threads.current, threads.proposed) == (2, 1)
    assert threads.expected.samples_per_s is None
    assert "torch.set_num_threads(1)" in threads.reason
    assert "--workers 1 --torch-threads 1,2 --step train.py:step" in threads.reason
    assert [r.setting for r in recommend(run, analysis)] == ["num_workers", "torch_num_threads"]
    # It reaches the JSON and the terminal as "not predicted".
    report = build_report(run)
    saved = json.loads(report.to_json())
    entry = next(r for r in saved["recommendations"] if r["setting"] == "num_workers")
    assert entry["expected"]["samples_per_s"] is None
    assert "not predictable from this run" in report.render(width=120)


def test_a_pool_with_its_cores_is_not_starved():
    spec = dataclasses.replace(SERIAL, production_s=0.4)
    run = with_intra_op(simulate(spec), threads=2, thread_share=0.5)
    analysis = analyze(run)
    assert analysis.model.pool_threads == 2 and not analysis.model.pool_starved
    workers = next(r for r in recommend(run, analysis) if r.setting == "num_workers")
    assert workers.expected.samples_per_s is not None


def test_a_step_on_a_gpu_leaves_the_pool_out_of_the_workers_way():
    from pipecheck.records import DeviceRecord
    run = with_intra_op(simulate(dataclasses.replace(SERIAL, production_s=0.4)),
                        threads=2, thread_share=0.5)
    on_gpu = dataclasses.replace(run, device=DeviceRecord(
        status="ok", backend="cuda", batches=run.consumer.batches, idle_s=1.0,
        idle_fraction=0.5))
    assert analyze(run).model.pool_threads == 2
    assert analyze(on_gpu).model.pool_threads == 0


def test_a_reason_names_an_interval_too_wide_to_bound_anything_in_words():
    # Production alternating 30 and 120 ms in blocks of 40 batches: even the run's own noise
    # spans over 3x, so the reason says "uncertain" and names the stress run, not a range.
    run = simulate(dataclasses.replace(
        NOISY, production_s=lambda i: 0.12 if (i // 40) % 2 else 0.03))
    rec = next(r for r in recommend(run, analyze(run)) if r.setting == "num_workers")
    assert "The interval from this run's noise is over 3x wide (uncertain)" in rec.reason
    assert "'pipecheck stress FILE.py:make_loader --workers 0,1,2 --step-time " in rec.reason
    assert " to " not in rec.reason.split("The interval from this run's noise")[1].split(":")[0]


@pytest.mark.parametrize("run", [SERIAL, LIGHT_STEP])
def test_the_stress_command_reports_suggest_emulates_the_measured_step(run):
    from pipecheck.analysis.consumer import stress_command, steady_step_s, step_on_cpu_fraction

    record = simulate(run)
    command = stress_command(record.consumer, "0,1,2")
    step_s = steady_step_s(record.consumer)
    assert command.startswith("'pipecheck stress FILE.py:make_loader --workers 0,1,2 ")
    assert f"--step-time {step_s:.3g}" in command
    share = step_on_cpu_fraction(record.consumer)
    assert ("--step-cpu" in command) == (share is not None and share >= 0.05)
    if share is not None and share >= 0.05:
        assert f"--step-cpu {share:.2f}" in command
    # the command parses: the stress CLI accepts every option it names
    from pipecheck.cli import build_parser

    args = build_parser().parse_args(command.strip("'").split()[1:])
    assert args.step_time.mean_s == pytest.approx(float(f"{step_s:.3g}"))


def test_a_serial_run_charges_workers_the_shared_memory_hand_over_per_byte():
    # Measured at num_workers=0 the batch never went through /dev/shm: a worker pays a fixed
    # part and a part per byte more CPU per batch (torch collates into fresh shared memory),
    # so large cheap batches gain less from a worker than the main process's production time
    # alone says.
    from pipecheck.analysis.model import SHM_WORKER_FIXED_S, SHM_WORKER_S_PER_BYTE

    run = simulate(FakeRun(num_workers=0, prefetch_factor=None, step_s=0.004,
                           production_s=0.004, worker_cpu_fraction=0.9,
                           main_step_cpu_fraction=0.5))
    small = analyze(dataclasses.replace(run, consumer=dataclasses.replace(
        run.consumer, batch_bytes=1_000, batch_tensors=2))).model
    large = analyze(dataclasses.replace(run, consumer=dataclasses.replace(
        run.consumer, batch_bytes=10_000_000, batch_tensors=2))).model
    extra = large.worker_cpu_per_batch_s - small.worker_cpu_per_batch_s
    assert extra == pytest.approx(SHM_WORKER_S_PER_BYTE * (10_000_000 - 1_000))
    assert small.worker_cpu_per_batch_s > SHM_WORKER_FIXED_S
    one = LoaderSettings(num_workers=1)
    assert large.predict(one).steady_batches_per_s < small.predict(one).steady_batches_per_s
    assert any("through shared memory" in a for a in large.assumptions)


def test_a_proposal_must_beat_the_measured_rate_not_only_the_models_figure():
    # From the measured settings the bar is the higher of the model's own figure for them and
    # the steady rate the run measured: a CPU step measured at 1,418 samples/s, whose model
    # figure for 0 workers was 1,271, was proposed 1 worker at 1,419 (it achieved 1,128).
    from pipecheck.recommend.limits import MIN_GAIN_FRACTION, gains

    run = simulate(FakeRun(num_workers=0, prefetch_factor=None, step_s=0.02,
                           production_s=0.02, worker_cpu_fraction=0.9,
                           main_step_cpu_fraction=0.5))
    model = analyze(run).model
    one, two = LoaderSettings(num_workers=1), LoaderSettings(num_workers=2)
    predicted = model.predict(one).steady_batches_per_s
    assert model.predict(model.measured).steady_batches_per_s * (1 + MIN_GAIN_FRACTION) \
        <= predicted  # the model alone would propose 1 worker
    slower = dataclasses.replace(model, sustained_batches_per_s=0.9 * predicted
                                 / (1 + MIN_GAIN_FRACTION))
    as_fast = dataclasses.replace(model, sustained_batches_per_s=predicted)
    assert gains(slower, model.measured, one)
    assert not gains(as_fast, model.measured, one)
    # From settings other than the measured ones the model's figures alone decide.
    assert gains(as_fast, one, two) == gains(model, one, two)
    assert not [r for r in recommend(run, dataclasses.replace(analyze(run), model=as_fast))
                if r.setting == "num_workers"]


def test_the_model_error_depends_on_the_kind_of_prediction():
    from pipecheck.records import (MODEL_ERROR_FRACTION, SERIAL_TO_WORKERS_ERROR,
                                   model_error_band)

    # From num_workers=0 to workers: the band the calibration suite measured.
    assert model_error_band(0, 4) == SERIAL_TO_WORKERS_ERROR
    assert all(0.0 <= e < 1.0 for e in SERIAL_TO_WORKERS_ERROR)
    # From a run with workers, which the suite does not start from: the older, wider band.
    assert model_error_band(2, 4) == model_error_band(4, 1) == (MODEL_ERROR_FRACTION,) * 2
    assert model_error_band(0, 0) == (MODEL_ERROR_FRACTION,) * 2
    with pytest.raises(ValueError, match="worker counts must be >= 0"):
        model_error_band(-1, 2)
    # The interval widens by exactly that band beyond the run's own noise.
    model = analyze(simulate(MILD)).model
    two = LoaderSettings(num_workers=2)
    low, high = model.interval(two, model_error=False)
    wide_low, wide_high = model.interval(two)
    below, above = SERIAL_TO_WORKERS_ERROR
    assert wide_low == pytest.approx(low * (1 - below))
    assert wide_high == pytest.approx(min(high * (1 + above), 1 / model.step_s(0)))


def test_unattributed_load_leaves_a_run_no_scan_covered_what_its_threads_got():
    # A latency-bound loader (5% of a core while producing) beside 1.9 cores of other load on
    # 2 cores, in a run too short for a scan of the other processes: its main process got 0.6
    # of a core whenever it was runnable, so workers get at least that, not the 0.1 the load
    # left unused; scanned, the same load not attributed to any group keeps its cores.
    spec = FakeRun(num_workers=0, production_s=0.04, step_s=0.0005, worker_cpu_fraction=0.05,
                   main_step_cpu_fraction=1.0, batches_per_epoch=200)
    serial = simulate(spec)
    run = with_host(serial, others_cpus=1.9, main_runqueue_s=serial.host.main_cpu_s * 2 / 3)
    assert not run.host.others_scanned_s
    load = analyze(run).model.load
    assert load.unscanned and load.share == pytest.approx(0.6)
    assert load.cores_left() == pytest.approx(0.6)
    model = analyze(run).model
    serial_rate = model.predict(LoaderSettings(num_workers=0)).steady_batches_per_s
    four = model.predict(LoaderSettings(num_workers=4)).steady_batches_per_s
    assert four > 3.5 * serial_rate  # four sleeping producers, CPU to spare for all
    scanned = dataclasses.replace(run, host=dataclasses.replace(
        run.host, others_scanned_s=10.0, others_cpu_s=19.0, others_same_group_cpu_s=0.0,
        others_groups_cpu_s=[]))
    model = analyze(scanned).model
    assert not model.load.unscanned
    assert model.load.cores_left() == pytest.approx(max(2.0 - 1.9, model.load.own_cpus))
    assert model.predict(LoaderSettings(num_workers=4)).steady_batches_per_s < 2.5 * serial_rate
