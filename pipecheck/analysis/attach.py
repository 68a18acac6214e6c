"""What can be concluded about a training process pipecheck was attached to (``pipecheck
attach PID``) from py-spy's stack samples and psutil's counters alone.

How it works, and why: docs/internals.md (``pipecheck/analysis/attach.py``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from pipecheck.analysis.bound import classify, disk_busy_fraction, iowait_fraction, workers_class
from pipecheck.analysis.memory import process_growth
from pipecheck.analysis.stats import ratio, wilson_interval
from pipecheck.analysis.verdict import (
    BOTTLENECKS,
    CRITICAL_STALL,
    DEFAULT_COMPUTE_BOUND_STALL,
    DEFAULT_INPUT_BOUND_STALL,
)
from pipecheck.analysis.judgement import MIN_MATERIAL_WAIT_S
from pipecheck.kinds import (
    BALANCED,
    COMPUTE_BOUND,
    IN_PROGRESS,
    INPUT_BOUND,
    INTERRUPTED,
    NO_DATA,
    TERMINATED,
    VERDICT_FINDING,
    ConsumerStatus,
    FindingKind,
    Severity,
    Verdict,
)
from pipecheck.records import (
    ConsumerSummary,
    Diagnosis,
    Finding,
    HostRecord,
    Judgement,
    ProcessStats,
    ProducerSummary,
    StacksRecord,
    WorkerSummary,
)
from pipecheck.report_sections import AttachSection, AttachWorker
from pipecheck.units import percent

INTERVAL_METHOD = "Wilson score interval, 95%, on main-thread samples (Wilson 1927)"

UNKNOWN_WITHOUT_WRAPPING = (
    "batch count and batch rate (py-spy samples stacks, it does not count next() calls)",
    "wait and step time per batch, so the 10 us per-batch floor of the verdict is not applied",
    "producer capacity and per-worker batch times",
    "prefetch depth, batch size and the other DataLoader settings",
    "the effect of a change: no recommendation can be predicted (wrap the loader, or run "
    "`pipecheck run -- python train.py`, for recommendations)",
)
"""What an attached run cannot measure, listed in every attach section (``unknown``)."""


class AttachAnalysis(NamedTuple):
    consumer: ConsumerSummary
    producer: ProducerSummary
    diagnosis: Diagnosis
    section: AttachSection


def analyze_attach(
    stacks: StacksRecord,
    host: Optional[HostRecord],
    *,
    pid: int,
    status: str,
    window_start_unix_s: float,
    window_end_unix_s: float,
    signal: Optional[str] = None,
    input_bound_stall: float = DEFAULT_INPUT_BOUND_STALL,
    compute_bound_stall: float = DEFAULT_COMPUTE_BOUND_STALL,
) -> AttachAnalysis:
    """The attached run's consumer and producer summaries, diagnosis and ``attach`` section.

    ``stacks``: the py-spy record over ``pid`` (its ``--idle`` sampler covering the workers);
    ``host``: psutil's record of ``pid`` and its children (``None`` when not sampled);
    ``status``: ``complete``, ``interrupted`` (SIGINT), ``terminated`` (SIGTERM, SIGHUP) or
    ``target-exited``; ``signal``: the name of the signal that ended the window, if one did;
    the window's ends are ``time.time()`` seconds. Thresholds are stall fractions 0-1, the wrapped run's
    defaults (:mod:`pipecheck.analysis.verdict`). Never raises for a failed or empty record:
    the verdict is then ``no-data`` and the section says why."""
    window_s = max(window_end_unix_s - window_start_unix_s, 0.0)
    total, inside = stacks.main_thread_samples, stacks.main_wait_samples
    stall = ratio(inside, total) if stacks.status == "ok" and total else None
    interval = wilson_interval(inside, total) if stall is not None else None
    iowait, disk_busy = iowait_fraction(host), disk_busy_fraction(host)
    workers = _workers(stacks, host, iowait, disk_busy)
    seen = bool(inside) or bool(stacks.worker_samples_by_pid)
    thresholds = {"input_bound_stall_fraction": input_bound_stall,
                  "compute_bound_stall_fraction": compute_bound_stall}
    verdict = _verdict(stall if seen else None, input_bound_stall, compute_bound_stall)
    summaries = [_summary(i, w) for i, w in enumerate(workers)]
    chosen, basis = workers_class(summaries, iowait, disk_busy)
    main = _process(host, pid)
    main_growth = process_growth(pid, main.memory) if main is not None else None
    section = AttachSection(
        pid=pid,
        status=status,
        window_start_unix_s=window_start_unix_s,
        window_end_unix_s=window_end_unix_s,
        duration_s=window_s,
        rate_hz=stacks.rate_hz,
        main_thread_samples=total,
        next_samples=inside,
        stall_fraction=stall,
        stall_interval=list(interval) if interval is not None else None,
        interval_method=INTERVAL_METHOD,
        dataloader_seen=seen,
        num_workers=len(workers) if stacks.status == "ok" else None,
        workers=workers,
        workers_class=chosen,
        main_memory_growth_bytes_per_s=main_growth.slope_bytes_per_s if main_growth else None,
        main_memory_growth_significant=main_growth.significant if main_growth else None,
        batches_per_s=None,
        unknown=list(UNKNOWN_WITHOUT_WRAPPING),
        signal=signal,
    )
    wait_s = stall * window_s if stall is not None else 0.0
    consumer = ConsumerSummary(
        batches=0, samples=0, wall_s=window_s, wait_s=wait_s,
        compute_s=max(window_s - wait_s, 0.0) if stall is not None else 0.0,
        stall_fraction=stall, samples_per_s=None, batches_per_s=None, tokens_per_s=None,
        first_batch_s=None, status=_consumer_status(status))
    producer = ProducerSummary(
        capacity_batches_per_s=None, batch_time_s=None, workers=[],
        probe="none", capacity_basis="not measured: attached, not wrapped",
        workers_class=chosen, workers_class_basis=basis)
    findings = _findings(stacks, verdict, stall, interval, seen, thresholds, workers)
    judgement = Judgement(
        stall_fraction=stall if verdict != NO_DATA else None, steady=False,
        goodput_fraction=1.0 - stall if stall is not None and verdict != NO_DATA else None,
        wait_per_batch_s=None, min_wait_per_batch_s=MIN_MATERIAL_WAIT_S,
        loader_keeps_up=None if verdict == NO_DATA else verdict != INPUT_BOUND)
    diagnosis = Diagnosis(verdict=verdict, bottleneck=BOTTLENECKS[verdict], findings=findings,
                          thresholds=thresholds, judgement=judgement)
    return AttachAnalysis(consumer, producer, diagnosis, section)


def _consumer_status(status: str) -> ConsumerStatus:
    """The consumer summary's status for an attach window's: ended by a signal, or still
    running as far as pipecheck knows (the window ended, or the target exited)."""
    return (INTERRUPTED if status == INTERRUPTED else TERMINATED if status == TERMINATED
            else IN_PROGRESS)


def _verdict(stall: Optional[float], input_bound: float, compute_bound: float) -> Verdict:
    """The wrapped run's rule (:func:`pipecheck.analysis.judgement.judge_stall`) on the point
    estimate, without the per-batch floor (no per-batch wait is known)."""
    if stall is None:
        return NO_DATA
    if stall >= input_bound:
        return INPUT_BOUND
    if stall <= compute_bound:
        return COMPUTE_BOUND
    return BALANCED


def _process(host: Optional[HostRecord], pid: int) -> Optional[ProcessStats]:
    if host is None or host.status != "ok":
        return None
    found = [p for p in host.processes if p.pid == pid]
    return max(found, key=lambda p: p.last_seen_at_s) if found else None


def _workers(stacks: StacksRecord, host: Optional[HostRecord], iowait: Optional[float],
             disk_busy: Optional[float]) -> list[AttachWorker]:
    """One entry per worker pid seen in torch's worker loop, by pid."""
    out = []
    for key, samples in sorted(stacks.worker_samples_by_pid.items(), key=lambda kv: int(kv[0])):
        pid = int(key)
        busy = stacks.worker_busy_samples.get(key, 0)
        busy_fraction = ratio(busy, samples)
        interval = wilson_interval(busy, samples) if samples else None
        process = _process(host, pid)
        observed_s = (process.last_seen_at_s - process.first_seen_at_s) if process else None
        busy_s = busy_fraction * observed_s if busy_fraction is not None and observed_s else None
        cpu_fraction = ratio(process.cpu_s, busy_s) if process and busy_s else None
        runqueue = ratio(process.runqueue_s, busy_s) if process and busy_s else None
        reads = ratio(process.read_bytes, busy_s) if process and busy_s else None
        growth = process_growth(pid, process.memory) if process is not None else None
        out.append(AttachWorker(
            pid=pid,
            samples=samples,
            busy_fraction=busy_fraction,
            busy_interval=list(interval) if interval is not None else None,
            observed_s=observed_s,
            busy_s=busy_s,
            cpu_s=process.cpu_s if process else None,
            cpu_fraction=cpu_fraction,
            runqueue_fraction=runqueue,
            storage_read_bytes_per_s=reads,
            bound=classify(cpu_fraction, runqueue, reads, iowait, disk_busy),
            rss_max_bytes=process.rss_max_bytes if process else None,
            uss_max_bytes=process.uss_max_bytes if process else None,
            memory_growth_bytes_per_s=growth.slope_bytes_per_s if growth else None,
            memory_growth_significant=growth.significant if growth else None,
        ))
    return out


def _summary(index: int, worker: AttachWorker) -> WorkerSummary:
    """A :class:`WorkerSummary` for :func:`pipecheck.analysis.bound.workers_class` (not stored:
    an attached run has no batch counts)."""
    return WorkerSummary(id=index, pid=worker.pid, batches=0, busy_s=worker.busy_s or 0.0,
                         cpu_fraction=worker.cpu_fraction,
                         runqueue_fraction=worker.runqueue_fraction,
                         storage_read_bytes_per_s=worker.storage_read_bytes_per_s,
                         bound=worker.bound)


def _findings(stacks: StacksRecord, verdict: Verdict, stall: Optional[float],
              interval: Optional[tuple[float, float]], seen: bool,
              thresholds: dict[str, float], workers: list[AttachWorker]) -> list[Finding]:
    findings = []
    if stacks.status != "ok":
        findings.append(Finding(
            kind=FindingKind.PROBE_OFF, severity="warning",
            message=f"Stacks were not sampled ({stacks.status}): {stacks.note or 'no reason given'}",
            evidence={"status": stacks.status}))
    elif not seen:
        findings.append(Finding(
            kind=FindingKind.NO_DATALOADER, severity="warning",
            message=("No DataLoader seen: no main-thread sample was inside "
                     "_BaseDataLoaderIter.__next__ and no child process ran torch's worker "
                     "loop, so there is no stall estimate (is this the training process, and "
                     "is it training?)"),
            evidence={"main_thread_samples": stacks.main_thread_samples}))
    if verdict != NO_DATA and stall is not None and interval is not None:
        low, high = interval
        evidence = {"stall_fraction": stall, "stall_interval": [low, high],
                    "main_thread_samples": stacks.main_thread_samples,
                    "next_samples": stacks.main_wait_samples}
        name = verdict.replace("-", " ").capitalize()
        message = (f"{name}: the main thread was inside the DataLoader's __next__ in "
                   f"{percent(stall)} of {stacks.main_thread_samples} samples (95% interval "
                   f"{percent(low)}-{percent(high)})")
        if _verdict(low, **_named(thresholds)) != _verdict(high, **_named(thresholds)):
            message += ("; the interval spans a verdict threshold, so sample longer "
                        "(--duration) to settle it")
        severity: Severity = ("critical" if verdict == INPUT_BOUND and stall >= CRITICAL_STALL
                    else "warning" if verdict == INPUT_BOUND else "info")
        findings.append(Finding(kind=VERDICT_FINDING[verdict], severity=severity,
                                message=message + ".",
                                evidence=evidence))
    growing = [w.pid for w in workers if w.memory_growth_significant]
    if growing:
        findings.append(Finding(
            kind=FindingKind.MEMORY_GROWTH, severity="warning",
            message=f"Worker memory (USS) grew steadily in pid {', '.join(map(str, growing))}.",
            evidence={"pids": growing}))
    findings.append(Finding(
        kind=FindingKind.INSUFFICIENT_DATA, severity="info",
        message="No recommendations: attached without wrapping, pipecheck cannot know the "
                + "; ".join(UNKNOWN_WITHOUT_WRAPPING[:4]) + ".",
        evidence={"gaps": list(UNKNOWN_WITHOUT_WRAPPING)}))
    return findings


def _named(thresholds: dict[str, float]) -> dict[str, float]:
    return {"input_bound": thresholds["input_bound_stall_fraction"],
            "compute_bound": thresholds["compute_bound_stall_fraction"]}
