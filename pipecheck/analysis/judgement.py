"""The one judgement a report's verdict, capacity / demand line and recommendations share.

Two kinds of evidence speak to whether the loader keeps up with the step: the **measured stall**
(the loop's own wait inside ``next()``, timed directly) and the **capacity estimate** (workers'
rates while busy, summed and capped by the CPUs; :mod:`pipecheck.analysis.producer`). They can
disagree: the estimate leaves out what happens between batches (inter-process hand-over, a slow
batch holding back ready ones, CPU contention beyond what the busy rates saw, start-up). The
measured stall always wins: the verdict is judged on it, ``loader_keeps_up`` follows it, and
when the estimate points the other way :func:`judge_capacity` says so in ``capacity_note``
with the likely reasons found in the run, rather than printing both as if they agreed.

A wait too small to matter is never a bottleneck: below :data:`MIN_MATERIAL_WAIT_S` per batch
the run is compute-bound whatever its stall fraction (:func:`judge_stall`).
"""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.consumer import mean_steady_wait_s
from pipecheck.analysis.model import measured_settings
from pipecheck.loader_settings import TORCH_DEFAULT_PREFETCH_FACTOR
from pipecheck.analysis.stats import ratio
from pipecheck.effects import capacity_words
from pipecheck.kinds import BALANCED, COMPUTE_BOUND, INPUT_BOUND, NO_DATA, FindingKind, Verdict
from pipecheck.records import (
    ConsumerSummary,
    Finding,
    Judgement,
    ProducerSummary,
    RunRecord,
    WorkerSummary,
)
from pipecheck.units import percent, seconds

MIN_MATERIAL_WAIT_S = 10e-6
"""Mean wait per batch (seconds) below which no stall fraction makes a run input-bound.
pipecheck's choice (docs/decisions.md#min_material_wait_s)."""

CONTENDED_RUNQUEUE_FRACTION = 0.2
"""Workers that waited for a core at least this share of their busy time are named as CPU
contention in a capacity note (pipecheck's choice: one fifth of the time lost to waiting)."""


def judge_stall(
    consumer: ConsumerSummary,
    run: RunRecord,
    input_bound_stall: float,
    compute_bound_stall: float,
) -> tuple[Verdict, Optional[float], bool, Optional[float]]:
    """``(verdict, stall judged, whether it is the steady stall, mean wait per batch in s)``.

    The steady stall (epoch starts left out) and mean steady wait are judged when there are
    steady batches, else the whole run's. Thresholds are stall fractions (0-1). A mean wait per
    batch below :data:`MIN_MATERIAL_WAIT_S` is ``compute-bound`` whatever the stall."""
    if consumer.batches == 0 or consumer.stall_fraction is None:
        return NO_DATA, None, False, None
    steady = consumer.steady_stall_fraction is not None
    stall = consumer.steady_stall_fraction if steady else consumer.stall_fraction
    assert stall is not None  # stall_fraction checked above, steady_stall_fraction by steady
    wait_s = mean_steady_wait_s(run.consumer) if steady else None
    if wait_s is None:
        wait_s = ratio(consumer.wait_s, consumer.batches)
    if wait_s is not None and wait_s < MIN_MATERIAL_WAIT_S:
        return COMPUTE_BOUND, stall, steady, wait_s
    if stall >= input_bound_stall:
        return INPUT_BOUND, stall, steady, wait_s
    if stall <= compute_bound_stall:
        return COMPUTE_BOUND, stall, steady, wait_s
    return BALANCED, stall, steady, wait_s


def judge_capacity(
    verdict: Verdict,
    stall: Optional[float],
    steady: bool,
    wait_per_batch_s: Optional[float],
    run: RunRecord,
    consumer: ConsumerSummary,
    producer: ProducerSummary,
    findings: list[Finding],
    input_bound_stall: float,
) -> Judgement:
    """The :class:`~pipecheck.records.Judgement` of a diagnosed run: the stall judged, its data
    goodput, and the capacity estimate reconciled with it. ``findings`` are the diagnosis's
    (their kinds name the reasons an estimate can be wrong); ``input_bound_stall`` is the
    threshold (0-1) the verdict used."""
    capacity, demand = producer.capacity_batches_per_s, consumer.demand_batches_per_s
    capacity_ratio = capacity / demand if capacity is not None and demand else None
    keeps_up = None if verdict == NO_DATA else verdict != INPUT_BOUND
    note = None
    # With num_workers=0 production and the step take turns (no overlap): the loop waits for
    # every batch whatever capacity / demand is (stall = 1 / (1 + ratio)), so a high stall
    # beside a ratio above 1 is what the estimate predicts, not a contradiction.
    serial = measured_settings(run).num_workers == 0
    if capacity_ratio is not None and stall is not None and not serial:
        if verdict == INPUT_BOUND and capacity_ratio >= 1.0:
            note = _estimate_too_high(capacity_ratio, stall, steady, run, consumer, producer,
                                      findings)
        elif verdict != INPUT_BOUND and capacity_ratio < 1.0 - input_bound_stall:
            note = _estimate_too_low(capacity_ratio, stall, steady, wait_per_batch_s)
    return Judgement(
        stall_fraction=stall,
        steady=steady,
        goodput_fraction=None if stall is None else 1.0 - stall,
        wait_per_batch_s=wait_per_batch_s,
        min_wait_per_batch_s=MIN_MATERIAL_WAIT_S,
        capacity_demand_ratio=capacity_ratio,
        loader_keeps_up=keeps_up,
        capacity_note=note,
    )


def _estimate_too_high(
    capacity_ratio: float,
    stall: float,
    steady: bool,
    run: RunRecord,
    consumer: ConsumerSummary,
    producer: ProducerSummary,
    findings: list[Finding],
) -> str:
    scope = "steady " if steady else ""
    reasons = _reasons_estimate_high(run, consumer, producer, findings)
    return (
        f"The capacity estimate ({capacity_ratio:.2f}x the step's demand) says "
        f"{capacity_words(capacity_ratio)}, but the loop measurably waited {percent(stall)} of its {scope}time: the measured "
        "stall wins (it is timed directly; the estimate sums the workers' rates while busy and "
        f"misses what happens between batches). Likely here: {'; '.join(reasons)}."
    )


def _reasons_estimate_high(
    run: RunRecord, consumer: ConsumerSummary, producer: ProducerSummary,
    findings: list[Finding],
) -> list[str]:
    """What in this run can make busy-rate capacity overstate what the loop receives."""
    kinds = {f.kind for f in findings}
    reasons = []
    if FindingKind.HEAD_OF_LINE_BLOCKING in kinds:
        reasons.append("in-order delivery made ready batches wait behind a slow one")
    tail = _tail_beyond_lead(run, consumer, producer)
    if tail is not None:
        reasons.append(tail)
    if FindingKind.WORKERS_UNBALANCED in kinds:
        reasons.append("unbalanced workers: the slowest one sets the pace of in-order delivery")
    if FindingKind.SLOW_BATCH_HANDOVER in kinds:
        reasons.append("receiving each batch from a worker costs the main thread CPU")
    contended = _contended_workers(producer.workers)
    if contended is not None:
        reasons.append(f"CPU contention: workers waited for a core {percent(contended)} of "
                       "their busy time")
    elif FindingKind.CPU_SATURATED in kinds:
        reasons.append("the CPUs were saturated, so the workers' rates do not add up")
    if not reasons:
        reasons.append("worker start-up, inter-process hand-over and CPU contention, which the "
                       "busy-time rates do not count")
    return reasons


def _tail_beyond_lead(
    run: RunRecord, consumer: ConsumerSummary, producer: ProducerSummary
) -> Optional[str]:
    """Slow batches (p99 production time) longer than the prefetch lead
    (``prefetch_factor x num_workers / demand`` seconds), in words; ``None`` otherwise."""
    workers = run.loader.num_workers or 0
    batch_time, demand = producer.batch_time_s, consumer.demand_batches_per_s
    if batch_time is None or workers == 0 or not demand:
        return None
    lead_s = (run.loader.prefetch_factor or TORCH_DEFAULT_PREFETCH_FACTOR) * workers / demand
    if batch_time.p99 <= lead_s:
        return None
    return (f"slow batches (p99 {seconds(batch_time.p99)}) take longer than the "
            f"{seconds(lead_s)} prefetch lead")


def _contended_workers(workers: list[WorkerSummary]) -> Optional[float]:
    """The mean run-queue fraction of the workers that measured one, when it is at least
    :data:`CONTENDED_RUNQUEUE_FRACTION`; else ``None``."""
    measured = [w.runqueue_fraction for w in workers if w.runqueue_fraction is not None]
    if not measured:
        return None
    mean_fraction = sum(measured) / len(measured)
    return mean_fraction if mean_fraction >= CONTENDED_RUNQUEUE_FRACTION else None


def _estimate_too_low(
    capacity_ratio: float, stall: float, steady: bool, wait_per_batch_s: Optional[float]
) -> str:
    scope = "steady " if steady else ""
    wait = "" if wait_per_batch_s is None else f" ({seconds(wait_per_batch_s)} per batch)"
    return (
        f"The capacity estimate ({capacity_ratio:.2f}x the step's demand) says "
        f"{capacity_words(capacity_ratio)}, but the loop waited only {percent(stall)} of its {scope}time{wait}: the "
        "measured stall wins (it is timed directly). The estimate is low: the workers' rates "
        "were measured while busy under this run's contention, and batches prefetched ahead "
        "hide their production time."
    )
