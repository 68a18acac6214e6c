"""Reports for the report/render/CLI tests, built directly from the summary dataclasses (so the
tests do not depend on the analysis code). The figures are a plausible input-bound run: 2
workers that each need ~0.2 s per batch feeding a step that takes ~0.07 s."""

from __future__ import annotations

import dataclasses

from pipecheck.records import (
    BatchTiming,
    ConsumerSummary,
    Diagnosis,
    Environment,
    EpochTiming,
    Expected,
    Finding,
    HostRecord,
    HostSample,
    LoaderConfig,
    ProcessStats,
    ProducerSummary,
    Quantiles,
    Recommendation,
    Timeline,
    WorkerBatch,
    WorkerSummary,
)
from pipecheck.codec import from_jsonable
from pipecheck.report import Report
from pipecheck.report_sections import StressSection


def sample_report(**overrides) -> Report:
    """An input-bound ``wrap`` report with workers, host samples and one recommendation;
    ``overrides`` replace top-level Report fields."""
    batches = [
        BatchTiming(index=i, epoch=0, start_at_s=0.1 * i, wait_s=0.04, compute_s=0.05, samples=32)
        for i in range(6)
    ]
    fields = dict(
        kind="wrap",
        created="2024-05-01T12:00:00+00:00",
        environment=Environment(
            cpu_count=2, usable_cpus=2, python="3.11.7", torch="2.13.0", platform="Linux-x86_64",
            cuda=False, total_memory_bytes=8 * 1024**3, pipecheck="0.1.0",
        ),
        loader=LoaderConfig(
            type="DataLoader", num_workers=2, prefetch_factor=2, batch_size=32, pin_memory=False,
            persistent_workers=False, in_order=True, dataset_type="map", dataset_len=3200,
            batches_per_epoch=100,
        ),
        consumer=ConsumerSummary(
            batches=100, samples=3200, wall_s=12.5, wait_s=5.15, compute_s=7.35,
            stall_fraction=0.412, samples_per_s=256.0, batches_per_s=8.0, tokens_per_s=None,
            first_batch_s=1.2, epochs=1, steady_stall_fraction=0.38, demand_batches_per_s=13.6,
            wait_time_s=Quantiles(mean=0.0515, p50=0.04, p90=0.09, p99=0.2),
            compute_time_s=Quantiles(mean=0.0735, p50=0.07, p90=0.08, p99=0.1),
        ),
        producer=ProducerSummary(
            capacity_batches_per_s=9.5,
            batch_time_s=Quantiles(mean=0.21, p50=0.2, p90=0.25, p99=0.31),
            workers=[
                WorkerSummary(id=0, pid=4101, batches=50, busy_s=10.4, samples=1600, fetch_s=9.9,
                              collate_s=0.5, cpu_s=9.8, rate_batches_per_s=4.81,
                              cpu_fraction=0.94, rss_max_bytes=210 * 1024**2),
                WorkerSummary(id=1, pid=4102, batches=50, busy_s=10.6, samples=1600, fetch_s=10.1,
                              collate_s=0.5, cpu_s=10.0, rate_batches_per_s=4.72,
                              cpu_fraction=0.94, rss_max_bytes=212 * 1024**2),
            ],
            probe="dataset-proxy",
            capacity_samples_per_s=304.0,
            capacity_basis="sum of per-worker busy rates",
            per_worker_batches_per_s=4.76,
            cpu_per_batch_s=0.198,
            cpu_fraction=0.94,
        ),
        host=HostRecord(
            status="ok", interval_s=0.5, samples_taken=25, duration_s=12.5,
            system_cpu_percent_mean=97.0, iowait_fraction_mean=0.004, read_bytes_per_s=1.5e6,
            read_chars_per_s=4.2e6, main_cpu_s=6.9, workers_cpu_s=19.8, overhead_cpu_s=0.06,
            processes=[
                ProcessStats(pid=4000, role="main", cpu_s=6.9, cpu_percent_mean=55.0,
                             rss_max_bytes=400 * 1024**2, pss_max_bytes=None, read_bytes=0,
                             read_chars=1000, first_seen_at_s=0.0, last_seen_at_s=12.5),
            ],
        ),
        diagnosis=Diagnosis(
            verdict="input-bound",
            bottleneck="worker CPU (decode)",
            findings=[
                Finding(kind="slow-first-batch", severity="info",
                        message="the first batch took 1.20 s (worker start-up)",
                        evidence={"first_batch_s": 1.2}),
                Finding(kind="input-bound", severity="critical",
                        message="the loop waited for data 41.2% of the time [2 workers busy]",
                        evidence={"stall_fraction": 0.412, "threshold_fraction": 0.1}),
            ],
            thresholds={"input_bound_stall_fraction": 0.1, "compute_bound_stall_fraction": 0.05},
        ),
        recommendations=[
            Recommendation(setting="num_workers", current=2, proposed=4,
                           expected=Expected(samples_per_s=410.0, stall_fraction=0.06,
                                             note="capped by 2 usable CPUs"),
                           reason="each worker delivers 4.8 batches/s; the step takes 13.6"),
        ],
        timeline=Timeline(
            batches=batches,
            epochs=[EpochTiming(epoch=0, started_at_s=0.0, batches=100, samples=3200, wait_s=5.15,
                                compute_s=7.35, wall_s=12.5, first_batch_s=1.2, ended="exhausted")],
            worker_batches=[WorkerBatch(worker_id=w, end_at_s=0.2 * i + 0.1 * w, fetch_s=0.19,
                                        collate_s=0.01, samples=32)
                            for i in range(3) for w in (0, 1)],
            host=[HostSample(at_s=0.5 * i, system_cpu_percent=96.0 + i, iowait_percent=0.4,
                             main_cpu_percent=55.0, workers_cpu_percent=160.0,
                             main_rss_bytes=(390 + i) * 1024**2, workers_rss_bytes=420 * 1024**2,
                             workers_pss_bytes=None, read_bytes_per_s=1.5e6,
                             read_chars_per_s=4.2e6, available_memory_bytes=(6000 - i) * 1024**2)
                  for i in range(3)],
        ),
    )
    fields.update(overrides)
    return Report(**fields)


def replace_consumer(report: Report, **changes) -> Report:
    """``report`` with some ConsumerSummary fields changed."""
    return dataclasses.replace(report, consumer=dataclasses.replace(report.consumer, **changes))


_TRIAL = {"samples_per_s": None, "batches_per_s": None, "stall_fraction": None,
          "measured": True, "startup_s": None, "batches": 0, "wall_s": 0.0, "error": None}
_CHOICE = {"expected": {"samples_per_s": None, "stall_fraction": None}, "baseline": None,
           "baseline_samples_per_s": None, "gain": None, "changes": {}}


def stress_of(data: dict) -> StressSection:
    """A :class:`StressSection` from a partial ``stress`` dict as the sweep writes it: the keys
    of trials, ``best`` and ``recommended`` a test leaves out get neutral values (no figure,
    no error, no change), the section's own keys none (no trials, no search)."""
    trials = [{**_TRIAL, **t} for t in data.get("trials", [])]
    best = {**_TRIAL, **data["best"]} if data.get("best") else None
    recommended = ({**_CHOICE, **data["recommended"]} if data.get("recommended") else None)
    return from_jsonable(StressSection, {"skipped": [], "search": None, **data,
                                         "trials": trials, "best": best,
                                         "recommended": recommended}, "stress")
