"""What one scan of other processes costs (:class:`pipecheck.probes.neighbours.NeighbourScan`):
CPU time of the host sampler's thread per scan, and the processes it walked. The scan runs every
``MIN_SCAN_INTERVAL_S`` or more, never more than ``MAX_COST_FRACTION`` of one core.

    python benchmarks/neighbour_scan.py [--scans 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import psutil

from pipecheck.probes.neighbours import MAX_COST_FRACTION, MIN_SCAN_INTERVAL_S, NeighbourScan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scans", type=int, default=20)
    args = parser.parse_args()
    scan = NeighbourScan(os.getpid())
    if scan.group is None:
        print("no scheduling group readable here (not Linux?): no scan runs")
        return 0
    costs = []
    for i in range(args.scans):
        start = time.thread_time()
        scan.maybe_scan(i * 1e6, {os.getpid()})  # far apart: every call scans
        costs.append(time.thread_time() - start)
    processes = len(psutil.pids())
    median = statistics.median(costs)
    interval = max(MIN_SCAN_INTERVAL_S, median / MAX_COST_FRACTION)
    print(f"{processes} processes: {median * 1e3:.2f} ms of CPU per scan (median of "
          f"{args.scans}; {median / processes * 1e6:.1f} us a process), one scan every "
          f"{interval:.0f} s: {median / interval * 100:.3f}% of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
