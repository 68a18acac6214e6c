"""The consumer probe's cost per batch, by part, without torch: the epoch iterator over a
source whose ``next()`` costs almost nothing, against that source alone (best of ``--rounds``).

Parts: the fast path (batch sizes known up front, as for a plain DataLoader: two clock reads,
two appends), the same with a sample count per batch (batches whose sizes are read from their
structure), each with every batch timed and with the sparse blocks a loop this fast gets
(``SPARSE_BELOW_S``: one block of 64 in ``SPARSE_TIMED_EVERY`` timed, the others only counted),
and ``time.perf_counter`` alone (two of them are the floor of any timing around ``next()``).
Folding every ``FOLD_BATCHES`` batches and the CPU-clock sample every ``CPU_SAMPLE_EVERY`` are
included, as in a run.

    python benchmarks/consumer_cost.py [--batches 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Callable, Iterator, Optional

from pipecheck._clock import monotonic
from pipecheck.probes import consumer_iterator
from pipecheck.probes.consumer import ConsumerProbe, FixedBatches


class Source:
    """An endless iterator yielding the same small tuple (a batch of one sample)."""

    batch = (1, 2)

    def __iter__(self) -> "Source":
        return self

    def __next__(self) -> tuple[int, int]:
        return self.batch


def loop_s(iterator: Iterator, batches: int) -> float:
    started = time.perf_counter()
    for _ in itertools.islice(iterator, batches):
        pass
    return time.perf_counter() - started


def extra_ns(batches: int, rounds: int, fixed: Optional[FixedBatches], sparse: bool) -> float:
    """Best of ``rounds``: ns a batch the epoch iterator adds over the bare source, with
    sparse blocks or every batch timed."""
    consumer_iterator.SPARSE_BELOW_S = SPARSE_BELOW_S if sparse else 0.0
    best = float("inf")
    for _ in range(rounds):
        probe = ConsumerProbe(run_start=monotonic())
        wrapped = loop_s(probe.open_epoch(Source, fixed), batches)
        bare = loop_s(Source(), batches)
        best = min(best, (wrapped - bare) / batches * 1e9)
    return best


SPARSE_BELOW_S = consumer_iterator.SPARSE_BELOW_S


def call_ns(fn: Callable[[], object], calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls * 1e9)
    return best


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    fixed = FixedBatches(batch_size=1, samples_per_epoch=10**12)
    for sparse, mode in ((False, "every batch timed"), (True, "sparse blocks")):
        print(f"epoch iterator, batch sizes known (fast path), {mode}: "
              f"{extra_ns(args.batches, args.rounds, fixed, sparse):.0f} ns a batch")
        print(f"epoch iterator, samples counted per batch, {mode}: "
              f"{extra_ns(args.batches, args.rounds, None, sparse):.0f} ns a batch")
    print(f"time.perf_counter(): {call_ns(time.perf_counter, args.batches, args.rounds):.0f} "
          f"ns a call (with the loop's own cost)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
