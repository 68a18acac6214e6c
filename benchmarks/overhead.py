"""pipecheck's own cost: wrapped vs plain loaders, measured alternately in one process.

For each loader, rounds alternate plain and wrapped epochs (the order flips every round so
drift and warm-up hit both alike); the figure is the median over rounds of
``wrapped_time / plain_time - 1``. The wrapped loader keeps everything on: consumer probe,
worker probe and the psutil host sampler.

Targets (issue "pipecheck 0.1"): <= 5% on the fastest loader (TensorDataset, batch_size=1,
num_workers=0); <= 2% on a 2-worker loader.

    python benchmarks/overhead.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import pipecheck


class NumpyWorkDataset(Dataset):
    """Each item does a little real CPU work (a 64x64 float32 matmul and a sum)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.base = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        m = self.base * (1.0 + i % 7)
        return torch.from_numpy(m @ m.T).sum(dim=0), i


def epoch_time(loader) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def compare(name: str, make: Callable[[], DataLoader], rounds: int, target: float) -> bool:
    plain = make()
    wrapped = pipecheck.wrap(make())
    epoch_time(plain), epoch_time(wrapped)  # warm-up: worker start, page cache, allocator
    ratios = []
    for r in range(rounds):
        if r % 2:
            w, p = epoch_time(wrapped), epoch_time(plain)
        else:
            p, w = epoch_time(plain), epoch_time(wrapped)
        ratios.append(w / p - 1.0)
    report = wrapped.report()
    wrapped.close()
    median = statistics.median(ratios)
    spread = (min(ratios), max(ratios))
    per_batch_us = median * p / report.loader.batches_per_epoch * 1e6
    verdict = "ok" if median <= target else "OVER TARGET"
    print(f"{name}: wrapped slowdown {median * 100:+.2f}% (median of {rounds} rounds, "
          f"range {spread[0] * 100:+.2f}%..{spread[1] * 100:+.2f}%; about "
          f"{per_batch_us:.2f} us per batch; plain epoch {p * 1e3:.1f} ms for "
          f"{report.loader.batches_per_epoch} batches); target <= {target * 100:.0f}% -> "
          f"{verdict}")
    return median <= target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    fastest = TensorDataset(torch.randn(20_000, 8), torch.randint(0, 10, (20_000,)))
    ok = compare("TensorDataset, batch_size=1, num_workers=0",
                 lambda: DataLoader(fastest, batch_size=1, num_workers=0),
                 args.rounds, target=0.05)
    ok &= compare("2 workers, batch_size=32, 64x64 matmul per sample",
                  lambda: DataLoader(NumpyWorkDataset(8_192), batch_size=32, num_workers=2,
                                     persistent_workers=True),
                  args.rounds, target=0.02)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
