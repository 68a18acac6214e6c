"""Sections about the measured run: throughput, data wait, producer vs consumer, host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Chart, Note, Section, capped, line, more, table
from pipecheck.render.phrases import capacity_phrase

if TYPE_CHECKING:
    from pipecheck.records import ProducerSummary
    from pipecheck.report_data import ReportData

WORKER_ROWS = 64
"""Worker rows shown, in the report's order (stress sweeps go up to 32 workers)."""

DETAIL_ROWS = 200
"""Rows of a detail table (epochs, processes: HTML only) shown, in the report's order."""


def throughput(report: "ReportData") -> Section:
    """Samples, batches (and tokens) per second; wall time, batches, samples, epochs. A stress
    report's first line is its headline trial's steady rate (the sweep's figure), labelled, and
    the whole-run rate below it is labelled as such."""
    consumer = report.consumer
    headline = report.stress.headline if report.stress is not None else None
    steady = headline.steady_samples_per_s if headline is not None else None
    blocks: list[Block] = []
    if headline is not None and steady is not None:
        blocks.append(line(
            ("steady", fmt.rate(steady, "samples")),
            ("", fmt.rate(headline.steady_batches_per_s, "batches")),
            ("", "(the sweep's recommended trial; each epoch's first batch left out, as in "
                 "the sweep)")))
    rates = [("whole run" if blocks else "", fmt.rate(consumer.samples_per_s, "samples")),
             ("", fmt.rate(consumer.batches_per_s, "batches"))]
    if consumer.tokens_per_s is not None:
        rates.append(("", fmt.rate(consumer.tokens_per_s, "tokens")))
    if blocks:
        rates.append(("", "(worker start-up included)" if report.loader.num_workers
                       else "(each epoch's first batch included)"))
    return Section("throughput", "Throughput", (
        *blocks,
        line(*rates),
        line(("wall", fmt.seconds(consumer.wall_s)),
             ("", fmt.count(consumer.batches, "batch", "batches")),
             ("", fmt.count(consumer.samples, "sample")),
             ("", fmt.count(consumer.epochs, "epoch"))),
    ))


def stall(report: "ReportData") -> Section:
    """Wait and compute, the stall, the first batch, per-batch quantiles; the step timeline
    chart and the epoch table (detail)."""
    consumer = report.consumer
    blocks: list[Block] = [
        line(("waited", fmt.seconds(consumer.wait_s)),
             ("computed", fmt.seconds(consumer.compute_s)),
             ("stall", fmt.percent(consumer.stall_fraction)),
             ("steady-state stall", fmt.percent(consumer.steady_stall_fraction))),
        line(("first batch after", fmt.seconds(consumer.first_batch_s))),
    ]
    if consumer.wait_time_s is not None:
        blocks.append(line(("wait per batch:", fmt.duration_quantiles(consumer.wait_time_s))))
    if consumer.compute_time_s is not None:
        blocks.append(line(("step per batch:", fmt.duration_quantiles(consumer.compute_time_s))))
    untimed = consumer.untimed_batches
    if untimed:
        blocks.append(line((
            "timed batch by batch",
            f"{consumer.batches - untimed:,} of {consumer.batches:,} batches (a loop this fast "
            "is timed in random blocks of 64; the others' wait is estimated at the timed "
            "blocks' share of wait in their wall time)")))
    if consumer.sigterms_continued:
        blocks.append(line((
            "SIGTERM received",
            f"{consumer.sigterms_continued:,} time(s); the program handled it and the run went "
            "on")))
    kept = len(report.timeline.batches)
    caption = "Wait vs compute per batch; dashed lines mark epoch starts."
    if kept and kept < consumer.batches:
        sample = "the timed batches" if untimed else "an evenly spaced sample of the batches"
        caption += f" The report keeps {sample}: {kept:,} of {consumer.batches:,} are shown."
    blocks.append(Chart("step_timeline", caption, "No per-batch timeline was recorded."))
    if report.timeline.epochs:
        epochs, hidden = capped(report.timeline.epochs, DETAIL_ROWS)
        rows = [[str(e.epoch), f"{e.batches:,}", fmt.seconds(e.wait_s), fmt.seconds(e.compute_s),
                 fmt.seconds(e.wall_s), fmt.seconds(e.first_batch_s), e.ended]
                for e in epochs]
        blocks.append(table(["epoch", "batches", "waited", "computed", "wall", "first batch",
                             "ended"], rows, right=range(1, 6), detail=True))
        if hidden:
            blocks.append(more(hidden, "epochs", detail=True))
    return Section("stall", "Data wait (stall)", tuple(blocks))


def producer(report: "ReportData") -> Section:
    """Demand, capacity and their ratio, batch build time, the workers' class and table, the
    rates and per-worker charts."""
    consumer, producer = report.consumer, report.producer
    demand = consumer.demand_batches_per_s
    basis = f" ({producer.capacity_basis})" if producer.capacity_basis else ""
    blocks: list[Block] = [
        line(("consumer demand", f"{fmt.rate(demand, 'batches')} (1 / mean steady step time)")),
        line(("producer capacity",
              f"{fmt.rate(producer.capacity_batches_per_s, 'batches')}{basis}")),
    ]
    phrase = capacity_phrase(report)
    if phrase is not None:
        blocks.append(line(("capacity / demand", phrase)))
    judgement = report.diagnosis.judgement
    if judgement is not None and judgement.capacity_note:
        blocks.append(Note(judgement.capacity_note, "dim"))
    details = []
    if producer.batch_time_s is not None:
        details.append(("batch build time:", fmt.duration_quantiles(producer.batch_time_s)))
    if producer.per_worker_batches_per_s is not None:
        details.append(("per worker", fmt.rate(producer.per_worker_batches_per_s, "batches")))
    if producer.cpu_per_batch_s is not None:
        details.append(("CPU per batch", fmt.seconds(producer.cpu_per_batch_s)))
    if producer.cpu_fraction is not None:
        details.append(("worker CPU while busy", fmt.percent(producer.cpu_fraction)))
    if details:
        blocks.append(line(*details))
    if producer.workers_class is not None:
        basis = f" ({producer.workers_class_basis})" if producer.workers_class_basis else ""
        blocks.append(line(("producer is", f"{producer.workers_class}{basis}")))
    blocks.append(Chart(
        "rates", "Batches per second over time: received by the training loop (from the "
        "consumer timeline) and produced by the workers (from each worker's most recent "
        "batches).", "Too few batches to chart rates over time."))
    if producer.workers:
        blocks += _worker_table(producer)
        blocks.append(Chart(
            "workers", "Per-worker busy (fetch, collate) and idle time over the run's wall time; "
            "right: each worker's recent batches as spans.", "No per-worker timing."))
    else:
        blocks.append(Note(f"no per-worker timing (worker probe: {producer.probe})", "dim"))
    return Section("producer", "Producer vs consumer", tuple(blocks))


def _worker_table(producer: "ProducerSummary") -> list[Block]:
    workers, hidden = capped(producer.workers, WORKER_ROWS)
    rows, narrow = [], []
    for worker in workers:
        name = "main" if worker.id == -1 else str(worker.id)
        cells = [f"{worker.batches:,}", fmt.seconds(worker.busy_s),
                 fmt.rate(worker.rate_batches_per_s, "batches"), fmt.percent(worker.cpu_fraction),
                 fmt.mib(worker.rss_max_bytes)]
        rows.append([name, str(worker.pid), *cells])
        narrow.append(line((f"worker {name} (pid {worker.pid}): batches", cells[0]),
                           ("busy", cells[1]), ("rate", cells[2]),
                           ("CPU while busy", cells[3]), ("RSS max", cells[4])))
    shown: list[Block] = [table(["worker", "pid", "batches", "busy", "rate", "CPU/busy",
                                 "RSS max"], rows, right=range(1, 7), no_wrap=range(7),
                                narrow=narrow)]
    return shown + ([more(hidden, "workers")] if hidden else [])


def host(report: "ReportData") -> Section:
    """CPU (cores), IO, memory peaks and the sampler's cost; charts over time and the process
    table (detail). Worker figures only when the loader has worker processes."""
    title = "Host"
    host = report.host
    if host is None:
        return Section("host", title, (Note("host sampling was not run", "dim"),))
    if host.status != "ok":
        note = f": {host.note}" if host.note else ""
        return Section("host", title, (Note(f"host sampling {host.status}{note}", "dim"),))
    # With num_workers=0 (or None, a generic iterable) there are no worker processes: say
    # nothing rather than "0" or "n/a".
    has_workers = bool(report.loader.num_workers)
    cpu = [("CPU main", fmt.cores(_per_wall(host.main_cpu_s, host.duration_s)))]
    if has_workers:
        cpu.append(("workers", fmt.cores(_per_wall(host.workers_cpu_s, host.duration_s))))
    cpu.append(("system", f"{fmt.percent_value(host.system_cpu_percent_mean)} of all cores"))
    cpu.append(("iowait", fmt.percent(host.iowait_fraction_mean)))
    disk = ([(f"disk {host.busiest_disk} busy", fmt.percent(host.disk_busy_fraction_mean))]
            if host.disk_busy_fraction_mean is not None else [])
    blocks: list[Block] = [
        line(*cpu),
        line(("read from storage", fmt.bytes_rate(host.read_bytes_per_s)),
             ("incl. page cache", fmt.bytes_rate(host.read_chars_per_s)), *disk),
    ]
    samples = report.timeline.host
    if samples:
        pairs = [("memory: main RSS peak", fmt.size(max(s.main_rss_bytes for s in samples)))]
        if has_workers:
            pairs.append(("workers RSS peak",
                          fmt.size(max(s.workers_rss_bytes for s in samples))))
            pss = [s.workers_pss_bytes for s in samples if s.workers_pss_bytes is not None]
            if pss:
                pairs.append(("workers PSS peak", fmt.size(max(pss))))
        pairs.append(("lowest available",
                      fmt.size(min(s.available_memory_bytes for s in samples))))
        blocks.append(line(*pairs))
    overhead_cores = _per_wall(host.overhead_cpu_s, host.duration_s)
    blocks.append(line(
        ("sampler", f"{fmt.count(host.samples_taken, 'sample')} every "
                    f"{fmt.seconds(host.interval_s)}"),
        ("overhead", f"{fmt.seconds(host.overhead_cpu_s)} CPU "
                     f"({fmt.percent(overhead_cores)} of one core)")))
    missing = "No host samples were recorded."
    blocks += [
        Chart("host_cpu", "CPU over time per process group (1 core = 100% of one CPU).",
              missing),
        Chart("host_io", "Bytes read per second over time.", "Read rates were not measured."),
        Chart("host_memory", "Memory over time.", missing),
    ]
    if host.processes:
        processes, hidden = capped(host.processes, DETAIL_ROWS)
        rows = [[str(p.pid), p.role + ("" if p.worker_id is None else f" {p.worker_id}"),
                 fmt.seconds(p.cpu_s), fmt.percent_value(p.cpu_percent_mean),
                 fmt.mib(p.rss_max_bytes), fmt.mib(p.pss_max_bytes), fmt.size(p.read_bytes),
                 f"{fmt.seconds(p.first_seen_at_s)} - {fmt.seconds(p.last_seen_at_s)}"]
                for p in processes]
        blocks.append(table(["pid", "role", "CPU time", "CPU mean", "RSS max", "PSS max",
                             "read from storage", "seen"], rows, right=range(2, 8),
                            title="Processes", detail=True))
        if hidden:
            blocks.append(more(hidden, "processes", detail=True))
    return Section("host", title, tuple(blocks))


def _per_wall(cpu_s: Optional[float], wall_s: float) -> Optional[float]:
    """CPU seconds per wall second (cores); ``None`` when either is unknown or the wall is 0."""
    if cpu_s is None or not wall_s:
        return None
    return cpu_s / wall_s
