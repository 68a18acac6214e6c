"""What a worker waits on while it is busy producing batches: a core, storage, or something else.

How it works, and why: docs/internals.md (``pipecheck/analysis/bound.py``).
"""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.stats import ratio
from pipecheck.kinds import CPU_BOUND, IO_BOUND, LATENCY_BOUND, WORKER_BOUNDS, WorkerBound
from pipecheck.records import CpuSample, HostRecord, ProcessStats, WorkerRecord, WorkerSummary

CLASSES = WORKER_BOUNDS
"""The classes, in the order of the module docstring (:data:`pipecheck.kinds.WORKER_BOUNDS`)."""

CPU_BOUND_FRACTION = 0.5
"""(CPU + run-queue seconds) per busy second at or above which a worker is CPU-bound."""

IO_BOUND_STORAGE_BYTES_PER_S = 8 * 1024 * 1024
"""Storage reads per busy second at or above which a waiting worker is IO-bound (8 MiB/s)."""

IO_MIN_STORAGE_BYTES_PER_S = 1024 * 1024
"""Storage reads per busy second (1 MiB/s) that, with system iowait or a busy disk, make a worker
IO-bound."""

IO_BOUND_IOWAIT_FRACTION = 0.05
"""System iowait share (0-1) from which a worker reading storage is IO-bound (iowait is
system-wide, so alone it does not implicate the workers)."""

IO_BOUND_DISK_BUSY_FRACTION = 0.5
"""Busiest disk's busy share (0-1, iostat's %util / 100) from which a worker reading storage is
IO-bound (also system-wide)."""


def classify(
    cpu_fraction: Optional[float],
    runqueue_fraction: Optional[float],
    storage_read_bytes_per_s: Optional[float],
    iowait_fraction: Optional[float],
    disk_busy_fraction: Optional[float] = None,
) -> Optional[WorkerBound]:
    """The class of one producer from its per-busy-second figures (fractions 0-1, bytes/s) and
    the system's iowait and busiest-disk shares (0-1); ``None`` when its CPU was not measured.
    Missing run-queue, storage, iowait or disk figures count as 0."""
    if cpu_fraction is None:
        return None
    if cpu_fraction + (runqueue_fraction or 0.0) >= CPU_BOUND_FRACTION:
        return CPU_BOUND
    if (storage_read_bytes_per_s or 0.0) >= IO_BOUND_STORAGE_BYTES_PER_S:
        return IO_BOUND
    system_waits = ((iowait_fraction or 0.0) >= IO_BOUND_IOWAIT_FRACTION
                    or (disk_busy_fraction or 0.0) >= IO_BOUND_DISK_BUSY_FRACTION)
    if system_waits and (storage_read_bytes_per_s or 0.0) >= IO_MIN_STORAGE_BYTES_PER_S:
        return IO_BOUND
    return LATENCY_BOUND


def worker_busy_figures(
    record: WorkerRecord, processes: list[ProcessStats]
) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """``(cpu_fraction, runqueue_fraction, storage_read_bytes_per_s)`` per busy second of one
    worker id; ``None`` where unmeasured.

    Only the time a worker process spends producing counts: from the end of its first batch to
    the end of its last (start-up, e.g. a spawned worker importing torch, about 2 s of CPU
    here, and shutdown, about 0.4 s, are not busy time), with the busy time of the batches that
    ended in that window, the cumulative counters interpolated between the sampler's ticks.
    CPU, run-queue wait and storage reads of the processes the worker started (``role``
    ``child`` with its ``worker_id``: a decoder it runs as a subprocess) count for the worker
    over the same windows, as far as the sampler saw them alive (at least two ticks; one that
    lives a fraction of a tick goes unseen). That needs the worker's ring of recent batches to
    hold all its batches and each worker process's per-tick series; otherwise the whole run's
    totals over all processes that served the id (and their children) are used."""
    if not processes:
        return None, None, None
    windowed = _windowed_figures(record, [p for p in processes if p.role == "worker"],
                                 [p for p in processes if p.role == "child" and len(p.cpu) >= 2])
    if windowed is not None:
        return windowed
    runqueue = [p.runqueue_s for p in processes if p.runqueue_s is not None]
    reads = [p.read_bytes for p in processes if p.read_bytes is not None]
    return (
        ratio(sum(p.cpu_s for p in processes), record.busy_s),
        ratio(sum(runqueue), record.busy_s) if runqueue else None,
        ratio(sum(reads), record.busy_s) if reads else None,
    )


def _windowed_figures(
    record: WorkerRecord, own: list[ProcessStats], children: list[ProcessStats]
) -> Optional[tuple[Optional[float], Optional[float], Optional[float]]]:
    if not own or len(record.recent) < record.batches or any(len(p.cpu) < 2 for p in own):
        return None
    cpu_s = busy_s = 0.0
    runqueue_s: Optional[float] = 0.0
    read_bytes: Optional[float] = 0.0
    windows = []
    for process in own:
        batches = [b for b in record.recent
                   if process.first_seen_at_s <= b.end_at_s <= process.last_seen_at_s]
        if len(batches) < 2:
            continue
        window = (batches[0].end_at_s, batches[-1].end_at_s)
        windows.append(window)
        start, end = _value_at(process.cpu, window[0]), _value_at(process.cpu, window[1])
        cpu_s += end.cpu_s - start.cpu_s
        busy_s += sum(b.fetch_s + b.collate_s for b in batches[1:])
        runqueue_s = _add(runqueue_s, start.runqueue_s, end.runqueue_s)
        read_bytes = _add(read_bytes, start.read_bytes, end.read_bytes)
    if busy_s <= 0:
        return None
    for child in children:
        for window in windows:  # counters clamp at the child's first and last tick
            start, end = _value_at(child.cpu, window[0]), _value_at(child.cpu, window[1])
            cpu_s += end.cpu_s - start.cpu_s
            # A child's own unknown counters leave the worker's figure as it was.
            if start.runqueue_s is not None and end.runqueue_s is not None:
                runqueue_s = _add(runqueue_s, start.runqueue_s, end.runqueue_s)
            if start.read_bytes is not None and end.read_bytes is not None:
                read_bytes = _add(read_bytes, start.read_bytes, end.read_bytes)
    return (
        max(cpu_s, 0.0) / busy_s,
        None if runqueue_s is None else max(runqueue_s, 0.0) / busy_s,
        None if read_bytes is None else max(read_bytes, 0.0) / busy_s,
    )


def _add(total: Optional[float], start: Optional[float], end: Optional[float]) -> Optional[float]:
    if total is None or start is None or end is None:
        return None
    return total + end - start


def _value_at(series: list[CpuSample], at_s: float) -> CpuSample:
    """The cumulative counters at ``at_s``, interpolated linearly between ticks (the first
    sample before the series starts, the last after it ends)."""
    if at_s <= series[0].at_s:
        return series[0]
    for before, after in zip(series, series[1:]):
        if before.at_s <= at_s <= after.at_s:
            span = after.at_s - before.at_s
            share = (at_s - before.at_s) / span if span > 0 else 1.0
            return CpuSample(
                at_s=at_s,
                cpu_s=before.cpu_s + share * (after.cpu_s - before.cpu_s),
                runqueue_s=_between(before.runqueue_s, after.runqueue_s, share),
                # a fractional byte count between two ticks, only ever subtracted (_add)
                read_bytes=_between(  # type: ignore[arg-type]
                    before.read_bytes, after.read_bytes, share),
            )
    return series[-1]


def _between(before: Optional[float], after: Optional[float], share: float) -> Optional[float]:
    if before is None or after is None:
        return None
    return before + share * (after - before)


def iowait_fraction(host: Optional[HostRecord]) -> Optional[float]:
    """The run's mean system iowait (0-1) when the host sampler measured it."""
    if host is None or host.status != "ok":
        return None
    return host.iowait_fraction_mean


def disk_busy_fraction(host: Optional[HostRecord]) -> Optional[float]:
    """The busiest disk's busy share of the run (0-1) when the host sampler measured it."""
    if host is None or host.status != "ok":
        return None
    return host.disk_busy_fraction_mean


def workers_class(
    workers: list[WorkerSummary], iowait: Optional[float], disk_busy: Optional[float] = None
) -> tuple[Optional[WorkerBound], Optional[str]]:
    """The class holding most of the classified workers' busy time, and the numbers behind it
    in words; ``(None, None)`` when no worker was classified."""
    classified = [w for w in workers if w.bound is not None and w.busy_s > 0]
    if not classified:
        return None, None
    busy_by_class = {name: 0.0 for name in CLASSES}
    for worker in classified:
        assert worker.bound is not None  # classified keeps only workers with a bound
        busy_by_class[worker.bound] += worker.busy_s
    chosen = max(CLASSES, key=lambda name: busy_by_class[name])
    busy_s = sum(w.busy_s for w in classified)
    cpu_s = sum((w.cpu_fraction or 0.0) * w.busy_s for w in classified)
    runqueue_s = sum((w.runqueue_fraction or 0.0) * w.busy_s for w in classified)
    storage_b = sum((w.storage_read_bytes_per_s or 0.0) * w.busy_s for w in classified)
    share = busy_by_class[chosen] / busy_s
    parts = [
        f"{share * 100:.0f}% of {busy_s:.2f} s busy time in {chosen} workers",
        f"per busy second: CPU {cpu_s / busy_s * 100:.1f}%",
    ]
    if any(w.runqueue_fraction is not None for w in classified):
        parts.append(f"waiting for a core {runqueue_s / busy_s * 100:.1f}%")
    if any(w.storage_read_bytes_per_s is not None for w in classified):
        parts.append(f"storage reads {storage_b / busy_s / 1e6:.2f} MB/s")
    if iowait is not None:
        parts.append(f"system iowait {iowait * 100:.1f}%")
    if disk_busy is not None:
        parts.append(f"busiest disk busy {disk_busy * 100:.1f}%")
    thresholds = (
        f"cpu-bound at CPU + run queue >= {CPU_BOUND_FRACTION * 100:.0f}%, io-bound at storage "
        f">= {IO_BOUND_STORAGE_BYTES_PER_S / 2**20:.0f} MiB/s, or "
        f">= {IO_MIN_STORAGE_BYTES_PER_S / 2**20:.0f} MiB/s with iowait >= "
        f"{IO_BOUND_IOWAIT_FRACTION * 100:.0f}% or a disk >= "
        f"{IO_BOUND_DISK_BUSY_FRACTION * 100:.0f}% busy"
    )
    return chosen, f"{'; '.join(parts)} ({thresholds})"
