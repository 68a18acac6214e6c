"""What the main thread pays to receive a ready batch from a DataLoader worker.

The what-if model needs this hand-over cost (unpickling the batch, mapping its shared-memory
tensors) to predict a run with workers from one measured with ``num_workers=0``, where it was
never paid. This measures it: 2 persistent workers fill the prefetch queue while the loop
sleeps, so every ``next()`` finds its batch ready and its main-thread CPU time
(``time.thread_time``, robust to other load) is the hand-over alone. Batches are a tensor of
``(64, *shape)`` plus 64 indices, as an image dataset's are, and dicts of 8 and 32 small
feature tensors (every tensor is its own shared-memory storage to rebuild); the fit is least
squares of CPU per batch on tensors and megabytes per batch, giving the fixed cost and the cost
per tensor that ``pipecheck.analysis.model.RECEIVE_FIXED_S`` / ``RECEIVE_S_PER_TENSOR`` quote
(and the cost per MB, which came out at -1 to 0 us: the pages map lazily).

    python benchmarks/receive_cost.py [--batches 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

SHAPES = (((16,), torch.float32), ((3, 96, 96), torch.uint8), ((3, 96, 96), torch.float32),
          ((3, 224, 224), torch.float32))


FEATURES = (8, 32)
"""Tensor counts of the dict-of-features batches (a tokenized or tabular dataset's shape)."""


class Constant(Dataset):
    """``(tensor, index)`` samples of one shape (a fresh copy each, as a decoder gives), or with
    ``features`` a dict of that many small tensors."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, length: int,
                 features: int = 0) -> None:
        self.sample = torch.zeros(shape, dtype=dtype)
        self.length = length
        self.features = features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        if self.features:
            return {f"f{i}": self.sample.clone() for i in range(self.features)}
        return self.sample.clone(), index


def receive_cpu(shape: tuple[int, ...], dtype: torch.dtype, batches: int,
                features: int = 0) -> tuple[float, int, float]:
    """``(MB per batch, tensors per batch, median main-thread CPU seconds per ready next())``."""
    loader = DataLoader(Constant(shape, dtype, 64 * batches, features), batch_size=64,
                        num_workers=2, persistent_workers=True)
    cpu, megabytes, tensors = [], 0.0, 0
    for _ in range(2):
        iterator = iter(loader)
        for k in range(batches):
            time.sleep(0.3 if k == 0 else 0.03)  # the queue refills: every batch is ready
            start = time.thread_time()
            batch = next(iterator)
            cpu.append(time.thread_time() - start)
            parts = list(batch.values()) if isinstance(batch, dict) else list(batch)
            megabytes = sum(p.nbytes for p in parts) / 1e6
            tensors = len(parts)
    return megabytes, tensors, statistics.median(cpu[5:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch (2 epochs)")
    args = parser.parse_args()
    points = [receive_cpu(shape, dtype, args.batches) for shape, dtype in SHAPES]
    points += [receive_cpu((16,), torch.float32, args.batches, features=n) for n in FEATURES]
    for megabytes, tensors, seconds in points:
        print(f"{megabytes:8.3f} MB in {tensors:2d} tensors a batch: {seconds * 1e6:7.0f} us of "
              "main-thread CPU to receive it")
    design = np.array([[1.0, t, m] for m, t, _ in points])
    fixed, per_tensor, per_mb = np.linalg.lstsq(design, np.array([s for *_, s in points]),
                                                rcond=None)[0]
    print(f"fit: {fixed * 1e6:.0f} us a batch + {per_tensor * 1e6:.0f} us per tensor + "
          f"{per_mb * 1e6:.0f} us per MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
