"""The producer's side of a run: per-worker rates and CPU, and the loader's capacity.

Capacity is batches/s the loader could deliver with no consumer limit:

* workers (``num_workers > 0``): ``min(N x mean per-worker rate, CPU cap)`` where a worker's
  rate is ``batches / busy_s`` (busy = fetch + collate wall time), ``N`` counts the workers that
  produced at least one batch, and the CPU cap (:func:`cpu_cap_batches_per_s`) is what the usable
  CPUs sustain once the main process's own per-batch CPU is paid (never below the steady rate
  the run actually sustained);
* main process (``num_workers = 0``): ``1 / mean(fetch + collate per batch)``, or the mean
  wait per batch when the main-process record holds no batches;
* generic iterables (probe ``none``): not measured (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, cast

from pipecheck.analysis import bound, memory
from pipecheck.analysis.contention import host_load
from pipecheck.analysis.consumer import steady_batches_per_s, wait_cpu_per_batch_s
from pipecheck.analysis.stats import mean, quantiles, ratio
from pipecheck.kinds import MAIN
from pipecheck.records import (
    ConsumerSummary,
    HostRecord,
    ProcessStats,
    ProducerSummary,
    RunRecord,
    WorkerRecord,
    WorkerSummary,
)

ASSUMED_MAIN_STEP_CORES = 1.0
"""Cores the training step keeps busy in the main process when that was not measured: a
Python training loop runs its step on one thread. An assumption, used only without CPU data."""

ASSUMED_PRODUCTION_CPU_FRACTION = 1.0
"""CPU seconds per wall second of batch production when that was not measured: assume
CPU-bound work, the case where adding workers helps least (so predictions stay conservative)."""


@dataclass(frozen=True)
class MainCpu:
    """Main-process CPU seconds per batch spent outside batch production (the step and the
    loader's bookkeeping), and how that figure was obtained. ``per_batch_s`` is ``None`` when
    it could not be measured."""

    per_batch_s: Optional[float]
    source: str


def summarize_producer(run: RunRecord, consumer: ConsumerSummary) -> ProducerSummary:
    """Summarize the workers (or the main process) of ``run``; never raises on missing data.

    ``consumer`` is the run's :class:`ConsumerSummary` (its demand and per-batch compute are
    needed for the main process's CPU share). Fields that could not be measured are ``None``.
    """
    if run.worker_probe == "none":
        return ProducerSummary(
            capacity_batches_per_s=None,
            batch_time_s=None,
            workers=[],
            probe="none",
            capacity_basis=f"not measured: {run.probes_off['workers']}"
            if "workers" in run.probes_off else "not measured: the loader is a generic "
            "iterable, so pipecheck sees only the consumer side",
        )
    host = usable_host(run.host)
    processes = host.processes if host is not None else []
    batch_times_s = [b.fetch_s + b.collate_s for w in run.workers for b in w.recent]
    main_cpu = measured_main_cpu(run, consumer)
    if run.worker_probe == "main-process":
        return _main_process_summary(run, consumer, batch_times_s, main_cpu)
    iowait = bound.iowait_fraction(host)
    disk_busy = bound.disk_busy_fraction(host)
    workers = [summarize_worker(w, processes, iowait, disk_busy) for w in run.workers]
    return _workers_summary(run, consumer, workers, batch_times_s, main_cpu)


def summarize_worker(
    record: WorkerRecord,
    processes: list[ProcessStats],
    iowait: Optional[float] = None,
    disk_busy: Optional[float] = None,
) -> WorkerSummary:
    """One worker id: rate while busy, CPU summed over every process that served the id (and
    the children they started), peak RSS/PSS/USS over its worker processes, what it waits on
    (:mod:`pipecheck.analysis.bound`, given the run's system ``iowait`` and busiest-disk
    ``disk_busy`` fractions) and its memory
    growth (:mod:`pipecheck.analysis.memory`)."""
    mine = [p for p in processes if p.worker_id == record.id and p.role != "main"]
    own = [p for p in mine if p.role == "worker"]
    cpu_s = sum(p.cpu_s for p in mine) if mine else None
    pss = [p.pss_max_bytes for p in own if p.pss_max_bytes is not None]
    uss = [p.uss_max_bytes for p in own if p.uss_max_bytes is not None]
    cpu_fraction, runqueue_fraction, storage = bound.worker_busy_figures(record, mine)
    growth = memory.worker_growth(own)
    return WorkerSummary(
        id=record.id,
        pid=record.pid,
        batches=record.batches,
        busy_s=record.busy_s,
        samples=record.samples,
        fetch_s=record.fetch_s,
        collate_s=record.collate_s,
        cpu_s=cpu_s,
        rate_batches_per_s=ratio(record.batches, record.busy_s) if record.batches else None,
        cpu_fraction=cpu_fraction,
        rss_max_bytes=max((p.rss_max_bytes for p in own), default=None),
        pss_max_bytes=max(pss, default=None),
        runqueue_fraction=runqueue_fraction,
        storage_read_bytes_per_s=storage,
        bound=bound.classify(cpu_fraction, runqueue_fraction, storage, iowait, disk_busy),
        uss_max_bytes=max(uss, default=None),
        memory_growth_bytes_per_s=None if growth is None else growth.slope_bytes_per_s,
    )


def usable_host(host: Optional[HostRecord]) -> Optional[HostRecord]:
    """``host`` when the sampler ran (status ``ok``), else ``None``."""
    return host if host is not None and host.status == "ok" else None


def production_cpu_fraction(run: RunRecord) -> Optional[float]:
    """Main-process CPU seconds per wall second while waiting in ``next()`` (sampled by the
    consumer probe). With ``num_workers=0`` that wait is batch production."""
    consumer = run.consumer
    return ratio(consumer.sampled_wait_cpu_s, consumer.sampled_wait_wall_s)


INTRA_OP_INFLATION_MIN = 1.2
"""Process CPU over the calling thread's CPU while producing (``num_workers=0``) from which
production is taken to have run on torch's intra-op pool too (pipecheck's choice: the other
threads of a training process, pipecheck's sampler included, add a few percent)."""


def intra_op_inflation(run: RunRecord) -> Optional[float]:
    """With ``num_workers=0`` and more than one torch intra-op thread: the main process's CPU
    over the calling thread's CPU while producing (sampled waits), when at least
    :data:`INTRA_OP_INFLATION_MIN`; else ``None``.

    Small tensor ops on the intra-op pool pay its fork, join and spin-waits on every thread
    (``benchmarks/intra_op_cost.py``: a 224x224 JPEG decode, crop, to-tensor and normalize
    took 2.6 ms of process CPU and 1.3 ms of the calling thread's on 2 threads on a quiet
    machine, against 1.3 ms on the one thread a DataLoader worker runs; 4.6 and 2.5 ms beside a
    busy process, and 21.7 and 11.0 ms against 1.5 ms beside several).
    The CPU measured here then overstates a worker's, by a factor that cannot be told from
    this run: the what-if model takes the calling thread's CPU and widens its interval
    (:func:`pipecheck.analysis.model.build_model`)."""
    if run.worker_probe != "main-process":
        return None
    threads = run.environment.intra_op_threads
    record = run.consumer
    if threads is None or threads <= 1 or not record.sampled_wait_thread_cpu_s:
        return None
    ratio_ = record.sampled_wait_cpu_s / record.sampled_wait_thread_cpu_s
    return ratio_ if ratio_ >= INTRA_OP_INFLATION_MIN else None


def measured_main_cpu(run: RunRecord, consumer: ConsumerSummary) -> MainCpu:
    """Main-process CPU per batch outside production, from the best source available:

    1. the consumer probe's sampled main-process CPU during compute x mean step time, plus
       (with workers) the CPU spent receiving each batch inside ``next()``;
    2. the host sampler's main-process CPU (less the sampler's own, and less production CPU
       when ``num_workers=0``) over the batches;
    3. otherwise not measured (``per_batch_s=None``).
    """
    record = run.consumer
    cpu_per_compute_s = ratio(record.sampled_compute_cpu_s, record.sampled_compute_wall_s)
    step_s = ratio(1.0, consumer.demand_batches_per_s)
    if cpu_per_compute_s is not None and step_s is not None:
        receive_s = wait_cpu_per_batch_s(record) if run.worker_probe == "workers" else None
        return MainCpu(
            cpu_per_compute_s * step_s + (receive_s or 0.0),
            "main-process CPU sampled during steps and batch hand-over",
        )
    host = usable_host(run.host)
    if host is None or host.main_cpu_s is None or record.batches == 0:
        return MainCpu(None, "main-process CPU not measured")
    main_cpu_s = max(host.main_cpu_s - host.overhead_cpu_s, 0.0)
    if run.worker_probe == "main-process":
        fraction = production_cpu_fraction(run)
        if fraction is None:
            fraction = ASSUMED_PRODUCTION_CPU_FRACTION
        # Per-batch production x all batches: the probe may have timed only some epochs.
        probed = sum(w.batches for w in run.workers)
        production_s = sum(w.busy_s for w in run.workers) / probed * record.batches if probed else 0.0
        main_cpu_s = max(main_cpu_s - production_s * fraction, 0.0)
    return MainCpu(main_cpu_s / record.batches, "host sampler's main-process CPU per batch")


def main_cpu_per_batch_s(
    measured_s: Optional[float], consumer: ConsumerSummary
) -> Optional[float]:
    """``measured_s`` (main-process CPU seconds per batch), or when it is ``None``
    :data:`ASSUMED_MAIN_STEP_CORES` x mean step time; ``None`` without a step time."""
    if measured_s is not None:
        return measured_s
    step_s = ratio(1.0, consumer.demand_batches_per_s)
    return None if step_s is None else ASSUMED_MAIN_STEP_CORES * step_s


def cpu_cap_batches_per_s(
    usable_cpus: float,
    worker_cpu_per_batch_s: float,
    main_cpu_per_batch_s: float,
    demand_batches_per_s: float,
) -> Optional[float]:
    """Batches/s the usable CPUs can produce, all CPU seconds per batch, ``None`` when the
    worker CPU per batch is not positive (no CPU limit can be derived).

    Workers and main process share ``usable_cpus``. Below the demand the main process spends
    ``main_cpu_per_batch_s`` on every batch delivered, so ``rate x (worker + main) <= cpus``;
    above it the step runs flat out and holds ``demand x main`` cores, leaving the rest to the
    workers: ``rate x worker <= cpus - demand x main``. The two agree at the demand.
    """
    if worker_cpu_per_batch_s <= 0:
        return None
    shared = usable_cpus / (worker_cpu_per_batch_s + main_cpu_per_batch_s)
    if shared <= demand_batches_per_s:
        return shared
    # Reached only when cpus > demand x (worker + main), so the spare CPUs are positive.
    spare_cpus = usable_cpus - demand_batches_per_s * main_cpu_per_batch_s
    return spare_cpus / worker_cpu_per_batch_s


def _workers_summary(
    run: RunRecord,
    consumer: ConsumerSummary,
    workers: list[WorkerSummary],
    batch_times_s: list[float],
    main_cpu: MainCpu,
) -> ProducerSummary:
    producing = [w for w in workers if w.rate_batches_per_s is not None]
    per_worker = mean(cast(float, w.rate_batches_per_s) for w in producing)
    with_cpu = [w for w in producing if w.cpu_s is not None]
    batches = sum(w.batches for w in with_cpu)
    cpu_per_batch = ratio(sum(w.cpu_s or 0.0 for w in with_cpu), batches) if with_cpu else None
    cpu_fraction = ratio(sum(w.cpu_s or 0.0 for w in with_cpu), sum(w.busy_s for w in with_cpu))
    workers_class, class_basis = bound.workers_class(
        workers, bound.iowait_fraction(run.host), bound.disk_busy_fraction(run.host))
    summary: dict[str, Any] = dict(
        batch_time_s=quantiles(batch_times_s),
        workers=workers,
        probe=run.worker_probe,
        per_worker_batches_per_s=per_worker,
        cpu_per_batch_s=cpu_per_batch,
        cpu_fraction=cpu_fraction,
        main_cpu_per_batch_s=main_cpu.per_batch_s,
        workers_class=workers_class,
        workers_class_basis=class_basis,
    )
    if per_worker is None:
        return ProducerSummary(
            capacity_batches_per_s=None,
            capacity_basis="not measured: the worker probe recorded no finished batch",
            **summary,
        )
    worker_limited = len(producing) * per_worker
    basis = (
        f"{len(producing)} workers x {per_worker:.2f} batches/s each (batches / busy time) = "
        f"{worker_limited:.2f} batches/s"
    )
    capacity = worker_limited
    cap = _workers_cpu_cap(run, consumer, producing, cpu_per_batch, main_cpu)
    if cap is not None:
        cap_value, cap_basis = cap
        capacity = min(worker_limited, cap_value)
        basis += f"; CPU cap {cap_value:.2f} batches/s ({cap_basis}); capacity is the lower"
    return ProducerSummary(
        capacity_batches_per_s=capacity,
        capacity_samples_per_s=_samples(capacity, run),
        capacity_basis=basis,
        **summary,
    )


def _workers_cpu_cap(
    run: RunRecord,
    consumer: ConsumerSummary,
    producing: list[WorkerSummary],
    cpu_per_batch: Optional[float],
    main_cpu: MainCpu,
) -> Optional[tuple[float, str]]:
    demand = consumer.demand_batches_per_s
    main_per_batch = main_cpu_per_batch_s(main_cpu.per_batch_s, consumer)
    if demand is None or main_per_batch is None:
        return None
    worker_cpu, worker_source = cpu_per_batch, "measured"
    if worker_cpu is None:
        busy_per_batch = ratio(sum(w.busy_s for w in producing), sum(w.batches for w in producing))
        assert busy_per_batch is not None  # producing workers have batches > 0 and busy_s > 0
        worker_cpu = busy_per_batch * ASSUMED_PRODUCTION_CPU_FRACTION
        worker_source = "not measured, assumed CPU-bound"
    cpus, cpus_words = _cores_for_the_run(run)
    cap = cpu_cap_batches_per_s(cpus, worker_cpu, main_per_batch, demand)
    if cap is None:
        return None
    main_source = main_cpu.source if main_cpu.per_batch_s is not None else (
        "not measured, assumed one core per step"
    )
    basis = (
        f"{cpus_words}, {worker_cpu * 1e3:.1f} ms worker CPU per "
        f"batch ({worker_source}) and {main_per_batch * 1e3:.1f} ms main-process CPU per batch "
        f"({main_source})"
    )
    sustained = steady_batches_per_s(run.consumer)
    if sustained is not None and sustained > cap:
        # The CPUs demonstrably sustained the observed rate, whatever the estimate says.
        return sustained, basis + f"; raised to the {sustained:.2f} batches/s the run sustained"
    return cap, basis


def _cores_for_the_run(run: RunRecord) -> tuple[float, str]:
    """Cores the run's step and workers had (the usable CPUs less what other processes used
    of them, :mod:`pipecheck.analysis.contention`; never below what the run used) and how to
    say it; the usable CPUs without host data."""
    usable = run.environment.usable_cpus
    if usable_host(run.host) is None:
        return float(usable), f"{usable} usable CPUs"
    load = host_load(run, None)
    cores = max(load.cores_left() - load.children_cpus - load.same_group_cpus, load.own_cpus,
                0.01)
    if cores >= usable - 0.05:
        return float(usable), f"{usable} usable CPUs"
    return cores, (f"{cores:.1f} of {usable} usable CPUs left to this run (other processes "
                   "used the rest)")


def _main_process_summary(
    run: RunRecord,
    consumer: ConsumerSummary,
    batch_times_s: list[float],
    main_cpu: MainCpu,
) -> ProducerSummary:
    record = next((w for w in run.workers if w.id == -1), run.workers[0] if run.workers else None)
    fraction = production_cpu_fraction(run)
    production_s = ratio(record.busy_s, record.batches) if record and record.batches else None
    basis_source = "fetch + collate per batch in the main process"
    if production_s is None:
        production_s = ratio(consumer.wait_s, consumer.batches)
        basis_source = "mean wait per batch (the main-process probe recorded no batch)"
    capacity = ratio(1.0, production_s)
    cpu_per_batch_s: Optional[float] = None
    if fraction is not None and production_s is not None:
        cpu_per_batch_s = fraction * production_s
    workers = []
    runqueue = _main_runqueue_fraction(run, fraction)
    main_class = bound.classify(fraction, runqueue, None, bound.iowait_fraction(run.host),
                                bound.disk_busy_fraction(run.host))
    if record is not None:
        cpu_s = None if fraction is None else fraction * record.busy_s
        workers.append(
            WorkerSummary(
                id=record.id, pid=record.pid, batches=record.batches, busy_s=record.busy_s,
                samples=record.samples, fetch_s=record.fetch_s, collate_s=record.collate_s,
                cpu_s=cpu_s, rate_batches_per_s=ratio(record.batches, record.busy_s),
                cpu_fraction=fraction, bound=main_class,
            )
        )
    basis = (
        "not measured: no batch was produced"
        if capacity is None or production_s is None
        else f"num_workers=0: the main process spends {production_s * 1e3:.1f} ms producing each "
        f"batch ({basis_source}), so it delivers at most {capacity:.2f} batches/s"
    )
    return ProducerSummary(
        capacity_batches_per_s=capacity,
        batch_time_s=quantiles(batch_times_s),
        workers=workers,
        probe=run.worker_probe,
        capacity_samples_per_s=_samples(capacity, run),
        capacity_basis=basis,
        per_worker_batches_per_s=capacity,
        cpu_per_batch_s=cpu_per_batch_s,
        cpu_fraction=fraction,
        main_cpu_per_batch_s=main_cpu.per_batch_s,
        workers_class=main_class,
        workers_class_basis=None if main_class is None or fraction is None else (
            f"num_workers=0: the main process used {fraction * 100:.1f}% CPU"
            + ("" if not runqueue else f" and waited for a core about {runqueue * 100:.1f}%")
            + " of the time it spent producing batches inside next() (cpu-bound at >= "
            f"{bound.CPU_BOUND_FRACTION * 100:.0f}% together)"),
    )


def _main_runqueue_fraction(run: RunRecord, cpu_fraction: Optional[float]) -> Optional[float]:
    """Run-queue seconds per second of production in the main process (``num_workers=0``),
    estimated: production's CPU per second (``cpu_fraction``) x the main process's run-queue
    wait per CPU second over the whole run (``/proc/<pid>/schedstat``, its main thread). On a
    saturated host a CPU-bound producer gets a core only part of the time it wants one, so its
    CPU alone would read as waiting on something else. ``None`` where not measured."""
    host = usable_host(run.host)
    if host is None or cpu_fraction is None:
        return None
    main = next((p for p in host.processes if p.role == MAIN), None)
    if main is None or main.runqueue_s is None or not main.cpu_s > 0:
        return None
    return cpu_fraction * main.runqueue_s / main.cpu_s


def _samples(batches_per_s: Optional[float], run: RunRecord) -> Optional[float]:
    samples_per_batch = ratio(run.consumer.samples, run.consumer.batches)
    if batches_per_s is None or samples_per_batch is None:
        return None
    return batches_per_s * samples_per_batch
