"""What the worker probe costs, measured in the main process (``num_workers=0`` slot).

Per sample: ``proxy[i]`` against ``dataset[i]`` on a trivial dataset (the fetch path torch runs
for map-style datasets without ``__getitems__``). Per batch: the timed ``collate_fn`` (which
writes one ring record and updates the shared counters under a file lock) against the plain
``collate_fn``. Runs alternate between plain and instrumented so load drifts hit both; the
median difference is reported. Target from the design brief: <= 1 us per sample.

Usage: ``python benchmarks/worker_probe_cost.py [--samples N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch.utils.data import Dataset  # noqa: E402

from pipecheck.probes.workers import WorkerProbe  # noqa: E402

TARGET_US_PER_SAMPLE = 1.0


class TrivialDataset(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def trivial_collate(batch: list) -> list:
    return batch


def _fetch_all(dataset, indices) -> float:
    start = time.perf_counter()
    for i in indices:
        dataset[i]
    return time.perf_counter() - start


def _collate_many(collate_fn, batch, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        collate_fn(batch)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000, help="samples per run")
    parser.add_argument("--batches", type=int, default=20_000, help="collate calls per run")
    parser.add_argument("--rounds", type=int, default=15, help="alternating run pairs")
    args = parser.parse_args(argv)

    dataset = TrivialDataset(args.samples)
    probe = WorkerProbe(0, run_start=time.perf_counter(), ring_size=1024)
    try:
        # What torch's iterator gets (the loader's own attributes read as the user's): the
        # timed twin of the dataset and the timed collate.
        proxy = probe.timed_dataset(dataset)
        timed_collate = probe.timed_collate(trivial_collate)
        assert proxy is not dataset and timed_collate is not trivial_collate
        indices = range(args.samples)
        batch = list(range(64))

        per_sample_us, per_batch_us = [], []
        for _ in range(args.rounds):
            plain = _fetch_all(dataset, indices)
            probed = _fetch_all(proxy, indices)
            per_sample_us.append((probed - plain) / args.samples * 1e6)
            plain = _collate_many(trivial_collate, batch, args.batches)
            probed = _collate_many(timed_collate, batch, args.batches)
            per_batch_us.append((probed - plain) / args.batches * 1e6)

        sample_cost = statistics.median(per_sample_us)
        batch_cost = statistics.median(per_batch_us)
        records = probe.record()
        recorded = sum(r.batches for r in records)
        print(
            f"worker probe: {sample_cost:.2f} us per sample (target <= {TARGET_US_PER_SAMPLE:g} us)"
        )
        print(f"worker probe: {batch_cost:.2f} us per batch record (collate wrapper + ring write)")
        print(
            f"({args.rounds} alternating rounds of {args.samples} samples and {args.batches} "
            f"batches; {recorded} batch records written)"
        )
        return 0 if sample_cost <= TARGET_US_PER_SAMPLE else 1
    finally:
        probe.close()


if __name__ == "__main__":
    raise SystemExit(main())
