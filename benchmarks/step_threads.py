"""The step's wall time against its CPU (the process's and the calling thread's) at several
worker counts, on ``pipelines.py``'s latency pipeline (2 ms of sleep a sample, batch 64, a
small MLP step on torch's default intra-op threads), quiet or beside a CPU burner in another
session (``pipelines.Neighbour``).

It shows what :attr:`pipecheck.analysis.model.ThroughputModel.unstarved_step_s` stands on: at
``num_workers=0`` a step whose intra-op threads wait for cores takes far longer than its
calling thread's CPU, and beside workers it takes about that CPU or less. Per worker count it
prints samples/s over the run and per step the mean wall, process CPU and calling-thread CPU
in ms (the first 3 steps left out).

    python benchmarks/step_threads.py --busy --workers 0,4,2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import LatencyDataset, Model, Neighbour, loader_with  # noqa: E402

WARM_UP_STEPS = 3


def measure(workers: int, seconds: float) -> None:
    loader = loader_with(LatencyDataset(), {"num_workers": workers})
    model = Model()
    walls, process, thread = [], [], []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for batch in loader:
            wall_0, process_0, thread_0 = (time.perf_counter(), time.process_time(),
                                           time.thread_time())
            model.step(batch)
            walls.append(time.perf_counter() - wall_0)
            process.append(time.process_time() - process_0)
            thread.append(time.thread_time() - thread_0)
            if time.perf_counter() - started >= seconds:
                break
    rate = len(walls) * 64 / (time.perf_counter() - started)
    steady = slice(WARM_UP_STEPS, None)
    print(f"{workers:2d} workers: {rate:7.0f} samples/s; step wall "
          f"{statistics.mean(walls[steady]) * 1e3:6.1f} ms, process CPU "
          f"{statistics.mean(process[steady]) * 1e3:6.1f} ms, calling thread CPU "
          f"{statistics.mean(thread[steady]) * 1e3:6.1f} ms", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,4",
                        help="comma-separated worker counts, measured in order (default 0,4)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--busy", action="store_true",
                        help="with a CPU-burning process in another session")
    args = parser.parse_args()
    neighbour = Neighbour("session") if args.busy else None
    if neighbour is not None:
        neighbour.__enter__()
    try:
        for workers in (int(n) for n in args.workers.split(",")):
            measure(workers, args.seconds)
    finally:
        if neighbour is not None:
            neighbour.__exit__()
    return 0


if __name__ == "__main__":
    sys.exit(main())
