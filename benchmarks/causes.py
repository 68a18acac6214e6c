"""The "why is the loader slow" probes on synthetic pipelines, with the figures behind each call.

Prints, for real DataLoader workers on this machine:

1. worker class: a busy-loop and a sleep-per-sample dataset (1 worker, 10 ms a sample, batch 4,
   5 ms step): CPU and run-queue seconds per busy second, the class, and the num_workers
   recommendation that follows;
2. memory growth: a dataset keeping 256 KiB per item (2 workers, 10 ms a sample) against a
   clean one: Theil-Sen USS slope, bytes per batch against the true 1 MiB, flagged or not;
3. hot stacks: the top worker function of a CPU-burning dataset and py-spy's own CPU.

Usage: ``python benchmarks/causes.py`` (about 20 s on 2 cores).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic datasets live with the tests

from torch.utils.data import DataLoader  # noqa: E402

import pipecheck  # noqa: E402
from cause_datasets import BusyDataset, GrowingDataset, SleepyDataset  # noqa: E402

GROW_BYTES = 256 * 1024


def _run(loader, step_s: float, **options):
    with pipecheck.wrap(loader, **options) as wrapped:
        for _ in wrapped:
            time.sleep(step_s)
        return wrapped.report()


def worker_class() -> None:
    print("1. worker class (1 worker, 10 ms a sample, batch 4, 5 ms step)")
    for dataset in (BusyDataset, SleepyDataset):
        report = _run(DataLoader(dataset(240, 0.01), batch_size=4, num_workers=1), 0.005,
                      host_interval_s=0.2)
        (worker,) = report.producer.workers
        recs = [r for r in report.recommendations if r.setting == "num_workers"]
        advice = f"num_workers 1 -> {recs[0].proposed}" if recs else "no num_workers change"
        print(f"   {dataset.__name__:13s} CPU {worker.cpu_fraction:6.1%} + waiting for a core "
              f"{worker.runqueue_fraction:5.1%} of busy time -> {worker.bound:13s} {advice}")


def memory_growth() -> None:
    print(f"2. memory growth (2 workers, 10 ms a sample, batch 4; true growth "
          f"{4 * GROW_BYTES / 2**20:.2f} MiB a batch)")
    for grow in (GROW_BYTES, 0):
        loader = DataLoader(GrowingDataset(320, 0.01, grow), batch_size=4, num_workers=2)
        report = _run(loader, 0.002, host_interval_s=0.1, memory_interval_s=0.1)
        found = [f for f in report.diagnosis.findings if f.kind == "memory-growth"]
        slopes = ", ".join(f"{(w.memory_growth_bytes_per_s or 0) / 2**20:.2f}"
                           for w in report.producer.workers)
        verdict = "not flagged"
        if found:
            per_batch = found[0].evidence["bytes_per_batch"] / 2**20
            verdict = f"flagged, {per_batch:.2f} MiB a batch"
        print(f"   {'growing' if grow else 'clean':8s} USS slope per worker [{slopes}] MiB/s -> "
              f"{verdict}")


def hot_stacks() -> None:
    print("3. hot stacks (2 workers burning 10 ms of CPU a sample, py-spy at 50 Hz)")
    loader = DataLoader(BusyDataset(160, 0.01), batch_size=4, num_workers=2)
    report = _run(loader, 0.002, stacks=True, stacks_rate_hz=50)
    stacks = report.stacks
    if stacks.status != "ok":
        print(f"   not sampled: {stacks.note}")
        return
    top = stacks.top[0]
    print(f"   top: {top.function} {top.fraction:.1%} of {stacks.worker_samples} worker samples; "
          f"py-spy used {stacks.overhead_cpu_s or 0:.2f} s CPU over {stacks.window_s:.2f} s")


if __name__ == "__main__":
    worker_class()
    memory_growth()
    hot_stacks()
