"""What the worker probe costs per batch, measured in the main process (``num_workers=0`` slot).

The worker probe no longer touches the dataset (no per-sample cost: the fetcher calls the
user's dataset itself); each batch goes through the timed fetcher and the instrumented collate
(one clock read at the fetch's start, two around collation, one ring record written under a
file lock). Per batch of ``--batch-size`` indices: torch's own ``_MapDatasetFetcher.fetch`` with
the plain collate against the timed fetcher with pipecheck's collate, on a trivial dataset.
Runs alternate between plain and instrumented so load drifts hit both; the median difference is
reported.

Usage: ``python benchmarks/worker_probe_cost.py [--batches N] [--batch-size B] [--rounds R]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch.utils.data import Dataset  # noqa: E402

from pipecheck import _torch_compat as _compat  # noqa: E402
from pipecheck.probes.workers import WorkerProbe  # noqa: E402

class TrivialDataset(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def trivial_collate(batch: list) -> list:
    return batch


def _fetch_many(fetcher, index: list, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fetcher.fetch(index)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000, help="fetches per run")
    parser.add_argument("--batch-size", type=int, default=64, help="indices per fetch")
    parser.add_argument("--rounds", type=int, default=15, help="alternating run pairs")
    args = parser.parse_args(argv)

    dataset = TrivialDataset(args.batch_size)
    index = list(range(args.batch_size))
    probe = WorkerProbe(0, run_start=time.perf_counter(), ring_size=1024)
    try:
        plain = _compat._MAP_FETCHER(dataset, True, trivial_collate, False)
        timed = _compat.TimedMapFetcher(dataset, True, probe.collate(trivial_collate), False)
        per_batch_us = []
        for _ in range(args.rounds):
            plain_s = _fetch_many(plain, index, args.batches)
            timed_s = _fetch_many(timed, index, args.batches)
            per_batch_us.append((timed_s - plain_s) / args.batches * 1e6)
        batch_cost = statistics.median(per_batch_us)
        plain_us = plain_s / args.batches * 1e6
        recorded = sum(r.batches for r in probe.record())
        print(f"worker probe: {batch_cost:.2f} us per batch (timed fetch + collate + ring write) "
              f"on a {plain_us:.1f} us fetch of {args.batch_size} samples; 0 per sample")
        print(f"({args.rounds} alternating rounds of {args.batches} fetches; {recorded} batch "
              "records written)")
    finally:
        probe.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
