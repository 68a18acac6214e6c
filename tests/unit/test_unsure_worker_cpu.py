"""A prediction the serial run's intra-op pool leaves unsure (issue 26, item 3): where a worker's
CPU per batch is known only to lie between the calling thread's and the process's, and that
range alone moves the predicted rate by more than ``UNSURE_POINT_ERROR``, the expected figure
is marked uncertain with the reason and the measurement that settles it, in every output and
in the JSON; where the range cannot move the rate (a sleeping producer, a step that binds) it
is not. Fake clock: runs from :func:`fake_pipeline.simulate`."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fake_pipeline import FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.records import UNSURE_POINT_ERROR
from pipecheck.render.markdown import render_markdown
from pipecheck.report import build_report, load

CPU_BOUND = FakeRun(num_workers=0, production_s=0.03, step_s=0.002, worker_cpu_fraction=1.0,
                    main_step_cpu_fraction=1.0, batches_per_epoch=200, usable_cpus=4)
"""A serial run whose production is CPU work, far slower than its step."""


def inflated(spec: FakeRun, thread_share: float = 0.5):
    """``spec`` simulated with torch's 2 intra-op threads, the calling thread's CPU while
    producing ``thread_share`` of the process's."""
    run = simulate(spec)
    consumer = dataclasses.replace(
        run.consumer, sampled_wait_thread_cpu_s=run.consumer.sampled_wait_cpu_s * thread_share)
    return dataclasses.replace(run, consumer=consumer, environment=dataclasses.replace(
        run.environment, intra_op_threads=2))


def figured(report):
    """The recommendations that state an expected rate with an interval."""
    return [r for r in report.recommendations
            if r.expected.samples_per_s is not None and r.expected.samples_per_s_low]


def test_a_cpu_bound_producers_hidden_pool_work_makes_the_worker_figure_uncertain():
    run = inflated(CPU_BOUND)
    model = analyze(run).model
    two = LoaderSettings(num_workers=2)
    spread = model.worker_cpu_spread(two)
    assert spread is not None and spread.unsure
    low_cpu, high_cpu = model.worker_cpu_range_s
    assert (spread.low_cpu_s, spread.high_cpu_s) == (low_cpu, high_cpu)
    assert high_cpu == pytest.approx(2 * low_cpu)
    # CPU-bound workers on free cores: the rate follows the CPU per batch, about 2x apart.
    assert spread.ratio == pytest.approx(2.0, rel=0.15)
    assert spread.fast_batches_per_s == pytest.approx(model.predict(two).batches_per_s)
    low, high = model.interval(two)
    assert low <= spread.slow_batches_per_s and spread.fast_batches_per_s <= high

    report = build_report(run)
    recs = figured(report)
    assert recs, [r.setting for r in report.recommendations]
    rec = recs[-1]
    assert rec.expected.uncertain is True
    reason = rec.expected.uncertain_reason
    assert f"between {low_cpu * 1e3:,.3g} and {high_cpu * 1e3:,.3g} ms" in reason
    assert f"--workers 0,{rec.proposed if rec.setting == 'num_workers' else ''}" in reason
    assert "pipecheck stress FILE.py:make_loader" in reason and "wrap(tune=True)" in reason
    text = " ".join(report.render(width=200, verbose=True).split())
    low_s, high_s = rec.expected.samples_per_s_low, rec.expected.samples_per_s_high
    assert f"({low_s:,.0f}-{high_s:,.0f}; uncertain: {reason})" in text
    assert f"by over {UNSURE_POINT_ERROR:.0%} (the reason follows the interval)" in text
    short = " ".join(report.render(width=200).split())
    assert "uncertain: the worker's CPU is not pinned down)" in short
    assert "uncertain: a worker's CPU per batch" in " ".join(render_markdown(report).split())


def test_the_reason_survives_the_json_contract(tmp_path):
    report = build_report(inflated(CPU_BOUND))
    rec = figured(report)[-1]
    path = tmp_path / "report.json"
    report.save(str(path))
    saved = json.loads(path.read_text())
    match = next(r for r in saved["recommendations"] if r["setting"] == rec.setting)
    assert match["expected"]["uncertain"] is True
    assert match["expected"]["uncertain_reason"] == rec.expected.uncertain_reason
    again = load(str(path))
    assert next(r for r in again.recommendations
                if r.setting == rec.setting).expected.uncertain_reason == (
        rec.expected.uncertain_reason)


def test_a_report_written_before_the_reason_reads_as_none(tmp_path):
    report = build_report(inflated(CPU_BOUND))
    data = json.loads(report.to_json())
    for rec in data["recommendations"]:
        rec["expected"].pop("uncertain_reason", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert all(r.expected.uncertain_reason is None for r in load(str(path)).recommendations)


def test_a_sleeping_producers_inflated_cpu_moves_nothing():
    # Latency-bound production (2% of it on the CPU): whatever a worker's CPU, its time is the
    # wait, so the range cannot move the rate past the threshold.
    run = inflated(dataclasses.replace(CPU_BOUND, worker_cpu_fraction=0.02))
    model = analyze(run).model
    if model.worker_cpu_range_s is None:
        pytest.skip("no inflation measured on a sleeping producer")
    spread = model.worker_cpu_spread(LoaderSettings(num_workers=2))
    assert spread is not None and not spread.unsure
    assert all(r.expected.uncertain_reason is None for r in build_report(run).recommendations)


def test_a_binding_step_leaves_the_worker_cpu_no_say():
    # Production 3 ms of CPU a batch before a 30 ms step: with 4 workers on 4 cores the step
    # caps the rate at either end of the worker's CPU range.
    run = inflated(dataclasses.replace(CPU_BOUND, production_s=0.003, step_s=0.03,
                                       main_step_cpu_fraction=0.05))
    model = analyze(run).model
    spread = model.worker_cpu_spread(LoaderSettings(num_workers=4))
    assert spread is not None
    assert spread.ratio == pytest.approx(1.0, abs=0.05) and not spread.unsure


def test_no_range_no_workers_no_spread():
    plain = analyze(simulate(CPU_BOUND)).model
    assert plain.worker_cpu_range_s is None
    assert plain.worker_cpu_spread(LoaderSettings(num_workers=2)) is None
    model = analyze(inflated(CPU_BOUND)).model
    assert model.worker_cpu_spread(LoaderSettings(num_workers=0)) is None
