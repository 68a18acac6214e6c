"""Property-based checks of the what-if model's hard bounds (issue 26, item 1) on generated
measured runs: every prediction, what-if and recommendation (cumulative ones included) stays
within the step's own ceiling and the producer's capacity, is finite and > 0, and every
interval holds its point estimate.

The runs are built through the project's real record types (:mod:`pipecheck.records`, by the
fake-clock simulator :func:`fake_pipeline.simulate` and the same host, intra-op and step
fields the probes write) and go through the real entry points (:func:`pipecheck.analysis.
analyze`, :func:`pipecheck.recommend.recommend`, :func:`pipecheck.report.build_report`), so
the invariants are checked end to end rather than on one helper. They cover 0-16 workers,
sleeping and CPU-bound production and steps, quiet and contended hosts (steady or varying
other load, a starved intra-op pool), short runs and long ones, one epoch or several.
"""

from __future__ import annotations

import dataclasses
import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_pipeline import MAIN_PID, FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.analysis.model import ThroughputModel
from pipecheck.recommend import recommend
from pipecheck.render.sections.advice import BRIEF_RECOMMENDATIONS
from pipecheck.records import (UNCERTAIN_WIDTH, HostSample, Recommendation, RunRecord,
                               interval_uncertain)
from pipecheck.report import build_report

REL = 1e-9
"""Relative slack for float rounding in the comparisons (the bounds are exact otherwise)."""

WHAT_IF = (
    LoaderSettings(num_workers=0),
    LoaderSettings(num_workers=1),
    LoaderSettings(num_workers=2, prefetch_factor=4, persistent_workers=True),
    LoaderSettings(num_workers=3, in_order=False),
    LoaderSettings(num_workers=7, prefetch_factor=1),
    LoaderSettings(num_workers=16, persistent_workers=True),
    LoaderSettings(num_workers=0, torch_num_threads=1),
    LoaderSettings(num_workers=2, torch_num_threads=1),
)
"""What-if settings checked on every generated run, besides its own (the model's fixed point
costs ~10 ms a prediction on a contended run, so the grid is kept small; the recommendation
test covers the counts the rules pick); a thread count is checked where the model prices it."""

MODEL_SETTINGS = ("num_workers", "prefetch_factor", "persistent_workers", "torch_num_threads")
"""Settings the model's rules propose (``in_order`` comes from the head-of-line rule, with its
own upper bound from the measured waits; ``pin_memory`` has no expected rate)."""

FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def measured_runs(draw) -> RunRecord:
    """A plausible measured run of any shape (see the module docstring)."""
    workers = draw(st.integers(0, 16))
    jitter = draw(st.sampled_from([0.0, 0.0, 0.2, 0.8]))
    base_s = draw(st.floats(0.0005, 0.4))
    seed = draw(st.integers(0, 2**16))
    spread = [base_s * (1.0 + jitter * random.Random(seed + i).uniform(-0.9, 3.0))
              for i in range(4096)]
    spec = FakeRun(
        num_workers=workers,
        prefetch_factor=draw(st.sampled_from([None, 1, 2, 8])),
        persistent_workers=draw(st.booleans()),
        batches_per_epoch=draw(st.integers(6, 160)),
        epochs=draw(st.integers(1, 3)),
        step_s=draw(st.floats(0.0005, 0.3)),
        production_s=spread.__getitem__ if jitter else base_s,
        # Sleeping (latency-bound) or CPU-bound production and steps.
        worker_cpu_fraction=draw(st.sampled_from([0.02, 0.3, 1.0])),
        main_step_cpu_fraction=draw(st.sampled_from([0.05, 0.5, 1.0, 2.0])),
        startup_s=draw(st.sampled_from([0.0, 0.05, 1.0])),
        shutdown_s=draw(st.sampled_from([0.0, 0.02])),
        receive_s=draw(st.sampled_from([0.0, 0.0005])),
        usable_cpus=draw(st.integers(1, 8)),
        batch_size=draw(st.sampled_from([1, 8, 64])),
        contention=draw(st.booleans()),
        with_host=draw(st.booleans()),
    )
    run = simulate(spec)
    if run.host is not None:
        run = _with_other_load(run, draw(st.sampled_from([0.0, 0.0, 0.5, 1.5, 6.0])),
                               draw(st.sampled_from([0.0, 0.5, 1.0])))
        run = _with_main_runqueue(run, draw(st.sampled_from([0.0, 0.3, 0.7])))
    if workers == 0 and draw(st.booleans()):
        run = _with_intra_op(run, threads=draw(st.sampled_from([2, 4])),
                             thread_share=draw(st.sampled_from([0.3, 0.7, 1.0])),
                             step_on_cpu=draw(st.sampled_from([0.4, 0.9])))
    return run


def _with_other_load(run: RunRecord, others_cpus: float, swing: float) -> RunRecord:
    """``run`` beside other processes using ``others_cpus`` cores on average, varying by
    ``swing`` x that from tick to tick (the host timeline the interval's load ends come from)."""
    host = run.host
    assert host is not None
    cpus = run.environment.cpu_count
    ours = (host.main_cpu_s + (host.workers_cpu_s or 0.0)) / host.duration_s
    main_pct = 100.0 * host.main_cpu_s / host.duration_s
    workers_pct = 100.0 * (host.workers_cpu_s or 0.0) / host.duration_s
    ticks = []
    for i in range(20):
        load = max(others_cpus * (1.0 + swing * (1 if i % 2 else -1)), 0.0)
        ticks.append(HostSample(
            at_s=host.duration_s * i / 20, system_cpu_percent=min(100.0 * (ours + load) / cpus,
                                                                  100.0),
            iowait_percent=0.0, main_cpu_percent=main_pct, workers_cpu_percent=workers_pct,
            main_rss_bytes=2**28, workers_rss_bytes=2**28, workers_pss_bytes=None,
            read_bytes_per_s=None, read_chars_per_s=None, available_memory_bytes=2**33))
    busy = min(100.0 * (ours + others_cpus) / cpus, 100.0)
    return dataclasses.replace(run, host=dataclasses.replace(
        host, system_cpu_percent_mean=busy, timeline=ticks))


def _with_main_runqueue(run: RunRecord, fraction: float) -> RunRecord:
    """``run`` whose main process waited for a core ``fraction`` of its CPU time."""
    host = run.host
    assert host is not None
    return dataclasses.replace(run, host=dataclasses.replace(host, processes=[
        dataclasses.replace(p, runqueue_s=fraction * p.cpu_s) if p.pid == MAIN_PID else p
        for p in host.processes]))


def _with_intra_op(run: RunRecord, *, threads: int, thread_share: float,
                   step_on_cpu: float) -> RunRecord:
    """A ``num_workers=0`` ``run`` on ``threads`` torch intra-op threads: the calling thread's
    CPU ``thread_share`` of the process's while producing, and on a core ``step_on_cpu`` of
    the step's wall time with the pool working beside it."""
    consumer = run.consumer
    wall_s = consumer.sampled_compute_wall_s or 0.0
    consumer = dataclasses.replace(
        consumer, sampled_wait_thread_cpu_s=(consumer.sampled_wait_cpu_s or 0.0) * thread_share,
        sampled_compute_thread_cpu_s=step_on_cpu * wall_s,
        sampled_compute_cpu_s=2.0 * step_on_cpu * wall_s)
    environment = dataclasses.replace(run.environment, intra_op_threads=threads)
    return dataclasses.replace(run, consumer=consumer, environment=environment)


def _loads(model: ThroughputModel) -> list[float | None]:
    if model.load is None:
        return [None]
    return [None, model.load.others_low, model.load.others_high]


def _within(rate: float, bound: float) -> bool:
    return rate <= bound * (1.0 + REL)


def _check_prediction(model: ThroughputModel, setting: LoaderSettings,
                      others: float | None) -> None:
    prediction = model.predict(setting, others_cpus=others)
    # A thread count is predicted by the model of the main process on those threads.
    models = model.thread_models(setting.torch_num_threads)
    assert models is not None
    if models[0] is not model:
        plain = dataclasses.replace(setting, torch_num_threads=None)
        assert prediction == models[0].predict(plain, others_cpus=others)
        assert model.bounds(setting, others) == models[0].bounds(plain, others)
        assert 1.0 / models[0].demand_batches_per_s >= 1.0 / model.demand_batches_per_s * (1 - REL)
        model, setting = models[0], plain
    bounds = model.bounds(setting, others)
    step_ceiling = 1.0 / model.step_s(setting.num_workers, others)
    capacity, _ = model.capacity(setting.num_workers, others)
    alone_ceiling = 1.0 / model.step_s(0, others)  # no loader work beside the step
    for rate in (prediction.batches_per_s, prediction.steady_batches_per_s):
        assert math.isfinite(rate) and rate > 0, (setting, others, prediction)
        assert _within(rate, step_ceiling), (setting, others, rate, step_ceiling)
        assert _within(rate, capacity), (setting, others, rate, capacity)
        assert _within(rate, alone_ceiling), (setting, others, rate, alone_ceiling)
        assert _within(rate, bounds.batches_per_s)
    if model.measured.num_workers == 0 and others is None:
        # The measured step at num_workers=0 is the demand: nothing outruns it.
        assert _within(prediction.batches_per_s, model.demand_batches_per_s)
        assert _within(prediction.steady_batches_per_s, model.demand_batches_per_s)
    for stall in (prediction.stall_fraction, prediction.steady_stall_fraction):
        assert 0.0 <= stall <= 1.0
    if prediction.samples_per_s is not None:
        assert math.isfinite(prediction.samples_per_s) and prediction.samples_per_s > 0


def _check_interval(model: ThroughputModel, setting: LoaderSettings,
                    epochs: int | None = None) -> None:
    point = model.predict(setting, epochs=epochs).batches_per_s
    models = model.thread_models(setting.torch_num_threads)
    assert models is not None
    plain = dataclasses.replace(setting, torch_num_threads=None)
    for model_error in (True, False) if model.noise_fraction else (True,):
        low, high = model.interval(setting, epochs=epochs, model_error=model_error)
        assert math.isfinite(low) and math.isfinite(high)
        assert 0 < low <= point <= high, (setting, low, point, high)
        # Noise never lets the loop outrun its step with no loader work beside it, nor,
        # where its pool was starved, the step at its calling thread's CPU time; on one
        # thread, the fastest one-thread step's.
        ceilings = []
        for each in models:
            ceiling = max(1.0 / each.step_s(0, k) for k in _loads(each))
            if each.unstarved_step_s and setting.num_workers > 0:
                ceiling = max(ceiling, 1.0 / each.unstarved_step_s)
            ceilings.append(max(ceiling, each.bounds(plain).batches_per_s))
        assert _within(high, max(ceilings))


def _cumulative(model: ThroughputModel, recommendations: list[Recommendation]
                ) -> list[tuple[Recommendation, LoaderSettings]]:
    """Each model recommendation with the settings it assumes: its change on top of every
    change before it (the rules are cumulative)."""
    current = model.measured
    stacked = []
    for rec in recommendations:
        if rec.setting not in MODEL_SETTINGS:
            continue
        current = dataclasses.replace(current, **{rec.setting: rec.proposed})
        stacked.append((rec, current))
    return stacked


@FAST
@given(measured_runs())
def test_every_what_if_prediction_stays_within_the_step_and_the_producer(run):
    model = analyze(run).model
    if model is None:
        return  # too little data: no prediction to bound
    for setting in (model.measured,) + WHAT_IF:
        if not model.threads_priced(setting.torch_num_threads):
            continue
        for others in _loads(model):
            _check_prediction(model, setting, others)
        _check_interval(model, setting)


@FAST
@given(measured_runs())
def test_every_recommendation_stays_within_the_bounds_of_its_cumulative_settings(run):
    analysis = analyze(run)
    recommendations = recommend(run, analysis)
    model = analysis.model
    if model is None:
        assert not [r for r in recommendations if r.setting in MODEL_SETTINGS]
        return
    consumer = run.consumer
    for rec in recommendations:
        rate = rec.expected.samples_per_s
        if rate is not None and consumer.compute_s > 0:
            # Whatever its source, no expected rate outruns the measured steps.
            assert math.isfinite(rate) and rate > 0, rec
            step_ceiling = consumer.samples / consumer.compute_s
            if model.measured.num_workers == 0 or rec.setting not in MODEL_SETTINGS:
                assert _within(rate, step_ceiling), (rec, step_ceiling)
    for rec, setting in _cumulative(model, recommendations):
        expected = rec.expected
        if expected.samples_per_s is None:
            continue  # proposed with no prediction (the starved pool's)
        bound = model.bounds(setting).batches_per_s
        assert expected.batches_per_s is not None
        assert math.isfinite(expected.batches_per_s) and expected.batches_per_s > 0
        assert _within(expected.batches_per_s, bound), (rec, setting, bound)
        if model.measured.num_workers == 0:
            assert _within(expected.batches_per_s, model.demand_batches_per_s), rec
        if model.samples_per_batch is not None:
            assert _within(expected.samples_per_s, bound * model.samples_per_batch), rec
            low, high = expected.samples_per_s_low, expected.samples_per_s_high
            assert low is not None and high is not None
            assert 0 < low <= expected.samples_per_s <= high, rec
            spread = model.worker_cpu_spread(setting)
            unsure = spread is not None and spread.unsure
            assert (expected.uncertain_reason is not None) == unsure, rec
            assert expected.uncertain == (high > UNCERTAIN_WIDTH * low or unsure)
            if spread is not None:  # the interval spans the worker CPU's whole range
                spb = model.samples_per_batch
                assert low <= spread.slow_batches_per_s * spb * (1 + REL), rec
                assert (spread.slow_batches_per_s * (1 - REL) <= expected.batches_per_s
                        <= spread.fast_batches_per_s * (1 + REL)), rec
        _check_interval(model, setting, max(model.epochs, 2)
                        if rec.setting == "persistent_workers" else None)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(measured_runs())
def test_reports_carry_the_bounded_figures_and_say_uncertain_instead_of_a_wide_range(run):
    report = build_report(run)
    data = report.to_dict()
    text = " ".join(report.render(width=200, verbose=True).split())
    short = " ".join(report.render(width=200).split())
    shown = report.recommendations[:BRIEF_RECOMMENDATIONS]
    for rec, saved in zip(report.recommendations, data["recommendations"]):
        expected = rec.expected
        assert saved["expected"]["uncertain"] == expected.uncertain
        assert saved["expected"]["uncertain_reason"] == expected.uncertain_reason
        low, high = expected.samples_per_s_low, expected.samples_per_s_high
        too_wide = interval_uncertain(low, high)
        if too_wide is None:  # no interval: no flag and no reason
            assert expected.uncertain is None and expected.uncertain_reason is None
        else:
            assert expected.uncertain == (too_wide or expected.uncertain_reason is not None)
        if expected.samples_per_s is None or low is None or high is None:
            continue
        in_short = any(r is rec for r in shown)
        if too_wide:
            assert "uncertain: its 90% interval is over" in text
            assert f"({low:,.0f}-{high:,.0f})" not in text
            assert not in_short or "(uncertain: its 90% interval is over" in short
            assert f"90%: {low:,.0f}-{high:,.0f}" not in short
        elif expected.uncertain:  # printable, but the worker's CPU can move the point
            reason = " ".join(expected.uncertain_reason.split())
            assert f"({low:,.0f}-{high:,.0f}; uncertain: {reason})" in text
            assert "pipecheck stress" in reason and "wrap(tune=True)" in reason
            assert not in_short or (f"90%: {low:,.0f}-{high:,.0f}; uncertain: the worker's "
                                    "CPU is not pinned down)") in short
        else:
            assert f"({low:,.0f}-{high:,.0f})" in text
            assert not in_short or f"90%: {low:,.0f}-{high:,.0f})" in short


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(measured_runs(), st.floats(0.3, 4.0))
def test_stress_search_predictions_stay_within_the_bounds_whatever_the_anchor(run, miss):
    # The search anchors the model to its best measured trial (measured / predicted): a model
    # that under-predicted that trial by ``miss`` scales every prediction up by it, which
    # must still stop at each candidate's bounds.
    from pipecheck.stress.runner import Sweep
    from pipecheck.stress.search import _predict
    from pipecheck.loader_settings import LoaderSettings
    from pipecheck.stress.trial import TrialResult

    model = analyze(run).model
    if model is None:
        return
    measured = model.measured
    config = LoaderSettings(num_workers=measured.num_workers,
                            prefetch_factor=measured.prefetch_factor if measured.num_workers
                            else None, persistent_workers=measured.persistent_workers)
    rate = model.predict(measured).steady_batches_per_s * miss
    per_batch = model.samples_per_batch or 1.0
    best = TrialResult(config=config, samples_per_s=rate * per_batch, batches_per_s=rate,
                       stall_fraction=0.0, startup_s=0.0, batches=run.consumer.batches,
                       wall_s=1.0, record=run)
    candidates = [LoaderSettings(num_workers=n, prefetch_factor=None if n == 0 else 2)
                  for n in (0, 1, 3, 16)]
    sweep = Sweep(trials=[best])
    assert _predict(sweep, candidates, []) == set(candidates)
    for candidate in candidates:
        predicted = sweep.predicted[candidate]["batches_per_s"]
        assert predicted is not None and math.isfinite(predicted) and predicted > 0
        assert _within(predicted, model.bounds(candidate.model_view()).batches_per_s)
