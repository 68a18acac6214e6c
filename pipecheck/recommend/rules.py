"""The recommendation rules, in order (:data:`RULES`): each reads a :class:`~pipecheck.recommend.
context.RuleContext` and the settings proposed so far, and proposes one change with its expected
figures, or nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

from pipecheck.analysis.consumer import mean_epoch_wall_s, stress_command
from pipecheck.analysis.model import Prediction, ThroughputModel
from pipecheck.loader_settings import LoaderSettings, TORCH_DEFAULT_PREFETCH_FACTOR
from pipecheck.analysis.stats import mean
from pipecheck.kinds import (
    COMPUTE_BOUND,
    CPU_BOUND,
    INPUT_BOUND,
)
from pipecheck.units import batch_rate, count, percent, seconds, size
from pipecheck.records import (
    Expected,
    Recommendation,
    UNCERTAIN_WIDTH,
    interval_uncertain,
)
from pipecheck.recommend.limits import (MIN_GAIN_FRACTION, UP_HEADROOM, DOWN_HEADROOM,
                                        MAX_WORKERS_PER_CPU, MAX_CPU_BOUND_WORKERS_PER_CPU,
                                        MAX_PREFETCH_FACTOR, PERSISTENT_START_SHARE, MIN_SHUTDOWN_S,
                                        gains, pool_worker_limit, shm_batches_cap, producer_class,
                                        cpu_bound_worker_limit, slower)
from pipecheck.recommend.context import (RuleContext, Outcome, expected_figures)
from pipecheck.recommend.words import (stall_now, contention_words, limit_note, more_workers_reason)




@dataclass(frozen=True)
class Rule:
    """One recommendation rule: ``propose(context, settings)`` gives a change on top of the
    settings proposed so far, or ``None``. ``ends_chain``: once this rule proposes, no later
    rule runs (its expected figures are not a prediction later rules could build on)."""

    name: str
    propose: Callable[[RuleContext, LoaderSettings], Outcome]
    ends_chain: bool = False



def more_workers(context: RuleContext, settings: LoaderSettings) -> Outcome:
    """Input-bound and the producer's mean rate (not its tail) is short of what the consumer
    takes: the worker count with the best predicted steady rate, or the smallest within
    :data:`MIN_GAIN_FRACTION` of it that reaches :data:`UP_HEADROOM` x the consumer's rate
    (else the smallest within that margin), and never more than ``/dev/shm`` can feed
    (:func:`shm_batches_cap`). With host data the model charges each worker for the cores it
    takes from the step and from other processes, so CPU-bound workers may exceed the cores
    (up to :data:`MAX_CPU_BOUND_WORKERS_PER_CPU` per CPU) only where that is predicted to pay;
    without host data CPU-bound work keeps :func:`cpu_bound_worker_limit`.

    Where the main process's intra-op pool would wait at its barriers beside the workers
    (:meth:`~pipecheck.analysis.model.ThroughputModel.pool_waits_beside`), a cost the model
    does not price, the counts are weighed with the main process on one thread, as
    :func:`main_threads` then proposes, and this change states no figure of its own. Where
    the pool was starved and production waits (:func:`_step_unknown`), the step the workers
    will feed cannot be told from the run, and the count is the smallest within
    :data:`MIN_GAIN_FRACTION` of the producer's best capacity (:func:`_producer_best`)."""
    model = context.model
    if context.analysis.diagnosis.verdict != INPUT_BOUND:
        return None
    if (model.pool_starved and settings.num_workers == 0 == model.measured.num_workers
            and producer_class(model) == CPU_BOUND):
        return None  # its CPU figure is the starved pool's: starved_pool_workers proposes
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
    rates = {n: model.predict(_weighed(model, replace(settings, num_workers=n)))
             .steady_batches_per_s for n in range(settings.num_workers + 1, allowed + 1)}
    best = max(rates.values())
    near = [n for n, rate in rates.items() if rate * (1.0 + MIN_GAIN_FRACTION) >= best]
    roomy = [n for n in near
             if model.capacity(n)[0] >= UP_HEADROOM / model.consumer_floor_s(n)]
    # CPU-bound workers past the best gain nothing but cores taken from the step and others.
    workers = min(near) if producer_class(model) == CPU_BOUND else min(roomy or near)
    step_unknown = _step_unknown(model, settings)
    if step_unknown:
        workers = _producer_best(model, list(rates))
    proposed = replace(settings, num_workers=workers)
    weighed = _weighed(model, proposed)
    if not gains(model, settings, weighed):
        return None
    prediction = model.predict(weighed)
    reason = more_workers_reason(context, settings, workers, capacity, prediction)
    reason += contention_words(model, settings, proposed)
    if step_unknown:
        reason += (f" The measured step holds the starved pool's waits for its threads, which "
                   "one thread (the change below) does not pay, so the step the workers will "
                   "feed is unknown and may be far shorter: the count is the smallest within "
                   f"{percent(MIN_GAIN_FRACTION)} of the producer's best capacity, not one sized "
                   "to the measured step.")
    if shm_most is not None and workers == shm_most and shm_most < most:
        reason += (f" Capped at {count(workers, 'worker')}: /dev/shm holds "
                   f"{count(in_flight, 'batch', 'batches')} with the headroom pipecheck keeps "
                   f"(prefetch_factor {factor} x workers must fit).")
    if weighed != proposed:
        reason += (f" With the step's {model.pool_threads} intra-op threads beside "
                   f"{count(workers, 'worker')} the figures assume the next change "
                   "(torch_num_threads=1): without it each parallel op of the step would wait "
                   "for a descheduled thread, which pipecheck cannot price.")
        expected = Expected(samples_per_s=None, stall_fraction=None,
                            note="not predicted alone: with torch_num_threads=1, below")
    else:
        reason += settle_with_stress(context, settings, proposed, rates)
        expected = expected_figures(prediction, limit_note(model, prediction), model, proposed,
                                    consumer=context.run.consumer)
    recommendation = Recommendation(
        setting="num_workers",
        current=settings.num_workers,
        proposed=workers,
        expected=expected,
        reason=reason,
    )
    return recommendation, proposed


def _step_unknown(model: ThroughputModel, settings: LoaderSettings) -> bool:
    """Whether the step the workers will feed cannot be told from the run, so a worker count
    sized to the measured step's demand would starve it: measured at ``num_workers=0`` with the
    main process's intra-op pool starved
    (:attr:`~pipecheck.analysis.model.ThroughputModel.pool_starved`;
    :func:`starved_pool_threads` then proposes one thread), the threads as
    measured, and production not CPU-bound (a CPU-bound worker takes a core from the step, so
    more of them than the best predicted rate needs cost the step; :func:`more_workers` keeps
    its rule for those). ``benchmarks/calibration.py``'s latency pipeline beside a busy
    process measured an 88 ms step at ``num_workers=0``, and about 1 ms (a ceiling of 63,336
    samples/s) on one thread beside 3 workers: sized to the 88 ms, those 3 were proposed and
    gave 0.82 of the grid's best (4 workers; docs/model.md, "Stop 47")."""
    return (model.pool_starved and model.measured.num_workers == 0
            and settings.torch_num_threads is None and producer_class(model) != CPU_BOUND)


def _producer_best(model: ThroughputModel, counts: list[int]) -> int:
    """The smallest of ``counts`` (worker counts, non-empty) whose producer capacity in
    batches/s (:meth:`~pipecheck.analysis.model.ThroughputModel.capacity`, the step left out)
    is within :data:`MIN_GAIN_FRACTION` of the best of them."""
    capacities = {n: model.capacity(n)[0] for n in counts}
    best = max(capacities.values())
    return min(n for n, rate in capacities.items() if rate * (1.0 + MIN_GAIN_FRACTION) >= best)


def _weighed(model: ThroughputModel, settings: LoaderSettings) -> LoaderSettings:
    """``settings`` as :func:`more_workers` weighs them: with ``torch_num_threads=1`` where
    the main process's pool would wait at its barriers beside the workers and the model
    prices one thread (:func:`main_threads` then proposes it), else as given."""
    if settings.torch_num_threads is None and _pool_waits(model, settings.num_workers):
        return replace(settings, torch_num_threads=1)
    return settings


def _pool_waits(model: ThroughputModel, num_workers: int) -> bool:
    """Whether the pool would wait beside ``num_workers`` workers and one thread is priced."""
    return model.pool_waits_beside(num_workers) and model.threads_priced(1)


def main_threads(context: RuleContext, settings: LoaderSettings) -> Outcome:
    """With workers, the main process's active intra-op pool short of the cores it wants
    during the step (:meth:`~pipecheck.analysis.model.ThroughputModel.pool_waits_beside`) and
    one thread priced (:meth:`~pipecheck.analysis.model.ThroughputModel.one_thread_step_s`):
    ``torch_num_threads`` from the pool's size to 1, predicted with the step on one thread.
    No gain over the pool's own figure is required: that figure leaves out the barrier
    waits, so it overstates what the pool delivers (``benchmarks/step_threads.py``: one
    thread gave 12-43% more samples/s beside 2 CPU-bound workers on 2 cores; docs/model.md,
    "Threads as a setting"); :func:`~pipecheck.recommend.recommend` still drops it below the
    measured rate. DataLoader workers need no such change: torch runs each on one intra-op
    thread (``torch/utils/data/_utils/worker.py``)."""
    model = context.model
    if (settings.num_workers == 0 or settings.torch_num_threads is not None
            or not _pool_waits(model, settings.num_workers)):
        return None
    proposed = replace(settings, torch_num_threads=1)
    prediction = model.predict(proposed)
    steps = model.one_thread_step_s()
    load = model.load
    assert steps is not None and load is not None  # threads_priced(1) needs both
    share = model.shares(settings.num_workers).step_share
    reason = (
        f"Beside {count(settings.num_workers, 'worker')} the main process's "
        f"{model.pool_threads} torch intra-op threads would get about {percent(share)} of the "
        f"cores they want during the step ({load.cores_left():.1f} cores for them and the "
        "workers): each parallel op of the step then ends waiting for a descheduled thread "
        "while the others spin. On one thread the step does its work alone: "
        f"{seconds(steps[0])} a step with no loader work beside it (between the calling "
        f"thread's {seconds(steps[1])} of CPU and the process's {seconds(steps[2])}, "
        f"measured at {seconds(1.0 / model.demand_batches_per_s)} on "
        f"{model.pool_threads} threads). Call torch.set_num_threads(1) in the training "
        "process before the loop; DataLoader workers already run one thread each.")
    recommendation = Recommendation(
        setting="torch_num_threads",
        current=model.pool_threads,
        proposed=1,
        expected=expected_figures(prediction, "the step on one intra-op thread", model,
                                  proposed, consumer=context.run.consumer),
        reason=reason,
    )
    return recommendation, proposed


def starved_pool_threads(context: RuleContext, settings: LoaderSettings) -> Outcome:
    """Measured at ``num_workers=0`` with the main process's intra-op pool starved of cores
    (:attr:`~pipecheck.analysis.model.ThroughputModel.pool_starved`), whatever the verdict:
    every parallel op of production and of the step waited for a descheduled teammate while
    the others spin-waited, and one thread waits for none (``benchmarks/calibration.py``
    beside a busy process: the CPU step measured 149 samples/s, 2,012 quiet; the JPEG
    pipeline's 1 worker 257 samples/s, 451 with one thread). After the worker count proposed
    before it (:func:`more_workers` or :func:`starved_pool_workers`), or alone, proposes
    ``torch_num_threads`` from the pool's size to 1 with no prediction (how much of the
    measured times were those waits cannot be told from the run; the model cannot price the
    settings after it, so the chain ends); the reason names the stress run, with the user's
    own step, that measures it."""
    model = context.model
    if (model.measured.num_workers != 0 or not model.pool_starved
            or settings.torch_num_threads is not None):
        return None
    load = model.load
    assert load is not None  # pool_starved needs it
    threads = model.pool_threads
    reason = (
        f"With num_workers=0 the main process's {threads} torch intra-op threads had "
        f"{load.own_cpus:.1f} cores and waited for one {percent(1.0 - load.share)} of the time "
        "they wanted one, so each parallel op of production and of the step waited for a "
        "descheduled thread while the others spin-waited. On one thread no op waits for a "
        "teammate: call torch.set_num_threads(1) in the training process before the loop. "
        "How much of the measured times those waits were cannot be told from this run, so no "
        "figure is given; 'pipecheck stress FILE.py:make_loader --workers "
        f"{settings.num_workers} --torch-threads 1,{threads} --step train.py:step' (a "
        "function that builds your DataLoader, and your training step) measures it on this "
        "host.")
    recommendation = Recommendation(
        setting="torch_num_threads", current=threads, proposed=1,
        expected=Expected(samples_per_s=None, stall_fraction=None,
                          note="not predictable from this run"),
        reason=reason)
    return recommendation, replace(settings, torch_num_threads=1)


def starved_pool_workers(context: RuleContext, settings: LoaderSettings) -> Outcome:
    """Input-bound at ``num_workers=0`` with the main process's intra-op pool starved of cores
    (:attr:`~pipecheck.analysis.model.ThroughputModel.pool_starved`) and no worker count
    proposed by :func:`more_workers`: the serial run measured the pool's waits for its
    descheduled threads, which a worker (one intra-op thread) does not pay, so the measured
    cost overstates a worker's by an unknown factor (on ``benchmarks/prediction.py``'s JPEG
    pipeline beside a busy process, 17x: 22 ms of the calling thread's CPU a sample against
    1.3 ms in a worker; 1 worker delivered 14x the serial rate). Proposes
    :func:`pool_worker_limit` workers with no prediction (expected figures ``None``), and the
    reason names the stress command that measures it; :func:`starved_pool_threads` follows."""
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
        "your DataLoader; the step emulated as measured) measures it on this host.")
    reason += (" With torch_num_threads=1 (the change below) the step waits for no team "
               "either.")
    recommendation = Recommendation(
        setting="num_workers", current=0, proposed=workers,
        expected=Expected(samples_per_s=None, stall_fraction=None,
                          note="not predictable from this run"),
        reason=reason)
    return recommendation, proposed


def settle_with_stress(
    context: RuleContext, settings: LoaderSettings, proposed: LoaderSettings,
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


def fewer_workers(context: RuleContext, settings: LoaderSettings) -> Outcome:
    """Compute-bound with large headroom: the fewest workers (>= 1) whose capacity stays at
    :data:`DOWN_HEADROOM` x demand and whose predicted stall stays compute-bound."""
    model = context.model
    if context.analysis.diagnosis.verdict != COMPUTE_BOUND or settings.num_workers < 2:
        return None
    demand = model.demand_batches_per_s
    found = fewest_sufficient_workers(context, settings)
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
        expected=expected_figures(prediction, "same throughput, fewer processes", model, proposed,
                                  consumer=context.run.consumer),
        reason=reason,
    )
    return recommendation, proposed


def fewest_sufficient_workers(
    context: RuleContext, settings: LoaderSettings
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
            and not slower(prediction.batches_per_s, current.batches_per_s)
        ):
            return workers, prediction
    return None


def prefetch_factor_rule(context: RuleContext, settings: LoaderSettings) -> Outcome:
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
    if not gains(model, settings, proposed):
        return None
    prediction = model.predict(proposed)
    reason = (
        f"Batch production time has a long tail (p99 {seconds(batch_time.p99)} against a mean "
        f"of {seconds(batch_time.mean)}): with {settings.num_workers} workers x prefetch_factor "
        f"{factor} a batch is requested {seconds(lead_s)} before the step needs it, so slow "
        f"batches stall the loop ({stall_now(context, settings, current)}); prefetch_factor="
        f"{proposed_factor} gives {seconds(model.lead_s(proposed))} of lead for "
        f"{proposed_factor * settings.num_workers} batches held in memory."
    )
    recommendation = Recommendation(
        setting="prefetch_factor",
        current=factor,
        proposed=proposed_factor,
        expected=expected_figures(prediction,
                           "replaying the measured batch times against the lead", model,
                           proposed, consumer=context.run.consumer),
        reason=reason,
    )
    return recommendation, proposed


def persistent_workers_rule(context: RuleContext, settings: LoaderSettings) -> Outcome:
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
        expected=expected_figures(prediction, f"over a {epochs}-epoch run like the measured one",
                           model, proposed, epochs, consumer=context.run.consumer),
        reason=reason,
    )
    return recommendation, proposed


def pin_memory_rule(context: RuleContext, settings: LoaderSettings) -> Outcome:
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


RULES: tuple[Rule, ...] = (
    Rule("more-workers", more_workers),
    # Unpredictable (the starved pool's CPU figure is not the workers' own, nor its step's):
    # the threads' rule, which always follows the workers', ends the chain.
    Rule("starved-pool-workers", starved_pool_workers),
    Rule("starved-pool-threads", starved_pool_threads, ends_chain=True),
    Rule("main-threads", main_threads),
    Rule("fewer-workers", fewer_workers),
    Rule("prefetch-factor", prefetch_factor_rule),
    Rule("persistent-workers", persistent_workers_rule),
    Rule("pin-memory", pin_memory_rule),
)
"""The rules in the order they run; each one's expected figures assume the changes proposed
before it are applied (:func:`pipecheck.recommend.recommend`)."""
