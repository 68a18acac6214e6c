"""How well stress's epoch-start check predicts what ``persistent_workers=True`` saves.

For each pipeline and start method, ``pipecheck.stress`` (one configuration, 2 workers) measures
the epoch restart without and with persistent workers on shortened epochs
(:mod:`pipecheck.stress.epoch_start`). The truth is then measured directly: the same loader runs
``--epochs`` whole epochs both ways, and the difference in wall time over the epochs after the
first, per epoch, is the real saving. Printed per row: both restarts, the predicted and the real
saving per epoch, the prediction's error, the share of an epoch, the verdict and the seconds
the check cost.

Pipelines: ``light`` (400 samples of 1 ms sleep), ``big-state`` (the same plus a 200 MB numpy
array on the dataset, which spawn pickles to every new worker) and ``init-0.5s`` (a
``worker_init_fn`` that sleeps 0.5 s, like opening an index or a connection).

    python benchmarks/epoch_start.py [--epochs 4]
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck

SAMPLES = 400
SAMPLE_S = 0.001
BATCH_SIZE = 4


class Sleepy(Dataset):
    """``SAMPLES`` samples that sleep ``SAMPLE_S`` each; ``state_bytes`` of array kept on it."""

    def __init__(self, state_bytes: int = 0) -> None:
        self.state = np.ones(state_bytes, dtype=np.uint8)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(SAMPLE_S)
        return torch.tensor([index])


def slow_init(worker_id: int) -> None:
    time.sleep(0.5)


def make_loader(kind: str, context: str, num_workers=0, prefetch_factor=None,
                persistent_workers=False) -> DataLoader:
    dataset = Sleepy(200 * 2**20 if kind == "big-state" else 0)
    return DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=num_workers,
                      prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
                      worker_init_fn=slow_init if kind == "init-0.5s" else None,
                      multiprocessing_context=context if num_workers else None)


def real_saving_s(factory, epochs: int) -> float:
    """Seconds per later epoch that persistent workers save over whole epochs."""
    later = {}
    for persistent in (False, True):
        loader = factory(num_workers=2, prefetch_factor=2, persistent_workers=persistent)
        times = []
        for _ in range(epochs):
            started = time.perf_counter()
            for _batch in loader:
                pass
            times.append(time.perf_counter() - started)
        later[persistent] = sum(times[1:]) / (epochs - 1)
        del loader
    return later[False] - later[True]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4, help="whole epochs for the truth")
    args = parser.parse_args()
    print(f"{'pipeline':<10} {'start':<6} {'restart no':>10} {'restart yes':>11} "
          f"{'predicted':>9} {'real':>7} {'error':>6} {'share':>6} {'verdict':<9} {'cost s':>6}")
    for kind in ("light", "big-state", "init-0.5s"):
        for context in ("fork", "spawn"):
            factory = functools.partial(make_loader, kind, context)
            report = pipecheck.stress(factory, num_workers=[2], trial_batches=20, stacks=False)
            entry = report.to_dict()["stress"]["epoch_start"]
            if entry["status"] != "ok":
                print(f"{kind:<10} {context:<6} {entry['status']}: {entry['reason']}")
                continue
            real = real_saving_s(factory, args.epochs)
            predicted = entry["saving_s"]
            cost = sum(t["wall_s"] for t in entry["trials"])
            verdict = "persist" if entry["matters"] else "keep"
            print(f"{kind:<10} {context:<6} {entry['restart_s']['not_persistent']:>9.3f}s "
                  f"{entry['restart_s']['persistent']:>10.3f}s {predicted:>8.3f}s "
                  f"{real:>6.3f}s {abs(predicted - real) / max(real, 1e-9):>6.0%} "
                  f"{entry['fraction']:>6.0%} {verdict:<9} {cost:>6.1f}")


if __name__ == "__main__":
    main()
