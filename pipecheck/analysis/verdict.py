"""The diagnosis: a verdict (input-bound, compute-bound, balanced, no-data) and findings.

Thresholds are pipecheck's defaults, overridable through :func:`pipecheck.analysis.analyze`:
a steady data stall of 10% or more of loop time is input-bound (the level MLPerf-style and
DS-Analyzer-style analyses treat as material), 3% or less is compute-bound, in between is
balanced; whatever the stall, a mean wait under 10 us per batch is compute-bound
(:data:`pipecheck.analysis.judgement.MIN_MATERIAL_WAIT_S`, which states its source). The other
constants below are likewise pipecheck's own choices, stated where used.
"""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.consumer import (
    cold_start_s,
    wait_cpu_per_batch_s,
    mean_epoch_wall_s,
    mean_steady_wait_s,
    steady_batch_count,
)
from pipecheck.analysis.causes import cause_findings
from pipecheck.analysis.judgement import MIN_MATERIAL_WAIT_S, judge_stall
from pipecheck.analysis.model import MIN_STEADY_BATCHES, enough_steady_batches
from pipecheck.analysis.producer import usable_host
from pipecheck.analysis.stats import ratio
from pipecheck.kinds import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    NO_DATA,
    VERDICT_FINDING,
    FindingKind,
    Severity,
    Verdict,
)
from pipecheck.units import batch_rate, percent, seconds
from pipecheck.records import ConsumerSummary, Diagnosis, Finding, ProducerSummary, RunRecord

DEFAULT_INPUT_BOUND_STALL = 0.10
"""Steady stall fraction at or above which a run is input-bound (pipecheck's default)."""

DEFAULT_COMPUTE_BOUND_STALL = 0.03
"""Steady stall fraction at or below which a run is compute-bound (pipecheck's default)."""

CRITICAL_STALL = 0.5
"""An input-bound finding is ``critical`` from this stall on: the step waits more than it runs."""

SLOW_FIRST_BATCH_EPOCH_SHARE = 0.05
"""A first-batch wait is slow when it is at least this share of an epoch's wall time..."""

SLOW_FIRST_BATCH_WAIT_RATIO = 10.0
"""...and at least this many times the steady mean wait per batch, or than
:data:`~pipecheck.analysis.judgement.MIN_MATERIAL_WAIT_S` when that is larger (100 us)."""

UNBALANCED_RATE_RATIO = 2.0
"""Workers are unbalanced when the fastest busy rate exceeds the slowest by more than this."""

CPU_SATURATED_FRACTION = 0.9
"""Main process plus workers using this share of the usable CPUs or more is saturation."""

BOTTLENECKS = {
    INPUT_BOUND: "input pipeline",
    COMPUTE_BOUND: "training step",
    BALANCED: "neither",
    NO_DATA: "unknown",
}


def diagnose(
    run: RunRecord,
    consumer: ConsumerSummary,
    producer: ProducerSummary,
    data_gaps: list[str],
    *,
    input_bound_stall: float,
    compute_bound_stall: float,
) -> Diagnosis:
    """Verdict plus findings. ``data_gaps`` are the reasons no model could be built (each
    becomes part of an ``insufficient-data`` finding); thresholds are stall fractions 0-1."""
    verdict, stall, steady, wait_s = judge_stall(consumer, run, input_bound_stall,
                                                 compute_bound_stall)
    thresholds = {
        "input_bound_stall_fraction": input_bound_stall,
        "compute_bound_stall_fraction": compute_bound_stall,
    }
    candidates = [
        _status_finding(consumer),
        _no_batches_finding(consumer),
        _verdict_finding(verdict, stall, steady, wait_s, consumer, producer, thresholds),
        _slow_first_batch_finding(run),
        _unbalanced_finding(producer),
        _cpu_saturated_finding(run),
        _handover_finding(run, consumer, thresholds),
        _short_run_finding(run, consumer),
        _insufficient_data_finding(data_gaps),
        *cause_findings(run, producer, verdict),
    ]
    return Diagnosis(
        verdict=verdict,
        bottleneck=BOTTLENECKS[verdict],
        findings=[f for f in candidates if f is not None],
        thresholds=thresholds,
    )


def _status_finding(consumer: ConsumerSummary) -> Optional[Finding]:
    evidence = {"batches": consumer.batches, "wall_s": consumer.wall_s}
    if consumer.status != "error" and consumer.error is not None:
        raised = consumer.errors or 1
        return Finding(
            kind=FindingKind.LOADER_ERROR,
            severity="warning",
            message=f"The loader raised {raised} time{'s' if raised != 1 else ''} "
            f"(last: {consumer.error}) and the loop went on past "
            f"{'them' if raised != 1 else 'it'}; the batches that raised are not in the figures.",
            evidence={**evidence, "error": consumer.error, "errors": raised},
        )
    if consumer.status == "error":
        return Finding(
            kind=FindingKind.LOADER_ERROR,
            severity="critical",
            message=f"The run ended with an error after {consumer.batches} batches "
            f"({seconds(consumer.wall_s)}): {consumer.error or 'no message'}; the figures cover "
            "the run up to it.",
            evidence={**evidence, "error": consumer.error},
        )
    if consumer.status in ("interrupted", "terminated"):
        how = "interrupted" if consumer.status == "interrupted" else "terminated (SIGTERM)"
        return Finding(
            kind=FindingKind.RUN_INTERRUPTED,
            severity="warning",
            message=f"The run was {how} after {consumer.batches} batches "
            f"({seconds(consumer.wall_s)}); the figures cover the part that ran.",
            evidence=evidence,
        )
    return None


def _no_batches_finding(consumer: ConsumerSummary) -> Optional[Finding]:
    if consumer.batches > 0:
        return None
    return Finding(
        kind=FindingKind.NO_BATCHES,
        severity="critical",
        message=f"The loader yielded no batch over {consumer.epochs} epoch(s) "
        f"(status {consumer.status}), so there is nothing to measure.",
        evidence={"batches": 0, "epochs": consumer.epochs},
    )


def _verdict_finding(
    verdict: Verdict,
    stall: Optional[float],
    steady: bool,
    wait_s: Optional[float],
    consumer: ConsumerSummary,
    producer: ProducerSummary,
    thresholds: dict[str, float],
) -> Optional[Finding]:
    if verdict == NO_DATA or stall is None:
        return None
    scope = " in steady state" if steady else ""
    evidence = {
        "steady_stall_fraction" if steady else "stall_fraction": stall,
        "run_stall_fraction": consumer.stall_fraction,
        "demand_batches_per_s": consumer.demand_batches_per_s,
        "batches_per_s": consumer.batches_per_s,
        "capacity_batches_per_s": producer.capacity_batches_per_s,
        "wait_per_batch_s": wait_s,
        "min_wait_per_batch_s": MIN_MATERIAL_WAIT_S,
    }
    capacity = producer.capacity_batches_per_s
    demand = consumer.demand_batches_per_s
    if verdict == INPUT_BOUND:
        threshold = thresholds["input_bound_stall_fraction"]
        message = (
            f"Input-bound: the training loop waited for data {percent(stall)} of its time{scope} "
            f"(threshold {percent(threshold)})"
        )
        if demand is not None and consumer.batches_per_s is not None:
            message += (
                f"; the step could take {batch_rate(demand)} but received {batch_rate(consumer.batches_per_s)}"
            )
        severity: Severity = "critical" if stall >= CRITICAL_STALL else "warning"
    elif verdict == COMPUTE_BOUND and _negligible(wait_s) and stall > thresholds[
            "compute_bound_stall_fraction"]:
        threshold = thresholds["compute_bound_stall_fraction"]
        message = (
            f"Compute-bound: the training loop waited for data {percent(stall)} of its "
            f"time{scope}, but only {seconds(wait_s)} per batch, below the "
            f"{seconds(MIN_MATERIAL_WAIT_S)} under which a wait cannot hold a step back"
        )
        if demand is not None:
            message += f"; the step sets the pace at {batch_rate(demand)}"
        severity = "info"
    elif verdict == COMPUTE_BOUND:
        threshold = thresholds["compute_bound_stall_fraction"]
        message = (
            f"Compute-bound: the training loop waited for data only {percent(stall)} of its "
            f"time{scope} (threshold {percent(threshold)})"
        )
        if demand is not None:
            message += f"; the step sets the pace at {batch_rate(demand)}"
        if demand is not None and capacity is not None:
            message += f" and the loader could deliver {batch_rate(capacity)} ({capacity / demand:.1f}x)"
        severity = "info"
    else:
        threshold = thresholds["input_bound_stall_fraction"]
        message = (
            f"Balanced: the training loop waited for data {percent(stall)} of its time{scope}, "
            f"between the compute-bound ({percent(thresholds['compute_bound_stall_fraction'])}) "
            f"and input-bound ({percent(threshold)}) thresholds"
        )
        severity = "info"
    evidence["threshold_fraction"] = threshold
    return Finding(kind=VERDICT_FINDING[verdict], severity=severity, message=message + ".",
                   evidence=evidence)


def _negligible(wait_s: Optional[float]) -> bool:
    return wait_s is not None and wait_s < MIN_MATERIAL_WAIT_S


def _slow_first_batch_finding(run: RunRecord) -> Optional[Finding]:
    record = run.consumer
    first_s = cold_start_s(record, run.loader.persistent_workers)
    epoch_s = mean_epoch_wall_s(record)
    share = ratio(first_s, epoch_s)
    steady_wait_s = mean_steady_wait_s(record)
    if first_s is None or share is None or share < SLOW_FIRST_BATCH_EPOCH_SHARE:
        return None
    # Against the floor too: a first batch of a few microseconds is no start-up cost.
    if first_s < SLOW_FIRST_BATCH_WAIT_RATIO * max(steady_wait_s or 0.0, MIN_MATERIAL_WAIT_S):
        return None
    steady_text = (
        "" if steady_wait_s is None else f", against a steady wait of {seconds(steady_wait_s)}"
    )
    # Worker start-up is named only where the run had workers to start.
    cause = ("worker start-up and the first fetch" if run.loader.num_workers
             else "the first fetch and any lazy initialisation, in the main process")
    return Finding(
        kind=FindingKind.SLOW_FIRST_BATCH,
        severity="warning",
        message=f"Slow first batch: an epoch's first batch took {seconds(first_s)} on average "
        f"({cause}), {percent(share)} of a {seconds(epoch_s)} "
        f"epoch{steady_text}.",
        evidence={
            "first_batch_s": first_s,
            "epoch_wall_s": epoch_s,
            "epoch_share_fraction": share,
            "steady_wait_mean_s": steady_wait_s,
        },
    )


def _unbalanced_finding(producer: ProducerSummary) -> Optional[Finding]:
    rated = [w for w in producer.workers if w.rate_batches_per_s]
    if len(rated) < 2:
        return None
    fastest = max(rated, key=lambda w: w.rate_batches_per_s or 0.0)
    slowest = min(rated, key=lambda w: w.rate_batches_per_s or 0.0)
    assert fastest.rate_batches_per_s and slowest.rate_batches_per_s  # rated: nonzero rates
    spread = fastest.rate_batches_per_s / slowest.rate_batches_per_s
    if spread <= UNBALANCED_RATE_RATIO:
        return None
    return Finding(
        kind=FindingKind.WORKERS_UNBALANCED,
        severity="warning",
        message=f"Workers are unbalanced: worker {fastest.id} produces "
        f"{batch_rate(fastest.rate_batches_per_s)} while busy, worker {slowest.id} only "
        f"{batch_rate(slowest.rate_batches_per_s)} ({spread:.1f}x apart); with in-order delivery the "
        "slow one holds the others back.",
        evidence={
            "fastest_worker_id": fastest.id,
            "fastest_batches_per_s": fastest.rate_batches_per_s,
            "slowest_worker_id": slowest.id,
            "slowest_batches_per_s": slowest.rate_batches_per_s,
            "rate_ratio": spread,
        },
    )


def _cpu_saturated_finding(run: RunRecord) -> Optional[Finding]:
    host = usable_host(run.host)
    if host is None or host.duration_s <= 0:
        return None
    if host.processes:
        cpu_s = sum(p.cpu_s for p in host.processes)
    elif host.main_cpu_s is not None or host.workers_cpu_s is not None:
        cpu_s = (host.main_cpu_s or 0.0) + (host.workers_cpu_s or 0.0)
    else:
        return None
    cores_used = cpu_s / host.duration_s
    usable = run.environment.usable_cpus
    busy = ratio(cores_used, usable)
    if busy is None or busy < CPU_SATURATED_FRACTION:
        return None
    return Finding(
        kind=FindingKind.CPU_SATURATED,
        severity="warning",
        message=f"CPU saturated: the main process and its workers kept {cores_used:.2f} of "
        f"{usable} usable CPUs busy on average ({percent(busy)}); more workers cannot add "
        "CPU-bound throughput.",
        evidence={
            "cores_used": cores_used,
            "usable_cpus": usable,
            "busy_fraction": busy,
            "system_cpu_percent_mean": host.system_cpu_percent_mean,
        },
    )


def _handover_finding(
    run: RunRecord, consumer: ConsumerSummary, thresholds: dict[str, float]
) -> Optional[Finding]:
    """Receiving batches from workers costs the main thread a material share of the loop."""
    receive_s = wait_cpu_per_batch_s(run.consumer) if run.worker_probe == "workers" else None
    step_s = ratio(1.0, consumer.demand_batches_per_s)
    if receive_s is None or step_s is None:
        return None
    share = receive_s / (receive_s + step_s)
    if share < thresholds["compute_bound_stall_fraction"]:
        return None
    material = share >= thresholds["input_bound_stall_fraction"]
    return Finding(
        kind=FindingKind.SLOW_BATCH_HANDOVER,
        severity="warning" if material else "info",
        message=f"Receiving each batch from a worker costs the main thread {seconds(receive_s)} "
        f"of CPU inside next() (unpickling, mapping shared memory), {percent(share)} of the "
        f"{seconds(receive_s + step_s)} each batch takes at best; more workers do not remove "
        "it, fewer tensor objects per batch reduce it.",
        evidence={"receive_cpu_s": receive_s, "step_s": step_s, "loop_share_fraction": share},
    )


def _short_run_finding(run: RunRecord, consumer: ConsumerSummary) -> Optional[Finding]:
    steady = steady_batch_count(run.consumer)
    if consumer.batches == 0 or enough_steady_batches(run.consumer):
        return None
    return Finding(
        kind=FindingKind.SHORT_RUN,
        severity="warning",
        message=f"Short run: only {steady} steady batches ({consumer.batches} in all); rates and "
        f"the verdict are rough below {MIN_STEADY_BATCHES}.",
        evidence={"steady_batches": steady, "batches": consumer.batches,
                  "min_steady_batches": MIN_STEADY_BATCHES},
    )


def _insufficient_data_finding(data_gaps: list[str]) -> Optional[Finding]:
    if not data_gaps:
        return None
    return Finding(
        kind=FindingKind.INSUFFICIENT_DATA,
        severity="info",
        message="No recommendations: " + "; ".join(data_gaps) + ".",
        evidence={"gaps": list(data_gaps)},
    )
