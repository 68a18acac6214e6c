"""How long torch's intra-op threads stay runnable after a parallel region ends.

OpenMP (libgomp in torch's CPU wheels) lets a team's threads busy-wait after each parallel
region before they sleep (``GOMP_SPINCOUNT``, shortened when threads outnumber the cores), so
a main process whose step ran on the intra-op pool keeps ``threads - 1`` threads runnable for
a while after the step: time the workers beside it cannot use. The what-if model counts that
tail per step (:data:`pipecheck.analysis.model.POOL_SPIN_S`); this measures it: a matrix
product on all the intra-op threads, then the main thread sleeps ``--idle-ms``, and the
process's CPU time during the sleep (the other threads' spin, the sleeping main thread's
being nil) divided by the other threads is the spin tail per region end.

    python benchmarks/pool_spin.py [--regions 200] [--idle-ms 50]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def spin_tails(regions: int, idle_s: float, size: int = 256) -> list[float]:
    """Seconds of CPU each other pool thread spent after one region, ``regions`` times."""
    a = torch.randn(size, size)
    others = max(torch.get_num_threads() - 1, 1)
    tails = []
    for _ in range(regions):
        torch.mm(a, a)  # one parallel region on every intra-op thread
        before = time.process_time()
        time.sleep(idle_s)
        tails.append((time.process_time() - before) / others)
    return tails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--regions", type=int, default=200)
    parser.add_argument("--idle-ms", type=float, default=50.0)
    args = parser.parse_args()
    tails = spin_tails(args.regions, args.idle_ms / 1e3)
    print(f"{torch.get_num_threads()} intra-op threads, torch {torch.__version__}: spin after "
          f"a region, per other thread: median {statistics.median(tails) * 1e3:.2f} ms, "
          f"p90 {statistics.quantiles(tails, n=10)[-1] * 1e3:.2f} ms "
          f"({args.regions} regions, {args.idle_ms:g} ms idle after each)")


if __name__ == "__main__":
    main()
