"""Findings that say why the loader is slow or at risk: what workers wait on, worker memory growth,
``/dev/shm`` headroom, hot stacks (or why they could not be sampled) and GPU idle.

Each function takes the run and its producer summary and returns findings (kinds:
``contended-host``, ``cpu-bound-workers``, ``io-bound-workers``, ``latency-bound-workers``,
``memory-growth``, ``shm-headroom``, ``hot-function``, ``stacks-unavailable``, ``gpu-idle``,
``probe-off``), each with the numbers behind it in ``evidence``. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Optional

from pipecheck.analysis import bound, memory
from pipecheck.analysis.contention import (
    measured_on_usable_cpus,
    other_processes_cpus,
    same_group_fraction,
)
from pipecheck.analysis.consumer import steady_step_s, stress_command
from pipecheck.analysis.model import POOL_STARVED_SHARE, starved_step_on_cpu, step_pool_inflation
from pipecheck.analysis.producer import INTRA_OP_INFLATION_MIN, intra_op_inflation, usable_host
from pipecheck.kinds import (BALANCED, FINDINGS_PAGE, INPUT_BOUND, WORKERS_FINDING, FindingKind,
                             Verdict)
from pipecheck.records import Finding, ProducerSummary, RunRecord
from pipecheck.units import percent, seconds, size

GPU_IDLE_WARNING_FRACTION = 0.10
"""GPU idle (data) share from which the ``gpu-idle`` finding is a warning, the same 10% the
input-bound verdict uses for the loop's stall."""

EXHAUST_CRITICAL_S = 3600.0
"""Seconds until growing workers use up the memory still available, below which the
``memory-growth`` finding is critical rather than a warning: a leak that ends the run within the
hour (pipecheck's choice; training runs last hours)."""

COPY_ON_READ_ISSUE = "pytorch/pytorch#13246"

_CLASS_ADVICE = {
    bound.CPU_BOUND: "more workers than free cores will not help; cheaper transforms, offline "
    "preprocessing or GPU decode will",
    bound.IO_BOUND: "more workers help until the storage bandwidth is reached; faster or local "
    "storage, larger sequential reads (shards) or caching will",
    bound.LATENCY_BOUND: "it mostly waits while cores idle, so more workers (or threads inside "
    "a worker) will help",
}


CONTENDED_CPU_FRACTION = 0.25
"""Share of the machine's CPUs (0-1) that other processes used, on average over the run, from
which the ``contended-host`` finding is raised. pipecheck's choice
(docs/decisions.md#contended_cpu_fraction)."""


def cause_findings(run: RunRecord, producer: ProducerSummary, verdict: Verdict) -> list[Finding]:
    """All findings of this module that apply to ``run``, in a fixed order."""
    candidates = [
        contended_host_finding(run),
        intra_op_finding(run, producer),
        worker_class_finding(producer, verdict),
        *memory_growth_findings(run, producer),
        shm_headroom_finding(run),
        stacks_finding(run),
        gpu_idle_finding(run),
        *probe_off_findings(run),
    ]
    return [f for f in candidates if f is not None]


def contended_host_finding(run: RunRecord) -> Optional[Finding]:
    """``contended-host`` (warning) when other processes used at least
    :data:`CONTENDED_CPU_FRACTION` of the CPUs during the run: every rate measured here, and
    every prediction made from them, holds only under that contention, so the finding says how
    much there was, how long this run's processes waited for a core, and how to measure the
    candidate settings directly."""
    others = other_processes_cpus(run)
    on_usable = measured_on_usable_cpus(run)
    cpus = run.environment.usable_cpus if on_usable else run.environment.cpu_count
    if others is None or others < CONTENDED_CPU_FRACTION * cpus:
        return None
    host = usable_host(run.host)
    # other_processes_cpus() measured both
    assert host is not None and host.system_cpu_percent_mean is not None
    busy = (host.usable_cpu_percent_mean if host.usable_cpu_percent_mean is not None
            else host.system_cpu_percent_mean)
    scope = (f"the {cpus} CPUs this process may use" if on_usable else f"{cpus} CPUs")
    machine = "its CPUs were" if on_usable else "the machine was"
    ours = ((host.main_cpu_s or 0.0) + (host.workers_cpu_s or 0.0)) / host.duration_s
    running_s = sum(p.cpu_s for p in host.processes)
    waiting_s = sum(p.runqueue_s for p in host.processes if p.runqueue_s is not None)
    queued = waiting_s / (running_s + waiting_s) if running_s + waiting_s > 0 else None
    waited = (f"; this run's processes waited for a core {percent(queued)} of the time they "
              "wanted one" if queued is not None else "")
    in_group = same_group_fraction(run)
    group = (f"; {in_group * others:.1f} of those CPUs went to processes in this run's CPU "
             "scheduling group (same session or cgroup), which share cores with its workers "
             "thread for thread" if in_group * others >= 0.05 else "")
    return Finding(
        kind=FindingKind.CONTENDED_HOST,
        severity="warning",
        message=f"Contended host: other processes used {others:.1f} of {scope} on average "
        f"during the run ({machine} {percent(busy / 100)} busy, "
        f"this run {ours:.1f} CPUs){waited}{group}. Rates and predictions here hold only under the "
        "same contention; measure the candidate settings on this host with "
        f"{stress_command(run.consumer, '0,1,2,4')} (a function that builds your "
        "DataLoader; the step emulated as measured).",
        evidence={"other_processes_cpus": others, "cpu_count": cpus, "run_cpus": ours,
                  "system_cpu_fraction": host.system_cpu_percent_mean / 100,
                  "measured_on_usable_cpus": on_usable,
                  "runqueue_fraction": queued,
                  "same_group_cpus": in_group * others,
                  "contended_cpu_fraction": CONTENDED_CPU_FRACTION},
    )


def intra_op_finding(run: RunRecord, producer: ProducerSummary) -> Optional[Finding]:
    """``intra-op-threads`` (info) when, with ``num_workers=0``, production's CPU was inflated
    by torch's intra-op pool (:func:`pipecheck.analysis.producer.intra_op_inflation`) or the
    step's pool waited for cores (:func:`pipecheck.analysis.model.starved_step_on_cpu`): the
    costs measured here overstate what they are beside workers, so predictions for workers
    are uncertain and the finding says how to measure them."""
    inflation = intra_op_inflation(run)
    cpu_s = producer.cpu_per_batch_s
    if inflation is None or cpu_s is None:
        inflation = cpu_s = None
    on_cpu = starved_step_on_cpu(run)
    step_s = steady_step_s(run.consumer)
    if on_cpu is None or step_s is None:
        on_cpu = step_s = None
    if inflation is None and on_cpu is None:
        return None
    threads = run.environment.intra_op_threads
    evidence: dict[str, Any] = {"intra_op_threads": threads,
                                "inflation_min": INTRA_OP_INFLATION_MIN}
    words = []
    if inflation is not None and cpu_s is not None:
        words.append(
            f"With num_workers=0 batch production ran on torch's {threads} intra-op "
            f"threads: {seconds(cpu_s)} of CPU per batch, {seconds(cpu_s / inflation)} of it on "
            "the calling thread. A DataLoader worker runs one intra-op thread and pays far "
            "less of the pool's overhead; the predictions for workers take the calling "
            f"thread's CPU (why, with measured figures: {FINDINGS_PAGE}#intra-op-threads).")
        evidence.update(cpu_per_batch_s=cpu_s, thread_cpu_per_batch_s=cpu_s / inflation,
                        inflation=inflation)
    if on_cpu is not None and step_s is not None:
        words.append(
            f"The step ran on torch's {threads} intra-op threads with its calling thread on a "
            f"core {percent(on_cpu)} of the time ({seconds(step_s)} a step, "
            f"{seconds(step_s * on_cpu)} of that thread's CPU): it waited for cores while its "
            "teammates held them; the predictions for workers take the step at that thread's "
            "CPU time.")
        evidence.update(step_s=step_s, step_on_cpu_fraction=on_cpu,
                        step_pool_inflation=step_pool_inflation(run.consumer),
                        starved_on_cpu_max=POOL_STARVED_SHARE)
    words.append(
        "Where the step gains nothing from the threads, torch.set_num_threads(1) in the "
        "training process gives those cores back; "
        f"{stress_command(run.consumer, '0,1,2')} (a function that builds your DataLoader; "
        "the step emulated as measured) measures the workers.")
    return Finding(kind=FindingKind.INTRA_OP_THREADS, severity="info", message=" ".join(words),
                   evidence=evidence)


def probe_off_findings(run: RunRecord) -> list[Finding]:
    """One ``probe-off`` finding per probe that turned itself off during the run, with its
    reason (for example ``/dev/shm`` too full to reserve the worker timing file)."""
    return [Finding(kind=FindingKind.PROBE_OFF, severity="warning", message=reason,
                    evidence={"probe": probe})
            for probe, reason in sorted(run.probes_off.items())]


def worker_class_finding(producer: ProducerSummary, verdict: Verdict) -> Optional[Finding]:
    """What the producer waits on, when the loop is input-bound or balanced (when it is
    compute-bound the producer's cause does not hold training back)."""
    name = producer.workers_class
    if name is None or verdict not in (INPUT_BOUND, BALANCED):
        return None
    return Finding(
        kind=WORKERS_FINDING[name],
        severity="info",
        message=f"The producer is {name} ({producer.workers_class_basis}): "
        f"{_CLASS_ADVICE[name]}.",
        evidence={
            "class": name,
            "cpu_fraction": producer.cpu_fraction,
            "workers": [
                {"id": w.id, "bound": w.bound, "cpu_fraction": w.cpu_fraction,
                 "runqueue_fraction": w.runqueue_fraction,
                 "storage_read_bytes_per_s": w.storage_read_bytes_per_s}
                for w in producer.workers
            ],
            "cpu_bound_fraction": bound.CPU_BOUND_FRACTION,
            "io_bound_storage_bytes_per_s": bound.IO_BOUND_STORAGE_BYTES_PER_S,
            "io_bound_iowait_fraction": bound.IO_BOUND_IOWAIT_FRACTION,
        },
    )


def memory_growth_findings(run: RunRecord, producer: ProducerSummary) -> list[Finding]:
    """One ``memory-growth`` finding for the workers whose USS grows significantly (see
    :mod:`pipecheck.analysis.memory`): bytes per second and per batch, time until the memory
    available at the end is used up (``critical`` below :data:`EXHAUST_CRITICAL_S`, else a
    warning), and the dataset's largest Python containers when known."""
    host = usable_host(run.host)
    if host is None:
        return []
    growing = []
    for record in run.workers:
        own = [p for p in host.processes if p.worker_id == record.id and p.role == "worker"]
        growth = memory.worker_growth(own)
        if growth is None or not growth.significant:
            continue
        span_s = (record.last_at_s or 0.0) - (record.first_at_s or 0.0)
        # first/last_at_s are the first and last batch's end: batches - 1 intervals between them
        rate = (record.batches - 1) / span_s if span_s > 0 and record.batches > 1 else None
        per_batch = growth.slope_bytes_per_s / rate if rate else None
        growing.append((record.id, growth, per_batch))
    if not growing:
        return []
    total_per_s = sum(g.slope_bytes_per_s for _, g, _ in growing)
    available = _last_available_bytes(run)
    exhaust_s = available / total_per_s if available is not None and total_per_s > 0 else None
    per_batch_known = [b for _, _, b in growing if b is not None]
    mean_per_batch = sum(per_batch_known) / len(per_batch_known) if per_batch_known else None
    worker_words = ", ".join(
        f"worker {wid} {size(g.slope_bytes_per_s)}/s (95% interval {size(g.low_bytes_per_s)}/s"
        f"-{size(g.high_bytes_per_s)}/s over {seconds(g.span_s)})"
        for wid, g, _ in growing
    )
    message = f"Worker memory grows: {worker_words}"
    if mean_per_batch is not None:
        message += f", about {size(mean_per_batch)} per batch"
    if exhaust_s is not None:
        message += f"; at {size(total_per_s)}/s the {size(available)} still available lasts " \
                   f"{seconds(exhaust_s)}"
    message += "."
    containers = run.dataset_containers[:3]
    if containers:
        named = "; ".join(
            f"{c.name} ({c.type} of {c.items:,} items, about {size(c.approx_bytes)})"
            for c in containers
        )
        message += (
            f" If the dataset holds Python objects, workers copy them page by page as reference "
            f"counts are touched (copy-on-read, {COPY_ON_READ_ISSUE}); its largest containers: "
            f"{named}. Store them as numpy arrays or Arrow buffers instead of lists/dicts of "
            "Python objects."
        )
    else:
        message += (
            " Common causes: a cache or list filled per sample, or Python objects shared with "
            f"workers copied as their reference counts change (copy-on-read, {COPY_ON_READ_ISSUE})."
        )
    return [
        Finding(
            kind=FindingKind.MEMORY_GROWTH,
            severity="warning" if exhaust_s is None or exhaust_s > EXHAUST_CRITICAL_S
            else "critical",
            message=message,
            evidence={
                "workers": [
                    {"id": wid, "pid": g.pid, "uss_bytes_per_s": g.slope_bytes_per_s,
                     "uss_bytes_per_s_low": g.low_bytes_per_s,
                     "uss_bytes_per_s_high": g.high_bytes_per_s, "bytes_per_batch": b,
                     "readings": g.readings, "span_s": g.span_s, "start_uss_bytes": g.start_bytes}
                    for wid, g, b in growing
                ],
                "bytes_per_s": total_per_s,
                "bytes_per_batch": mean_per_batch,
                "available_memory_bytes": available,
                "time_to_exhaust_s": exhaust_s,
                "containers": [c.name for c in containers],
                "min_growth_bytes": memory.MIN_GROWTH_BYTES,
                "confidence_z": memory.CONFIDENCE_Z,
            },
        )
    ]


def _last_available_bytes(run: RunRecord) -> Optional[int]:
    host = usable_host(run.host)
    if host is None or not host.timeline:
        return None
    return host.timeline[-1].available_memory_bytes


def shm_headroom_finding(run: RunRecord) -> Optional[Finding]:
    """``/dev/shm`` too small for :data:`memory.SHM_HEADROOM_FACTOR` x the prefetch queue
    (``prefetch_factor x num_workers x batch bytes``): workers then die with a bus error."""
    shm = run.shared_memory
    loader = run.loader
    needed = memory.shm_needed_bytes(run.consumer.batch_bytes, loader.num_workers,
                                     loader.prefetch_factor)
    if shm is None or needed is None:
        return None
    wanted = memory.SHM_HEADROOM_FACTOR * needed
    if shm.free_bytes >= wanted:
        return None
    return Finding(
        kind=FindingKind.SHM_HEADROOM,
        severity="critical" if shm.free_bytes < needed else "warning",
        message=f"{shm.path} has {size(shm.free_bytes)} free of {size(shm.total_bytes)}, but the "
        f"prefetch queue holds prefetch_factor {loader.prefetch_factor} x {loader.num_workers} "
        f"workers x {size(run.consumer.batch_bytes)} per batch = {size(needed)} "
        f"(pipecheck wants {memory.SHM_HEADROOM_FACTOR:g}x that free): workers risk a bus error. "
        "Enlarge it (docker run --shm-size=...), or lower prefetch_factor, num_workers or the "
        "batch size.",
        evidence={"shm_free_bytes": shm.free_bytes, "shm_total_bytes": shm.total_bytes,
                  "needed_bytes": needed, "batch_bytes": run.consumer.batch_bytes,
                  "headroom_factor": memory.SHM_HEADROOM_FACTOR},
    )


def stacks_finding(run: RunRecord) -> Optional[Finding]:
    """``stacks-unavailable`` when stacks were asked for and could not be sampled; otherwise a
    ``hot-function`` finding naming the hottest function."""
    stacks = run.stacks
    if stacks is None:
        return None
    if stacks.status in ("unavailable", "failed"):
        return Finding(
            kind=FindingKind.STACKS_UNAVAILABLE,
            severity="info",
            message=f"Hot stacks were not sampled: {stacks.note}",
            evidence={"status": stacks.status},
        )
    if stacks.status != "ok" or not stacks.top:
        return None
    top = stacks.top[0]
    where = "worker" if stacks.worker_samples else "main-process"
    return Finding(
        kind=FindingKind.HOT_FUNCTION,
        severity="info",
        message=f"Hottest function in {where} samples: {top.function} ({top.file}:{top.line}), "
        f"{percent(top.fraction)} of {stacks.worker_samples or stacks.main_samples} on-CPU samples "
        f"over a {seconds(stacks.window_s)} window at {stacks.rate_hz} Hz.",
        evidence={"function": top.function, "file": top.file, "line": top.line,
                  "fraction": top.fraction,
                  "samples": stacks.worker_samples or stacks.main_samples},
    )


def gpu_idle_finding(run: RunRecord) -> Optional[Finding]:
    """How long the CUDA stream starved while the loop waited in ``next()``."""
    device = run.device
    if device is None or device.status != "ok" or device.idle_fraction is None:
        return None
    warn = device.idle_fraction >= GPU_IDLE_WARNING_FRACTION
    return Finding(
        kind=FindingKind.GPU_IDLE,
        severity="warning" if warn else "info",
        message=f"The GPU stream sat idle waiting for data {seconds(device.idle_s)} "
        f"({percent(device.idle_fraction)} of stream time over {device.batches} batches).",
        evidence={"idle_s": device.idle_s, "idle_fraction": device.idle_fraction,
                  "batches": device.batches, "pinned_fraction": device.pinned_fraction,
                  "threshold_fraction": GPU_IDLE_WARNING_FRACTION},
    )
