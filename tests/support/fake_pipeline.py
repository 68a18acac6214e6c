"""A deterministic, fake-clock DataLoader simulator for the analysis and recommendation tests.

:func:`simulate` plays an ideal in-order pipeline event by event: ``num_workers`` workers take
batch indices round-robin, at most ``prefetch_factor x num_workers`` are outstanding, a new index
is sent each time the consumer receives a batch, each worker produces its batches one after
another, and the consumer steps for ``step_s`` after every batch. With ``num_workers=0`` the main
process produces each batch inside ``next()``. It returns the :class:`RunRecord` the probes would
have written for such a run (exact counters, full timeline, worker rings, host process CPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from pipecheck.records import (
    BatchTiming,
    ConsumerRecord,
    Environment,
    EpochTiming,
    HostRecord,
    LoaderConfig,
    ProcessStats,
    RunRecord,
    WorkerBatch,
    WorkerRecord,
)

MAIN_PID = 999


@dataclass
class FakeRun:
    """What to simulate. Times in seconds; ``production_s`` is one batch's production wall time
    without CPU contention, a constant or a function of the global batch index."""

    num_workers: int = 2
    prefetch_factor: Optional[int] = 2
    persistent_workers: bool = False
    batches_per_epoch: int = 100
    epochs: int = 1
    step_s: float = 0.02
    production_s: Union[float, Callable[[int], float]] = 0.05
    worker_cpu_fraction: float = 1.0
    main_step_cpu_fraction: float = 1.0
    startup_s: float = 0.0
    shutdown_s: float = 0.0  # the final next() of an epoch without persistent workers
    receive_s: float = 0.0  # main-thread CPU to take a ready batch from a worker
    usable_cpus: int = 2
    batch_size: int = 8
    cuda: bool = False
    pin_memory: bool = False
    contention: bool = True
    worker_slowdown: dict[int, float] = field(default_factory=dict)
    status: str = "complete"
    with_host: bool = True
    worker_rss_bytes: int = 200 * 2**20

    def production_of(self, index: int) -> float:
        if callable(self.production_s):
            return self.production_s(index)
        return self.production_s

    def stretch(self) -> float:
        """CPU-bound workers beyond the usable CPUs share them: production slows in proportion."""
        if not self.contention or self.num_workers == 0:
            return 1.0
        return max(1.0, self.num_workers * self.worker_cpu_fraction / self.usable_cpus)


@dataclass
class _WorkerLog:
    batches: list[WorkerBatch] = field(default_factory=list)
    cpu_s_by_pid: dict[int, float] = field(default_factory=dict)


def simulate(spec: FakeRun) -> RunRecord:
    """Run ``spec`` on a fake clock and return the RunRecord the probes would produce."""
    clock_s = 0.0
    timeline: list[BatchTiming] = []
    epochs: list[EpochTiming] = []
    logs: dict[int, _WorkerLog] = {}
    worker_free_at = [0.0] * spec.num_workers
    for epoch in range(spec.epochs):
        cold = epoch == 0 or not spec.persistent_workers
        start_at = clock_s
        if spec.num_workers == 0:
            waits, clock_s = _serial_epoch(spec, epoch, clock_s, logs)
        else:
            ready_at = clock_s + (spec.startup_s if cold else 0.0)
            worker_free_at = [max(ready_at, f) for f in worker_free_at]
            waits, clock_s = _parallel_epoch(spec, epoch, clock_s, worker_free_at, logs)
        for i, (call_at, wait_s) in enumerate(waits):
            timeline.append(BatchTiming(
                index=len(timeline), epoch=epoch, start_at_s=call_at, wait_s=wait_s,
                compute_s=spec.step_s, samples=spec.batch_size))
        last_wait_s = 0.0
        if spec.num_workers > 0 and not spec.persistent_workers:
            last_wait_s = spec.shutdown_s
            clock_s += last_wait_s
        epoch_wait_s = sum(w for _, w in waits) + last_wait_s
        epochs.append(EpochTiming(
            epoch=epoch, started_at_s=start_at, batches=len(waits),
            samples=len(waits) * spec.batch_size, wait_s=epoch_wait_s,
            compute_s=len(waits) * spec.step_s, wall_s=clock_s - start_at,
            first_batch_s=waits[0][1] if waits else None, ended="exhausted",
            last_wait_s=last_wait_s))
    return _run_record(spec, timeline, epochs, logs, clock_s)


def _pid(spec: FakeRun, worker_id: int, epoch: int) -> int:
    if worker_id < 0:
        return MAIN_PID
    generation = 0 if spec.persistent_workers else epoch
    return 1000 + 10 * generation + worker_id


def _serial_epoch(spec, epoch, clock_s, logs):
    log = logs.setdefault(-1, _WorkerLog())
    waits = []
    for i in range(spec.batches_per_epoch):
        production_s = spec.production_of(epoch * spec.batches_per_epoch + i)
        call_at = clock_s
        clock_s += production_s
        log.batches.append(WorkerBatch(worker_id=-1, end_at_s=clock_s, fetch_s=0.9 * production_s,
                                       collate_s=0.1 * production_s, samples=spec.batch_size))
        waits.append((call_at, production_s))
        clock_s += spec.step_s
    return waits, clock_s


def _parallel_epoch(spec, epoch, clock_s, worker_free_at, logs):
    workers = spec.num_workers
    window = (spec.prefetch_factor or 2) * workers
    count = spec.batches_per_epoch
    ready_at: dict[int, float] = {}

    def dispatch(i: int, sent_at: float) -> None:
        worker = i % workers
        solo_s = spec.production_of(epoch * count + i) * spec.worker_slowdown.get(worker, 1.0)
        wall_s = solo_s * spec.stretch()
        begin = max(sent_at, worker_free_at[worker])
        worker_free_at[worker] = ready_at[i] = begin + wall_s
        log = logs.setdefault(worker, _WorkerLog())
        log.batches.append(WorkerBatch(worker_id=worker, end_at_s=ready_at[i],
                                       fetch_s=0.9 * wall_s, collate_s=0.1 * wall_s,
                                       samples=spec.batch_size))
        pid = _pid(spec, worker, epoch)
        log.cpu_s_by_pid[pid] = log.cpu_s_by_pid.get(pid, 0.0) + spec.worker_cpu_fraction * solo_s

    for i in range(min(window, count)):
        dispatch(i, clock_s)
    waits = []
    for i in range(count):
        call_at = clock_s
        received_at = max(call_at, ready_at[i]) + spec.receive_s
        if i + window < count:
            dispatch(i + window, received_at)
        waits.append((call_at, received_at - call_at))
        clock_s = received_at + spec.step_s
    return waits, clock_s


def _run_record(spec, timeline, epochs, logs, duration_s) -> RunRecord:
    batches = len(timeline)
    wait_s = sum(b.wait_s for b in timeline)
    compute_s = batches * spec.step_s
    workers = []
    for worker_id, log in sorted(logs.items()):
        busy_s = sum(b.fetch_s + b.collate_s for b in log.batches)
        pids = sorted(log.cpu_s_by_pid) or [MAIN_PID]
        workers.append(WorkerRecord(
            id=worker_id, pid=pids[-1], pids=pids, batches=len(log.batches),
            samples=sum(b.samples for b in log.batches),
            fetch_s=sum(b.fetch_s for b in log.batches),
            collate_s=sum(b.collate_s for b in log.batches), busy_s=busy_s,
            first_at_s=log.batches[0].end_at_s if log.batches else None,
            last_at_s=log.batches[-1].end_at_s if log.batches else None,
            recent=list(log.batches)))
    serial = spec.num_workers == 0
    # Blocked waits burn no CPU: inside next() the main thread only spends CPU producing
    # (num_workers=0) or receiving a batch.
    production_cpu_s = spec.worker_cpu_fraction * wait_s if serial else 0.0
    wait_cpu_s = production_cpu_s if serial else batches * spec.receive_s
    consumer = ConsumerRecord(
        batches=batches, samples=batches * spec.batch_size, tokens=None, wait_s=wait_s,
        compute_s=compute_s, wall_s=duration_s, epochs=epochs, timeline=timeline,
        timeline_stride=1, status=spec.status,
        error="ValueError: bad sample 17" if spec.status == "error" else None,
        sampled_wait_wall_s=wait_s, sampled_wait_cpu_s=wait_cpu_s,
        sampled_compute_wall_s=compute_s,
        sampled_compute_cpu_s=spec.main_step_cpu_fraction * compute_s)
    return RunRecord(
        kind="wrap", created="2024-05-01T12:00:00+00:00",
        environment=Environment(cpu_count=spec.usable_cpus, usable_cpus=spec.usable_cpus,
                                python="3.11.7", torch="2.13.0", platform="Linux-x86_64",
                                cuda=spec.cuda),
        loader=LoaderConfig(
            type="DataLoader", num_workers=spec.num_workers,
            prefetch_factor=None if serial else (spec.prefetch_factor or 2),
            batch_size=spec.batch_size, pin_memory=spec.pin_memory,
            persistent_workers=spec.persistent_workers, in_order=True, drop_last=False,
            dataset_type="map", dataset_len=spec.batches_per_epoch * spec.batch_size,
            batches_per_epoch=spec.batches_per_epoch),
        consumer=consumer, workers=workers,
        worker_probe="main-process" if serial else "workers",
        host=_host_record(spec, logs, duration_s, compute_s, wait_cpu_s) if spec.with_host
        else None)


def _host_record(spec, logs, duration_s, compute_s, wait_cpu_s) -> HostRecord:
    main_cpu_s = spec.main_step_cpu_fraction * compute_s + wait_cpu_s
    processes = [ProcessStats(pid=MAIN_PID, role="main", cpu_s=main_cpu_s,
                              cpu_percent_mean=100 * main_cpu_s / duration_s,
                              rss_max_bytes=800 * 2**20, pss_max_bytes=None, read_bytes=None,
                              read_chars=None, first_seen_at_s=0.0, last_seen_at_s=duration_s)]
    for worker_id, log in sorted(logs.items()):
        for pid, cpu_s in sorted(log.cpu_s_by_pid.items()):
            processes.append(ProcessStats(
                pid=pid, role="worker", cpu_s=cpu_s, cpu_percent_mean=100 * cpu_s / duration_s,
                rss_max_bytes=spec.worker_rss_bytes, pss_max_bytes=None, read_bytes=None,
                read_chars=None, first_seen_at_s=0.0, last_seen_at_s=duration_s,
                worker_id=worker_id))
    workers_cpu_s = sum(p.cpu_s for p in processes if p.role == "worker")
    return HostRecord(
        status="ok", interval_s=0.1, samples_taken=max(int(duration_s / 0.1), 1),
        duration_s=duration_s,
        system_cpu_percent_mean=100 * (main_cpu_s + workers_cpu_s) / duration_s / spec.usable_cpus,
        iowait_fraction_mean=0.0, read_bytes_per_s=None, read_chars_per_s=None,
        main_cpu_s=main_cpu_s, workers_cpu_s=workers_cpu_s, overhead_cpu_s=0.0,
        processes=processes)
