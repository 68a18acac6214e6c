"""How long ``pipecheck.load`` takes for a report with many timeline records.

    PYTHONPATH=$PWD python benchmarks/report_load.py [--records 80000] [--repeat 3]

Builds a report whose timeline holds ``--records`` consumer batches plus as many worker
batches (a long run saved with a raised timeline capacity), saves it to a temporary file and
prints the file size and the best and median wall time of ``pipecheck.load`` over
``--repeat`` loads. Needs nothing but pipecheck (no torch DataLoader is run).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time

import pipecheck
from pipecheck.records import (BatchTiming, ConsumerSummary, Diagnosis, Environment,
                               LoaderConfig, ProducerSummary, Timeline, WorkerBatch)
from pipecheck.report import Report


def build(records: int) -> Report:
    """A wrap report whose timeline has ``records`` consumer and ``records`` worker batches."""
    batches = [BatchTiming(index=i, epoch=0, start_at_s=0.01 * i, wait_s=0.002, compute_s=0.008,
                           samples=32) for i in range(records)]
    workers = [WorkerBatch(worker_id=i % 4, end_at_s=0.01 * i, fetch_s=0.03, collate_s=0.001,
                           samples=32) for i in range(records)]
    return Report(
        kind="wrap", created="2026-01-01T00:00:00+00:00",
        environment=Environment(cpu_count=2, usable_cpus=2, python="3.11", torch=None,
                                platform="Linux", cuda=False),
        loader=LoaderConfig(type="DataLoader", num_workers=4, batch_size=32),
        consumer=ConsumerSummary(batches=records, samples=32 * records, wall_s=0.01 * records,
                                 wait_s=0.002 * records, compute_s=0.008 * records,
                                 stall_fraction=0.2, samples_per_s=3200.0, batches_per_s=100.0,
                                 tokens_per_s=None, first_batch_s=0.5),
        producer=ProducerSummary(capacity_batches_per_s=130.0, batch_time_s=None, workers=[]),
        host=None,
        diagnosis=Diagnosis(verdict="input-bound", bottleneck="workers", findings=[]),
        recommendations=[],
        timeline=Timeline(batches=batches, worker_batches=workers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=80_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    report = build(args.records)
    with tempfile.TemporaryDirectory() as folder:
        path = report.save(os.path.join(folder, "run.json"))
        size = os.path.getsize(path)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            loaded = pipecheck.load(path)
            times.append(time.perf_counter() - start)
        assert dataclasses.asdict(loaded.timeline) == dataclasses.asdict(report.timeline)
    print(f"{args.records:,} consumer + {args.records:,} worker timeline records, "
          f"{size / 2**20:.1f} MiB: load best {min(times):.2f} s, "
          f"median {statistics.median(times):.2f} s over {args.repeat}")


if __name__ == "__main__":
    main()
