"""Recommendations: an ordered list of pure rules from an analysis to DataLoader setting changes.

Rules run in order (``num_workers`` up or down, ``prefetch_factor``, ``persistent_workers``,
``pin_memory``) and are cumulative: each rule's expected figures assume the changes proposed
before it are applied. ``current`` is always the measured loader's value. Expected figures come
from the what-if model (:mod:`pipecheck.analysis.model`), which holds every one, cumulative
ones included, to the step's own ceiling and the producer's capacity for the settings proposed
(:meth:`~pipecheck.analysis.model.ThroughputModel.bounds`); a rule that the model cannot back with
a gain proposes nothing, and no proposal is kept whose expected samples/s is below the
measured rate or below the proposal before it (the model can be biased low on a run: a change
shown slower than what it replaces would contradict its own reason). Every kept proposal states
its effect in samples/s, batches/s, tokens/s (when counted) and wall time saved per 10,000
steps and per epoch (:func:`with_effects`). With no model (too little data, a generic iterable) the list is empty
and the diagnosis carries an ``insufficient-data`` finding saying why.

The constants below are pipecheck's choices, not torch's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

from pipecheck.analysis import Analysis
from pipecheck.analysis.bound import CPU_BOUND_FRACTION
from pipecheck.analysis.causes import CONTENDED_CPU_FRACTION
from pipecheck.analysis.consumer import mean_epoch_wall_s, stress_command
from pipecheck.analysis.memory import SHM_HEADROOM_FACTOR
from pipecheck.analysis.model import (
    TORCH_DEFAULT_PREFETCH_FACTOR,
    LoaderSettings,
    Prediction,
    ThroughputModel,
)
from pipecheck.analysis.stats import mean
from pipecheck.effects import STEPS_PER_SAVING, saved_s, saved_s_per_step
from pipecheck.kinds import (
    COMPUTE_BOUND,
    CPU_BOUND,
    INPUT_BOUND,
    IO_BOUND,
    LATENCY_BOUND,
    FindingKind,
)
from pipecheck.units import batch_rate, count, percent, seconds, size
from pipecheck.records import (
    ConsumerSummary,
    Expected,
    Recommendation,
    UNCERTAIN_WIDTH,
    RunRecord,
    interval_uncertain,
)

MIN_GAIN_FRACTION = 0.05
"""A change must be predicted to raise steady throughput by at least 5%; the model sees no IPC
beyond the receive CPU and no shift in contention, so smaller gains are not worth a change."""

UP_HEADROOM = 1.2
"""More workers are sized for 1.2x the consumer's rate: the model has no jitter beyond the sampled
batch times, and a producer sized exactly at the demand stalls on every hiccup."""

DOWN_HEADROOM = 2.0
"""Fewer workers are proposed only if they keep capacity at 2x the demand or more (slack for
batch-time variance and contention the model does not see)."""

MAX_WORKERS_PER_CPU = 4
"""Upper bound on proposed workers per usable CPU, even for latency-bound work. What it guards
against is the epoch start the model does not price at worker counts it did not measure: with
``persistent_workers=False`` every epoch forks all the workers again and waits for their first
batches, and the epoch's tail leaves workers idle. On ``benchmarks/prediction.py``'s latency
pipeline (128 ms of sleep a batch, 64 batches an epoch, 2 cores, quiet) each worker took 146,
157 and 218 ms a batch with 4, 8 and 16 such workers; with persistent workers and 128-batch
epochs, 140, 139 and 144 ms (``python benchmarks/waiting_workers.py --epoch-samples 4096
--no-persistent-workers`` and ``python benchmarks/waiting_workers.py``). So the waiting
workers themselves scale past 8 a CPU here; the per-epoch restart does not, and the model,
which holds a worker's batch at its serial time, overshot 16 workers by 24%. pipecheck's choice
from those measurements (it was 8)."""

MAX_PREFETCH_FACTOR = 16
"""Largest proposed prefetch_factor: past it the batches held in memory (prefetch_factor x
num_workers) cost more than fixing the slow samples would."""

PERSISTENT_START_SHARE = 0.05
"""persistent_workers=True is proposed when an epoch's start-up wait is at least 5% of an epoch."""

MIN_SHUTDOWN_S = 0.001
"""An epoch's end-of-epoch shutdown wait is named in the persistent_workers reason from 1 ms
up (below it, forked workers that exit at once, it would be noise in the sentence)."""

LATENCY_BOUND_CPU_FRACTION = CPU_BOUND_FRACTION
"""Without a worker class (:mod:`pipecheck.analysis.bound`), workers using less CPU than this
per busy second are treated as waiting (latency-bound) rather than CPU-bound."""

_LIMIT_WORDS = {
    "step": "the training step",
    "workers": "the worker count",
    "cpu": "the usable CPUs",
    "batch-time tail": "slow batches",
    "serial": "loading in the main process",
}


@dataclass(frozen=True)
class _Context:
    run: RunRecord
    analysis: Analysis
    model: ThroughputModel

    @property
    def compute_bound_stall(self) -> float:
        return self.analysis.diagnosis.thresholds["compute_bound_stall_fraction"]

    @property
    def measured_stall(self) -> Optional[float]:
        consumer = self.analysis.consumer
        steady = consumer.steady_stall_fraction
        return steady if steady is not None else consumer.stall_fraction


_Outcome = Optional[tuple[Recommendation, LoaderSettings]]
"""A rule's proposal and the settings after applying it, or ``None`` when it proposes nothing."""

_Rule = Callable[[_Context, LoaderSettings], _Outcome]


def recommend(run: RunRecord, analysis: Analysis) -> list[Recommendation]:
    """Ordered setting changes for ``run`` given its ``analysis`` (from
    :func:`pipecheck.analysis.analyze`): the model's rules (none when ``analysis.model`` is
    ``None``), then ``in_order`` for head-of-line blocking and the sharding changes of a
    WebDataset loader (:func:`pipeline_recommendations`). Each proposes a value different from
    the current one, with expected samples/s and stall (``None`` where it cannot be predicted)
    and a reason quoting measured numbers."""
    if analysis.model is None:
        return pipeline_recommendations(run, analysis)
    context = _Context(run=run, analysis=analysis, model=analysis.model)
    settings = analysis.model.measured
    rules: list[_Rule] = [
        _more_workers,
        _starved_pool_workers,
        _fewer_workers,
        _prefetch_factor,
        _persistent_workers,
        _pin_memory,
    ]
    recommendations = []
    floor = analysis.consumer.samples_per_s
    for rule in rules:
        outcome = rule(context, settings)
        if outcome is None:
            continue
        recommendation, proposed = outcome
        expected = recommendation.expected.samples_per_s
        if _slower(expected, floor):
            continue  # never propose a change expected to be slower than what it replaces
        recommendations.append(recommendation)
        if rule is _starved_pool_workers:
            break  # unpredictable: later rules' cumulative figures would build on it
        settings = proposed
        floor = floor if expected is None else expected
    pipeline = [r for r in pipeline_recommendations(run, analysis)
                if not _slower(r.expected.samples_per_s, analysis.consumer.samples_per_s)]
    return [with_effects(r, analysis.consumer, run.loader.batches_per_epoch)
            for r in recommendations + pipeline]


def _slower(expected_samples_per_s: Optional[float], floor_samples_per_s: Optional[float]) -> bool:
    """Whether an expected rate is below the rate it would replace (a relative 1e-9 absorbs
    float noise in an "unchanged" prediction); ``False`` when either is unknown."""
    if expected_samples_per_s is None or floor_samples_per_s is None:
        return False
    return expected_samples_per_s < floor_samples_per_s * (1.0 - 1e-9)


def with_effects(
    recommendation: Recommendation,
    measured: ConsumerSummary,
    batches_per_epoch: Optional[int],
) -> Recommendation:
    """``recommendation`` with its effect in every unit (:class:`~pipecheck.records.Expected`):
    expected batches/s and tokens/s scaled from the measured run by the expected samples/s
    ratio, the gains over the measured rates, and the wall time saved per
    :data:`STEPS_PER_SAVING` steps and per epoch (``batches_per_epoch``, the loader's
    ``len()``; ``None`` when unknown). Figures that cannot be derived (no expected samples/s,
    nothing measured) stay ``None``; a figure already set is kept."""
    expected = recommendation.expected
    if expected.samples_per_s is None or not measured.samples_per_s:
        return recommendation
    scale = expected.samples_per_s / measured.samples_per_s
    batches_per_s = expected.batches_per_s
    if batches_per_s is None and measured.batches_per_s:
        batches_per_s = measured.batches_per_s * scale
    tokens_per_s = expected.tokens_per_s
    if tokens_per_s is None and measured.tokens_per_s is not None:
        tokens_per_s = measured.tokens_per_s * scale
    saved_per_step_s = saved_s_per_step(measured.batches_per_s, batches_per_s)
    filled = replace(
        expected,
        batches_per_s=batches_per_s,
        tokens_per_s=tokens_per_s,
        gain_samples_per_s=_first(expected.gain_samples_per_s,
                                  expected.samples_per_s - measured.samples_per_s),
        gain_tokens_per_s=_first(expected.gain_tokens_per_s,
                                 None if tokens_per_s is None or measured.tokens_per_s is None
                                 else tokens_per_s - measured.tokens_per_s),
        saved_s_per_10k_steps=_first(expected.saved_s_per_10k_steps,
                                     saved_s(saved_per_step_s, STEPS_PER_SAVING)),
        saved_s_per_epoch=_first(expected.saved_s_per_epoch,
                                 saved_s(saved_per_step_s, batches_per_epoch)),
    )
    return replace(recommendation, expected=filled)


def _first(kept: Optional[float], derived: Optional[float]) -> Optional[float]:
    return kept if kept is not None else derived


def pipeline_recommendations(run: RunRecord, analysis: Analysis) -> list[Recommendation]:
    """``in_order=False`` for a ``head-of-line-blocking`` finding
    (:func:`pipecheck.analysis.hol.in_order_recommendation`) and the sharding section's
    ``num_shards`` / ``resampled`` / ``shuffle_buffer`` changes."""
    from pipecheck.analysis.hol import in_order_recommendation
    from pipecheck.environment import torch_has_in_order

    found: list[Recommendation] = []
    consumer = analysis.consumer
    for finding in analysis.diagnosis.findings:
        if finding.kind == FindingKind.HEAD_OF_LINE_BLOCKING:
            rec = in_order_recommendation(finding, wait_s=consumer.wait_s,
                                          compute_s=consumer.compute_s,
                                          samples=consumer.samples,
                                          torch_has_in_order=torch_has_in_order())
            if rec is not None:
                found.append(rec)
    if run.sharding is not None:
        found.extend(run.sharding.recommendations)
    return found


def _expected(prediction: Prediction, note: Optional[str] = None,
              model: Optional[ThroughputModel] = None,
              settings: Optional[LoaderSettings] = None,
              epochs: Optional[int] = None) -> Expected:
    """The expected figures of a prediction (its batches/s as predicted, bounded by the
    step's ceiling and the producer, :meth:`~pipecheck.analysis.model.ThroughputModel.bounds`),
    with its interval (:meth:`~pipecheck.analysis.model.ThroughputModel.interval`) and the
    ``uncertain`` flag (:func:`~pipecheck.records.interval_uncertain`) when ``model`` and
    ``settings`` are given and the run counted samples."""
    low = high = None
    if model is not None and settings is not None and model.samples_per_batch is not None:
        low_b, high_b = model.interval(settings, epochs=epochs)
        low, high = low_b * model.samples_per_batch, high_b * model.samples_per_batch
    return Expected(
        samples_per_s=prediction.samples_per_s,
        stall_fraction=prediction.stall_fraction,
        note=note,
        batches_per_s=prediction.batches_per_s,
        samples_per_s_low=low,
        samples_per_s_high=high,
        uncertain=interval_uncertain(low, high),
    )


def _stall_now(context: _Context, settings: LoaderSettings, prediction: Prediction) -> str:
    """The steady stall before a rule's change: measured when no earlier rule changed the
    settings, else the model's prediction for the settings so far."""
    if settings == context.model.measured:
        return f"{percent(context.measured_stall)} of loop time in steady state"
    return f"{percent(prediction.steady_stall_fraction)} predicted after the changes above"


def _gains(model: ThroughputModel, before: LoaderSettings, after: LoaderSettings) -> bool:
    """Whether ``after`` is predicted at least :data:`MIN_GAIN_FRACTION` faster than
    ``before`` in steady state. From the measured settings the bar is the higher of the
    model's account of them and the steady rate the run measured: a proposal must beat what
    was measured, not only the model's own figure for it."""
    old = model.predict(before).steady_batches_per_s
    if before == model.measured and model.sustained_batches_per_s:
        old = max(old, model.sustained_batches_per_s)
    return model.predict(after).steady_batches_per_s >= old * (1.0 + MIN_GAIN_FRACTION)


def _more_workers(context: _Context, settings: LoaderSettings) -> _Outcome:
    """Input-bound and the producer's mean rate (not its tail) is short of what the consumer
    takes: the worker count with the best predicted steady rate, or the smallest within
    :data:`MIN_GAIN_FRACTION` of it that reaches :data:`UP_HEADROOM` x the consumer's rate
    (else the smallest within that margin), and never more than ``/dev/shm`` can feed
    (:func:`shm_batches_cap`). With host data the model charges each worker for the cores it
    takes from the step and from other processes, so CPU-bound workers may exceed the cores
    (up to :data:`MAX_CPU_BOUND_WORKERS_PER_CPU` per CPU) only where that is predicted to pay;
    without host data CPU-bound work keeps :func:`cpu_bound_worker_limit`."""
    model = context.model
    if context.analysis.diagnosis.verdict != INPUT_BOUND:
        return None
    if (model.pool_starved and settings.num_workers == 0 == model.measured.num_workers
            and producer_class(model) == CPU_BOUND):
        return None  # its CPU figure is the starved pool's: _starved_pool_workers proposes
    capacity, _ = model.capacity(settings.num_workers)
    if settings.num_workers > 0 and capacity >= 1.0 / model.consumer_floor_s():
        return None  # the mean rate suffices; slow batches are the prefetch rule's business
    most = MAX_WORKERS_PER_CPU * model.usable_cpus
    if producer_class(model) == CPU_BOUND:
        most = min(most, cpu_bound_worker_limit(model) if model.load is None
                   else MAX_CPU_BOUND_WORKERS_PER_CPU * model.usable_cpus)
        if model.pool_threads:
            most = min(most, pool_worker_limit(model))
    in_flight = shm_batches_cap(context.run)
    factor = settings.prefetch_factor or TORCH_DEFAULT_PREFETCH_FACTOR
    shm_most = None if in_flight is None else in_flight // factor
    allowed = most if shm_most is None else min(most, shm_most)
    if allowed <= settings.num_workers:
        return None
    rates = {n: model.predict(replace(settings, num_workers=n)).steady_batches_per_s
             for n in range(settings.num_workers + 1, allowed + 1)}
    best = max(rates.values())
    near = [n for n, rate in rates.items() if rate * (1.0 + MIN_GAIN_FRACTION) >= best]
    roomy = [n for n in near
             if model.capacity(n)[0] >= UP_HEADROOM / model.consumer_floor_s(n)]
    # CPU-bound workers past the best gain nothing but cores taken from the step and others.
    workers = min(near) if producer_class(model) == CPU_BOUND else min(roomy or near)
    proposed = replace(settings, num_workers=workers)
    if not _gains(model, settings, proposed):
        return None
    prediction = model.predict(proposed)
    reason = _more_workers_reason(context, settings, workers, capacity, prediction)
    reason += contention_words(model, settings, proposed)
    if shm_most is not None and workers == shm_most and shm_most < most:
        reason += (f" Capped at {count(workers, 'worker')}: /dev/shm holds "
                   f"{count(in_flight, 'batch', 'batches')} with the headroom pipecheck keeps "
                   f"(prefetch_factor {factor} x workers must fit).")
    reason += _settle_with_stress(context, settings, proposed, rates)
    recommendation = Recommendation(
        setting="num_workers",
        current=settings.num_workers,
        proposed=workers,
        expected=_expected(prediction, _limit_note(model, prediction), model, proposed),
        reason=reason,
    )
    return recommendation, proposed


MAX_CPU_BOUND_WORKERS_PER_CPU = 2
"""Most CPU-bound workers proposed per usable CPU when the model knows the host's load: past
it, the fair-share model's assumptions (no cache or memory-bandwidth cost of more processes)
are untested. On the project's 2-core machine 2 CPU-bound workers beat 1 in 3 of 3 paired runs
(issue "Numbers that hold on real, busy machines"), so the older cap at the free cores was too
low. pipecheck's choice."""


def _starved_pool_workers(context: _Context, settings: LoaderSettings) -> _Outcome:
    """Input-bound at ``num_workers=0`` with the main process's intra-op pool starved of cores
    (:attr:`~pipecheck.analysis.model.ThroughputModel.pool_starved`) and no worker count
    proposed by :func:`_more_workers`: the serial run measured the pool's waits for its
    descheduled threads, which a worker (one intra-op thread) does not pay, so the measured
    cost overstates a worker's by an unknown factor (on ``benchmarks/prediction.py``'s JPEG
    pipeline beside a busy process, 17x: 22 ms of the calling thread's CPU a sample against
    1.3 ms in a worker; 1 worker delivered 14x the serial rate). Proposes
    :func:`pool_worker_limit` workers with no prediction (expected figures ``None``), and the
    reason names the stress command that measures it."""
    model = context.model
    if (context.analysis.diagnosis.verdict != INPUT_BOUND or settings.num_workers != 0
            or model.measured.num_workers != 0 or not model.pool_starved):
        return None
    workers = pool_worker_limit(model)
    in_flight = shm_batches_cap(context.run)
    if in_flight is not None:
        workers = min(workers, in_flight // TORCH_DEFAULT_PREFETCH_FACTOR)
    if workers < 1:
        return None
    proposed = replace(settings, num_workers=workers)
    load = model.load
    assert load is not None  # pool_starved needs it
    production_s = 1.0 / model.per_worker_batches_per_s
    reason = (
        f"With num_workers=0 the main process's {model.pool_threads} torch intra-op threads "
        f"had {load.own_cpus:.1f} cores (its threads waited for a core "
        f"{percent(1.0 - load.share)} of the time they wanted one), so each parallel op waited "
        "for a descheduled thread while the others spin-waited: production took "
        f"{seconds(production_s)} a batch, {seconds(model.production_cpu_per_batch_s)} of CPU. "
        "A worker runs one intra-op thread and waits for no team, so it pays far less, by a "
        "factor this run cannot tell (the step, on the same starved threads, was slowed by "
        f"an unknown factor too): {count(workers, 'worker')}, the cores left to this run, "
        "with no prediction. "
        f"{stress_command(context.run.consumer, f'0,{workers}')} (a function that builds "
        "your DataLoader; the step emulated as measured) measures it on this host; so does "
        "torch.set_num_threads(1) before the loop, which removes the waits at num_workers=0.")
    recommendation = Recommendation(
        setting="num_workers", current=0, proposed=workers,
        expected=Expected(samples_per_s=None, stall_fraction=None,
                          note="not predictable from this run"),
        reason=reason)
    return recommendation, proposed


def pool_worker_limit(model: ThroughputModel) -> int:
    """Most CPU-bound workers proposed beside a main process whose intra-op pool is active
    (:attr:`~pipecheck.analysis.model.ThroughputModel.pool_threads`): the cores left to the
    run, rounded, at least 1. Past them the step's parallel regions stall whenever a pool
    thread waits for a core, which the fair-share model does not capture: on 2 cores
    (``benchmarks/prediction.py``, quiet) the FFT pipeline ran 48, 51.5 and 49 batches/s
    with 2, 3 and 4 workers and the JPEG one 12.3, 12.1 and 10.9, where the model gave
    +19% and +32% for 3 and 4 workers over 2. pipecheck's choice, from those measurements."""
    load = model.load
    assert load is not None  # pool_threads is set only with host data
    return max(1, math.floor(load.cores_left() + 0.5))


def _settle_with_stress(
    context: _Context, settings: LoaderSettings, proposed: LoaderSettings,
    rates: dict[int, float],
) -> str:
    """A sentence naming the ``pipecheck stress`` command that settles a proposal the model
    cannot be sure of: its interval reaches below the current rate, or the interval of one
    worker fewer overlaps it (the cheaper count may do as well). Empty when the model is
    sure. ``rates``: the worker counts the rule weighed."""
    model = context.model
    # The run's own uncertainty decides (the model's general error would flag every proposal).
    low, high = model.interval(proposed, model_error=False)
    current = model.predict(settings).batches_per_s
    fewer = proposed.num_workers - 1
    rivals = [fewer] if fewer in rates and model.interval(
        replace(proposed, num_workers=fewer), model_error=False)[1] >= low else []
    if low > current and not rivals:
        return ""
    counts = sorted({settings.num_workers, proposed.num_workers, *rivals})
    # An interval too wide to bound anything is named in words, not printed as a range.
    span = (f"is over {UNCERTAIN_WIDTH:g}x wide (uncertain) and"
            if interval_uncertain(low, high)
            else f"({batch_rate(low)} to {batch_rate(high)})")
    return (f" The interval from this run's noise {span} "
            f"{'reaches below the current rate' if low <= current else 'overlaps that of '}"
            f"{'' if low <= current else count(fewer, 'worker')}: "
            f"{stress_command(context.run.consumer, ','.join(map(str, counts)))} "
            "(a function that builds your DataLoader; the step emulated as measured) measures "
            "them on this host.")


STEP_SLOWDOWN_WORDS_FRACTION = 0.05
"""A predicted step slowdown is named in a reason from 5% up (the same margin as
:data:`MIN_GAIN_FRACTION`)."""


def contention_words(
    model: ThroughputModel, before: LoaderSettings, after: LoaderSettings
) -> str:
    """Sentences on what the change costs in cores (empty without host data or cost): the
    step's predicted slowdown as the workers take cores from it, and the other processes'
    load the prediction assumes continues."""
    load = model.load
    if load is None:
        return ""
    words = ""
    step_before = model.step_s(before.num_workers)
    step_after = model.step_s(after.num_workers)
    if step_after > step_before * (1.0 + STEP_SLOWDOWN_WORDS_FRACTION):
        words += (f" The step is predicted to slow from {seconds(step_before)} to "
                  f"{seconds(step_after)} as the workers take cores from it (its threads and "
                  "the workers share the cores left to this run fairly).")
    if load.others_cpus >= CONTENDED_CPU_FRACTION * load.usable_cpus:
        keep = ("the prediction assumes they keep them" if not load.other_groups else
                f"the kernel splits the cores fairly between this run's scheduling group and "
                f"the {count(len(load.other_groups), 'other group')} seen, so the prediction "
                f"gives this run {load.cores_left():.1f} cores")
        words += (f" Other processes used {load.others_cpus:.1f} of the {load.usable_cpus:g} "
                  f"usable cores during the run; {keep} (their load's low and high over the "
                  "run bound the interval).")
    if load.same_group_cpus >= CONTENDED_CPU_FRACTION * load.usable_cpus:
        words += (f" Processes in this run's CPU scheduling group (same session or cgroup) used "
                  f"{load.same_group_cpus:.1f} cores; the kernel shares those cores thread for "
                  "thread, so the workers are predicted to get part of them.")
    return words


def _limit_note(model: ThroughputModel, prediction: Prediction) -> str:
    note = f"then limited by {_LIMIT_WORDS[prediction.limit]}"
    if prediction.limit == "cpu" and model.load is None:
        # Measured on the demo (2 CPUs, 0 -> 1 worker): throughput came within 8% of the
        # prediction, but the contention showed as longer steps rather than as data wait.
        note += (f"; the step and the workers share {model.usable_cpus} CPUs, so part of the "
                 "predicted stall may show as slower steps instead")
    return note


def shm_batches_cap(run: RunRecord) -> Optional[int]:
    """Most batches in flight (``prefetch_factor x num_workers``) that ``/dev/shm``'s free space
    holds with :data:`~pipecheck.analysis.memory.SHM_HEADROOM_FACTOR` headroom; ``None`` when
    its size or the batch size was not measured. Workers hand batches over through it, and a
    full ``/dev/shm`` kills them with a bus error, so no rule proposes more."""
    shm, batch_bytes = run.shared_memory, run.consumer.batch_bytes
    if shm is None or not batch_bytes:
        return None
    return int(shm.free_bytes // (SHM_HEADROOM_FACTOR * batch_bytes))


def producer_class(model: ThroughputModel) -> str:
    """What production waits on: the measured class (CPU + run-queue time, storage reads,
    iowait; :mod:`pipecheck.analysis.bound`), else CPU per busy second alone against
    :data:`LATENCY_BOUND_CPU_FRACTION`. Only ``cpu-bound`` work is held to
    :func:`cpu_bound_worker_limit`: waiting work (``io-bound``, ``latency-bound``) may use more
    workers than cores, up to :data:`MAX_WORKERS_PER_CPU` per CPU."""
    if model.worker_class is not None:
        return model.worker_class
    return CPU_BOUND if model.worker_cpu_fraction >= LATENCY_BOUND_CPU_FRACTION else LATENCY_BOUND


def cpu_bound_worker_limit(model: ThroughputModel) -> int:
    """Most CPU-bound workers worth running: the usable CPUs less the cores the main process
    keeps busy during the step (its CPU per batch x the step rate), rounded, at least 1.

    Why not let the CPU cap alone decide: it assumes oversubscribed cores lose nothing, and on
    the demo (2 CPUs, step on ~1 core) going from 1 to 2 CPU-bound workers was predicted at
    +11% but measured -3% (502 -> 485 samples/s): three busy processes on two cores slow the
    step. The issue's rule: never past the usable cores for CPU-bound work."""
    main_cores = model.main_cpu_per_batch_s * model.demand_batches_per_s
    return max(1, math.floor(model.usable_cpus - main_cores + 0.5))


def _more_workers_reason(
    context: _Context,
    settings: LoaderSettings,
    workers: int,
    capacity: float,
    prediction: Prediction,
) -> str:
    model = context.model
    demand = model.demand_batches_per_s
    stall = percent(context.measured_stall)
    if settings.num_workers == 0:
        return (
            f"With num_workers=0 the main process spends {seconds(1.0 / capacity)} producing each "
            f"batch between {seconds(1.0 / demand)} steps, so the loop waits {stall} of its time; "
            f"with {count(workers, 'worker')} production overlaps the step for about "
            f"{batch_rate(prediction.steady_batches_per_s)} in steady state (demand {batch_rate(demand)})."
            + (" Production's CPU here was inflated by torch's intra-op threads, which "
               "workers do not run: the workers are taken to pay the calling thread's CPU, "
               "and the interval runs from that to the process's CPU."
               if model.worker_cpu_range_s is not None else "")
            + (f" The main process's {model.pool_threads} intra-op threads are counted as "
               "spin-waiting beside the workers, taking cores from them."
               if model.pool_threads else "")
            + _starved_step_words(model)
        )
    cpu_fraction = model.worker_cpu_fraction
    kind = producer_class(model)
    if kind == CPU_BOUND:
        kind = "CPU-bound"  # the capital reads better in a sentence
    beyond_cores = (
        f" (more than the {model.usable_cpus} usable CPUs, which {kind} work tolerates)"
        if workers > model.usable_cpus
        else ""
    )
    if kind == IO_BOUND:
        beyond_cores += " (IO-bound: the gain stops once storage bandwidth is reached)"
    capped = (
        f" (the usable CPUs cap production at {batch_rate(prediction.capacity_batches_per_s)})"
        if prediction.limit == "cpu"
        else ""
    )
    return (
        f"With {count(settings.num_workers, 'worker')} the loader delivers at most "
        f"{batch_rate(capacity)} ({batch_rate(model.per_worker_batches_per_s)} each while busy) against a "
        f"step demand of {batch_rate(demand)}, so the loop waits {stall} of its time; the workers are "
        f"{kind} ({percent(cpu_fraction)} CPU while busy), so {count(workers, 'worker')}"
        f"{beyond_cores} should deliver about {batch_rate(prediction.steady_batches_per_s)} in steady "
        f"state{capped}."
    )


def _starved_step_words(model: ThroughputModel) -> str:
    """A sentence on a step measured with its intra-op pool starved
    (:attr:`~pipecheck.analysis.model.ThroughputModel.unstarved_step_s`), which predictions
    do not use (the step's own ceiling bounds them); empty otherwise."""
    if model.unstarved_step_s is None:
        return ""
    step_s = 1.0 / model.demand_batches_per_s
    return (f" The step took {seconds(step_s)} with num_workers=0, its calling thread on a "
            f"core {percent(model.unstarved_step_s / step_s)} of it while the intra-op threads "
            "ran (it waited for a core): beside workers it may run faster, down to that "
            f"thread's CPU time, {seconds(model.unstarved_step_s)}, but the prediction keeps "
            f"the measured step, the most the step is known to allow ({batch_rate(1.0 / step_s)}"
            "); 'pipecheck stress FILE.py:make_loader' (a function that builds your "
            "DataLoader) measures the faster step.")


def _fewer_workers(context: _Context, settings: LoaderSettings) -> _Outcome:
    """Compute-bound with large headroom: the fewest workers (>= 1) whose capacity stays at
    :data:`DOWN_HEADROOM` x demand and whose predicted stall stays compute-bound."""
    model = context.model
    if context.analysis.diagnosis.verdict != COMPUTE_BOUND or settings.num_workers < 2:
        return None
    demand = model.demand_batches_per_s
    found = _fewest_sufficient_workers(context, settings)
    if found is None:
        return None
    workers, prediction = found
    capacity, _ = model.capacity(workers)
    proposed = replace(settings, num_workers=workers)
    current_capacity, _ = model.capacity(settings.num_workers)
    freed = settings.num_workers - workers
    rss = mean(
        w.rss_max_bytes for w in context.analysis.producer.workers if w.rss_max_bytes is not None
    )
    memory = "" if rss is None else f" (about {size(rss)} RSS each)"
    reason = (
        f"The loader could produce {batch_rate(current_capacity)} against a step demand of "
        f"{batch_rate(demand)} ({current_capacity / demand:.1f}x) while the loop waits only "
        f"{percent(context.measured_stall)}; dropping to {count(workers, 'worker')} keeps "
        f"{capacity / demand:.1f}x headroom and frees "
        f"{count(freed, 'worker process', 'worker processes')}{memory}."
    )
    recommendation = Recommendation(
        setting="num_workers",
        current=settings.num_workers,
        proposed=workers,
        expected=_expected(prediction, "same throughput, fewer processes", model, proposed),
        reason=reason,
    )
    return recommendation, proposed


def _fewest_sufficient_workers(
    context: _Context, settings: LoaderSettings
) -> Optional[tuple[int, Prediction]]:
    """The smallest worker count below the current one that keeps DOWN_HEADROOM x demand,
    stays compute-bound and keeps the predicted throughput (never below the current
    settings' prediction), with its prediction."""
    model = context.model
    current = model.predict(settings)
    for workers in range(1, settings.num_workers):
        capacity, _ = model.capacity(workers)
        prediction = model.predict(replace(settings, num_workers=workers))
        if (
            capacity >= DOWN_HEADROOM * model.demand_batches_per_s
            and prediction.steady_stall_fraction <= context.compute_bound_stall
            and not _slower(prediction.batches_per_s, current.batches_per_s)
        ):
            return workers, prediction
    return None


def _prefetch_factor(context: _Context, settings: LoaderSettings) -> _Outcome:
    """Stalls are material (above the compute-bound threshold) and the prefetch lead
    (prefetch_factor x num_workers / demand seconds) is shorter than the p99 batch time: the
    smallest prefetch_factor whose lead covers the p99, if the model predicts a gain."""
    model = context.model
    batch_time = context.analysis.producer.batch_time_s
    if settings.num_workers == 0 or batch_time is None:
        return None
    current = model.predict(settings)
    lead_s = model.lead_s(settings)
    if current.steady_stall_fraction <= context.compute_bound_stall or lead_s >= batch_time.p99:
        return None
    factor = settings.effective_prefetch_factor()
    needed = math.ceil(batch_time.p99 * model.demand_batches_per_s / settings.num_workers - 1e-9)
    proposed_factor = max(needed, factor + 1)
    if proposed_factor > MAX_PREFETCH_FACTOR:
        return None
    in_flight = shm_batches_cap(context.run)
    if in_flight is not None and proposed_factor * settings.num_workers > in_flight:
        return None  # the batches held would not fit in /dev/shm (bus error risk)
    proposed = replace(settings, prefetch_factor=proposed_factor)
    if not _gains(model, settings, proposed):
        return None
    prediction = model.predict(proposed)
    reason = (
        f"Batch production time has a long tail (p99 {seconds(batch_time.p99)} against a mean "
        f"of {seconds(batch_time.mean)}): with {settings.num_workers} workers x prefetch_factor "
        f"{factor} a batch is requested {seconds(lead_s)} before the step needs it, so slow "
        f"batches stall the loop ({_stall_now(context, settings, current)}); prefetch_factor="
        f"{proposed_factor} gives {seconds(model.lead_s(proposed))} of lead for "
        f"{proposed_factor * settings.num_workers} batches held in memory."
    )
    recommendation = Recommendation(
        setting="prefetch_factor",
        current=factor,
        proposed=proposed_factor,
        expected=_expected(prediction,
                           "replaying the measured batch times against the lead", model,
                           proposed),
        reason=reason,
    )
    return recommendation, proposed


def _persistent_workers(context: _Context, settings: LoaderSettings) -> _Outcome:
    """Workers restart every epoch and that start-up wait plus the shutdown wait at the
    epoch's end is at least :data:`PERSISTENT_START_SHARE` of an epoch's wall time. Expected
    figures cover a run of the measured epoch count (at least 2, since the first epoch pays
    the start-up anyway)."""
    model = context.model
    if settings.num_workers == 0 or settings.persistent_workers:
        return None
    if context.run.loader.persistent_workers is not False:
        return None  # None: the loader has no such setting
    epoch_s = mean_epoch_wall_s(context.run.consumer)
    restart_s = model.cold_start_s + model.shutdown_s
    restart_saving_s = restart_s - model.warm_start_s
    if not epoch_s or restart_saving_s <= 0 or restart_s < PERSISTENT_START_SHARE * epoch_s:
        return None
    epochs = max(model.epochs, 2)
    proposed = replace(settings, persistent_workers=True)
    prediction = model.predict(proposed, epochs=epochs)
    shutdown = (f" and ends with a {seconds(model.shutdown_s)} wait while its workers shut "
                f"down" if model.shutdown_s >= MIN_SHUTDOWN_S else "")
    # What the first batch waited for: worker start-up only where the run had workers.
    cause = ("worker start-up" if context.run.loader.num_workers
             else "its first fetch, measured with num_workers=0: new workers add their start")
    # The saving itself is stated once, by the effect figures (pipecheck.effects).
    reason = (
        f"Each epoch starts with a {seconds(model.cold_start_s)} wait for its first batch "
        f"({cause}){shutdown}, {percent(restart_s / epoch_s)} of a {seconds(epoch_s)} "
        "epoch; persistent workers start once, in the first epoch, and keep their state."
    )
    recommendation = Recommendation(
        setting="persistent_workers",
        current=False,
        proposed=True,
        expected=_expected(prediction, f"over a {epochs}-epoch run like the measured one",
                           model, proposed, epochs),
        reason=reason,
    )
    return recommendation, proposed


def _pin_memory(context: _Context, settings: LoaderSettings) -> _Outcome:
    """CUDA is available and ``pin_memory`` is False. The effect is not predicted: it depends
    on the host-to-device copy, which only the device probe could time."""
    run = context.run
    if not run.environment.cuda or run.loader.pin_memory is not False:
        return None
    batches_per_s = context.analysis.consumer.batches_per_s
    recommendation = Recommendation(
        setting="pin_memory",
        current=False,
        proposed=True,
        expected=Expected(
            samples_per_s=None,
            stall_fraction=None,
            note="pipecheck cannot quantify the host-to-device copy without the device probe",
        ),
        reason=(
            f"CUDA is available and each of the {batch_rate(batches_per_s)} is copied to the device "
            "from pageable memory; page-locked batches let that copy run asynchronously "
            "(.to(device, non_blocking=True))."
        ),
    )
    return recommendation, settings
