"""The consumer probe's sparse blocks against timing every batch, on a real fast loop.

A loop faster than ``SPARSE_BELOW_S`` a batch is timed in random blocks of 64 batches
(``probes/consumer_iterator.py``); the other blocks' wall time is split at the timed blocks' share of
wait. This runs the same loop (``num_workers=0``, batch of 1, items
that busy-wait 2 us, every 50th 30 us; a busy-wait step of ``--step-us``) alternately with
sparse blocks and with every batch timed (``SPARSE_BELOW_S`` = 0), and prints each run's stall
next to the loader's own: the time spent inside the DataLoader iterator's ``next()``, summed
by a shim between pipecheck and the loader, over the loop's wall time. pipecheck's own time
around ``next()`` is not in the loader's figure, so timing every batch reads above it by that
much.

    python benchmarks/sparse_accuracy.py [--rounds 3] [--batches 40000] [--step-us 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.probes import consumer_iterator


class JitterDataset(Dataset):
    """Items that busy-wait 2 us, every 50th 30 us (a slow item a period apart)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        started = time.perf_counter()
        cost = 30e-6 if i % 50 == 0 else 2e-6
        while time.perf_counter() - started < cost:
            pass
        return i


class LoaderClock:
    """An iterable over ``loader`` whose iterators sum the seconds spent inside the loader's
    own ``next()`` into ``inside_s``: the wait the loader causes, without pipecheck's."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.inside_s = 0.0

    def __iter__(self):
        source = iter(self.loader)
        clock = time.perf_counter
        while True:
            started = clock()
            try:
                batch = next(source)
            except StopIteration:
                self.inside_s += clock() - started
                return
            self.inside_s += clock() - started
            yield batch


def one_run(batches: int, step_s: float, sparse: bool) -> tuple[float, float, int]:
    """(pipecheck's stall, the loader's own, untimed batches) of one epoch."""
    consumer_iterator.SPARSE_BELOW_S = SPARSE_BELOW_S if sparse else 0.0
    loader = LoaderClock(DataLoader(JitterDataset(batches), batch_size=1))
    wrapped = pipecheck.wrap(loader, host=False, workers=False)
    started = time.perf_counter()
    for _ in wrapped:
        step_started = time.perf_counter()
        while time.perf_counter() - step_started < step_s:
            pass
    wall = time.perf_counter() - started
    record = wrapped.record().consumer
    wrapped.close()
    return record.wait_s / record.wall_s, loader.inside_s / wall, record.untimed_batches


SPARSE_BELOW_S = consumer_iterator.SPARSE_BELOW_S


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40_000)
    parser.add_argument("--step-us", type=float, default=10.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    gaps: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for sparse in ((True, False) if r % 2 == 0 else (False, True)):
            stall, truth, untimed = one_run(args.batches, args.step_us * 1e-6, sparse)
            gaps[sparse].append((stall - truth) * 100)
            mode = "sparse blocks" if sparse else "every batch  "
            print(f"round {r + 1}, {mode}: stall {stall * 100:.2f}%, the loader's own "
                  f"{truth * 100:.2f}% ({gaps[sparse][-1]:+.2f} pp), "
                  f"{untimed:,} of {args.batches:,} batches untimed")
    for sparse, values in gaps.items():
        print(f"{'sparse blocks' if sparse else 'every batch'}: pipecheck - the loader's own, "
              f"median {statistics.median(values):+.2f} pp, from {min(values):+.2f} to "
              f"{max(values):+.2f} pp over {len(values)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
