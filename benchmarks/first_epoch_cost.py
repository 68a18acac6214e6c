"""pipecheck's cost over a whole first epoch on the fastest loader (TensorDataset, batch_size=1,
num_workers=0): process CPU time per batch, plain vs wrapped (host sampler off, every other
probe on), best of ``--rounds`` fresh loaders each, plain and wrapped epochs alternating (so
that a shared machine's slow spells fall on both). Complements ``overhead.py``'s interleaved
chunks with whole epochs, which include the per-epoch set-up and the run's first 1,024
batches, timed one by one.

    python benchmarks/first_epoch_cost.py [LABEL] [--rounds 7]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import pipecheck

BATCHES = 20_000


def first_epoch_s(dataset: TensorDataset, wrap: bool) -> float:
    """Process CPU seconds of one first epoch from a fresh loader (wrapped: a fresh wrapper)."""
    loader = DataLoader(dataset, batch_size=1)
    if wrap:
        loader = pipecheck.wrap(loader, host=False)
    started = time.process_time()
    for _ in loader:
        pass
    elapsed = time.process_time() - started
    if wrap:
        loader.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", nargs="?", default="this checkout")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    dataset = TensorDataset(torch.randn(BATCHES, 8), torch.randint(0, 10, (BATCHES,)))
    plain, wrapped = [], []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for wrap in order:
            (wrapped if wrap else plain).append(first_epoch_s(dataset, wrap))
    plain_us, wrapped_us = min(plain) / BATCHES * 1e6, min(wrapped) / BATCHES * 1e6
    print(f"{args.label}: plain {plain_us:.2f} us, wrapped first epoch {wrapped_us:.2f} us, "
          f"cost {wrapped_us - plain_us:.2f} us/batch ({(wrapped_us / plain_us - 1) * 100:+.1f}%;"
          f" best of {args.rounds} alternating epochs each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
