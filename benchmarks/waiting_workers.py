"""What a latency-bound worker pays per batch as workers outnumber the CPUs.

The evidence behind ``pipecheck.recommend.limits.MAX_WORKERS_PER_CPU``: on ``pipelines.py``'s
latency dataset (2 ms of sleep per sample, batch 64, so 128 ms of waiting a batch) the training
loop (its small MLP step) runs for ``--seconds`` at each worker count, workers persistent and
warmed up first. Printed per count: samples/s, and the wall time each worker took per batch
(``workers / batches per second``: every worker is busy while the loop waits on them), against
the 128 ms of sleep a batch needs. Past a few workers per CPU the main process, which sends
every index and receives every batch, stretches each worker's batch: the model's "N waiting
workers give N times one worker's rate" stops holding.

``--epoch-samples 4096 --no-persistent-workers`` is ``pipelines.py``'s latency loader: 64
batches an epoch, every epoch starting its workers afresh, so at 16 workers each worker makes
4 batches an epoch and the epoch's start and tail weigh on every one of them.

Two variants isolate where it goes: ``--in-order false`` (no head-of-line blocking: a batch is
taken from whichever worker has one) and ``--sharing file_system`` (tensors handed over by file
name instead of by file descriptor).

    python benchmarks/waiting_workers.py [--workers 4,8,16] [--seconds 6]
        [--epoch-samples 8192] [--no-persistent-workers]
        [--in-order true|false] [--sharing file_descriptor|file_system]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.multiprocessing
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import BATCH_SIZE, LatencyDataset, Model, train_for  # noqa: E402

SLEEP_PER_BATCH_S = 0.002 * BATCH_SIZE  # LatencyDataset sleeps 2 ms a sample


def measure(workers: int, seconds: float, in_order: bool, epoch_samples: int,
            persistent: bool) -> float:
    """Samples/s of the training loop over ``seconds`` after one untimed second."""
    kwargs = {"num_workers": workers, "batch_size": BATCH_SIZE, "shuffle": True,
              "persistent_workers": persistent, "prefetch_factor": 2}
    if not in_order:
        kwargs["in_order"] = False  # torch >= 2.6
    loader = DataLoader(LatencyDataset(epoch_samples), **kwargs)
    model = Model()
    train_for(loader, 1.0, model)  # worker start, first epoch's start-up
    return train_for(loader, seconds, model).samples_per_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="4,8,16",
                        help="comma-separated worker counts (default 4,8,16)")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--epoch-samples", type=int, default=8192,
                        help="samples an epoch (default 8192: 128 batches)")
    parser.add_argument("--no-persistent-workers", action="store_true",
                        help="start the workers afresh every epoch (torch's default)")
    parser.add_argument("--in-order", choices=("true", "false"), default="true")
    parser.add_argument("--sharing", choices=("file_descriptor", "file_system"),
                        default="file_descriptor")
    args = parser.parse_args(argv)
    try:
        counts = [int(n) for n in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: expected comma-separated integers, got {args.workers!r}")
    if any(n < 1 for n in counts):
        parser.error("--workers: every count must be at least 1")
    if args.epoch_samples < BATCH_SIZE:
        parser.error(f"--epoch-samples: at least one batch ({BATCH_SIZE}), got {args.epoch_samples}")
    torch.multiprocessing.set_sharing_strategy(args.sharing)
    cpus = len(os.sched_getaffinity(0))
    print(f"{cpus} usable CPUs; {SLEEP_PER_BATCH_S * 1e3:.0f} ms of sleep a batch of "
          f"{BATCH_SIZE}; {args.epoch_samples // BATCH_SIZE} batches an epoch; "
          f"persistent_workers={not args.no_persistent_workers}; in_order={args.in_order}; "
          f"sharing {args.sharing}")
    for workers in counts:
        samples_per_s = measure(workers, args.seconds, args.in_order == "true",
                                args.epoch_samples, not args.no_persistent_workers)
        batches_per_s = samples_per_s / BATCH_SIZE
        per_batch_ms = workers / batches_per_s * 1e3
        print(f"{workers:3d} workers ({workers / cpus:.1f} a CPU): {samples_per_s:8,.0f} samples/s; "
              f"each worker {per_batch_ms:6.1f} ms a batch "
              f"({per_batch_ms / (SLEEP_PER_BATCH_S * 1e3):.2f}x its sleep); "
              f"ideal {workers / SLEEP_PER_BATCH_S * BATCH_SIZE:8,.0f} samples/s")
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - started:.0f} s)")
    sys.exit(code)
