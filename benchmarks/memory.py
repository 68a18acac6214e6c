"""pipecheck's memory stays bounded however long the run: traced Python allocations while a
wrapped iterable of cheap batches runs for 10^5, 10^6 and 10^7 batches.

    python benchmarks/memory.py [--max-batches 10000000]

Prints the peak of ``tracemalloc`` (allocations made by Python code, pipecheck's buffers and
timeline included) per run length; the figure should not grow with the number of batches.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import tracemalloc

import pipecheck


def peak_bytes(batches: int) -> tuple[int, float, int]:
    batch = (1, 2)  # tiny and shared: only pipecheck's own allocations are traced
    wrapped = pipecheck.wrap(itertools.repeat(batch, batches), samples=lambda b: 1, host=False)
    tracemalloc.start()
    start = time.perf_counter()
    for _ in wrapped:
        pass
    elapsed = time.perf_counter() - start
    report = wrapped.report()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.consumer.batches == batches
    return peak, elapsed, len(report.timeline.batches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-batches", type=int, default=10_000_000)
    args = parser.parse_args(argv)
    n = 100_000
    while n <= args.max_batches:
        peak, elapsed, rows = peak_bytes(n)
        print(f"{n:>12,} batches: peak traced memory {peak / 2**20:.2f} MiB "
              f"({rows} timeline rows kept; {elapsed:.1f} s, tracemalloc slows the loop)")
        n *= 10
    return 0


if __name__ == "__main__":
    sys.exit(main())
