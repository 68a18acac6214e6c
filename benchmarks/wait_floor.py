"""The figures behind pipecheck's 10 us floor on a material wait per batch
(:data:`pipecheck.analysis.judgement.MIN_MATERIAL_WAIT_S`).

Prints, per call, the best of 5 repeats: a Python generator's ``next()``, a trivial torch op
dispatch (``torch.add`` on 4 floats, one intra-op thread) and the cheapest real DataLoader batch
(``next()`` on ``DataLoader(TensorDataset(...), batch_size=1, num_workers=0)``).

Run: ``python benchmarks/wait_floor.py``
"""

from __future__ import annotations

import time
from typing import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

REPEATS = 5


def per_call_s(body: Callable[[int], None], calls: int) -> float:
    """Best-of-:data:`REPEATS` seconds per call of ``body(calls)`` divided by ``calls``."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        body(calls)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    torch.set_num_threads(1)
    dataset = TensorDataset(torch.randn(200_000, 4))
    a, b = torch.randn(4), torch.randn(4)

    def generator_next(calls: int) -> None:
        items = (x for x in range(calls))
        for _ in range(calls):
            next(items)

    def op_dispatch(calls: int) -> None:
        for _ in range(calls):
            torch.add(a, b)

    def loader_next(calls: int) -> None:
        batches = iter(DataLoader(dataset, batch_size=1, num_workers=0))
        for _ in range(calls):
            next(batches)

    print(f"generator next():                  {per_call_s(generator_next, 200_000) * 1e6:8.2f} us")
    print(f"torch.add, 4 floats, 1 thread:     {per_call_s(op_dispatch, 100_000) * 1e6:8.2f} us")
    print(f"DataLoader next(), batch_size=1:   {per_call_s(loader_next, 20_000) * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
