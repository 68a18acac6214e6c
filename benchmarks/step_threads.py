"""The step's wall time against its CPU (the process's and the calling thread's) at several
worker counts, on one of ``pipelines.py``'s pipelines (default ``latency``: 2 ms of sleep a
sample, batch 64, a small MLP step on torch's default intra-op threads; ``--threads`` sets the
main process's), quiet or beside a CPU burner in another session (``pipelines.Neighbour``).

It shows what :attr:`pipecheck.analysis.model.ThroughputModel.unstarved_step_s` stands on: at
``num_workers=0`` a step whose intra-op threads wait for cores takes far longer than its
calling thread's CPU, and beside workers it takes about that CPU or less. Per worker count it
prints samples/s over the run and per step the mean wall, process CPU and calling-thread CPU
in ms (the first 3 steps left out).

With CPU-bound workers (``--pipeline wds``, ``torchops``) it shows the step's pool beside
workers that keep the cores full: each parallel region waits for a descheduled teammate, so
the step takes many times its serial time, and ``--threads 1`` shows the step without a team.

    python benchmarks/step_threads.py --busy --workers 0,4,2
    python benchmarks/step_threads.py --pipeline wds --workers 0,2 [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import PIPELINES, Neighbour, Pipeline, loader_with  # noqa: E402

WARM_UP_STEPS = 3


def measure(pipeline: Pipeline, data: str | None, workers: int, seconds: float) -> None:
    loader = loader_with(pipeline.dataset(data), {"num_workers": workers},
                         iterable=pipeline.iterable)
    model = pipeline.model()
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
    parser.add_argument("--pipeline", default="latency", choices=sorted(PIPELINES),
                        help="the pipeline and its step (default latency)")
    parser.add_argument("--threads", type=int,
                        help="the main process's torch intra-op threads (default torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    pipeline = PIPELINES[args.pipeline]
    print(f"{pipeline.name}: main process on {torch.get_num_threads()} intra-op threads")
    neighbour = Neighbour("session") if args.busy else None
    with tempfile.TemporaryDirectory(prefix="pipecheck-step-threads-") as root:
        data = None
        if pipeline.prepare is not None:
            data = root
            pipeline.prepare(data)
        if neighbour is not None:
            neighbour.__enter__()
        try:
            for workers in (int(n) for n in args.workers.split(",")):
                measure(pipeline, data, workers, args.seconds)
        finally:
            if neighbour is not None:
                neighbour.__exit__()
    return 0


if __name__ == "__main__":
    sys.exit(main())
