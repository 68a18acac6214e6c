"""Where a worker's batches go on a CPU-bound dataset, against the main process at num_workers=0.

On ``pipelines.py``'s FFT dataset (batch 64, a tiny MLP step) it prints:

1. fetch CPU per batch (``time.thread_time`` around ``__getitem__``) and the loop's batches/s
   at 0 and 1 workers, and with 2 workers with the main process on torch's default intra-op
   threads and on one (the step's pool competing with the workers);
2. items/s of the same fetch in 1 and 2 processes at once (do the CPUs scale?);
3. the first batch of an epoch at 0, 1 and 2 workers (start-up per epoch).

    python benchmarks/worker_cost.py
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import FftDataset, Model  # noqa: E402


class TimedFft(FftDataset):
    def __getitem__(self, index: int) -> Any:
        start = time.thread_time()
        sample = super().__getitem__(index)
        return sample, time.thread_time() - start


def collate(items: list[Any]) -> Any:
    return default_collate([s for s, _ in items]), sum(c for _, c in items)


def loop(workers: int, threads: int, batches: int = 40) -> tuple[float, float]:
    """(batches/s after 5 warm-up batches, mean fetch CPU seconds per batch)."""
    torch.set_num_threads(threads)
    loader = DataLoader(TimedFft(), batch_size=64, num_workers=workers, collate_fn=collate)
    model, cpu, started = Model(), [], 0.0
    for n, (batch, fetch_cpu_s) in enumerate(loader, 1):
        model.step(batch)
        if n == 5:
            started = time.perf_counter()
        elif n > 5:
            cpu.append(fetch_cpu_s)
        if n == 5 + batches:
            break
    return batches / (time.perf_counter() - started), float(np.mean(cpu))


def burn(queue: Any, seconds: float) -> None:
    dataset, n, cpu = FftDataset(), 0, time.thread_time()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        dataset[n % len(dataset)]
        n += 1
    queue.put((n, time.thread_time() - cpu))


def main() -> int:
    default = torch.get_num_threads()
    for workers, threads in ((0, default), (1, default), (2, default), (2, 1)):
        rate, cpu = loop(workers, threads)
        print(f"{workers} workers, main on {threads} intra-op threads: {rate:5.1f} batches/s, "
              f"fetch CPU {cpu * 1e3:.1f} ms a batch")
    torch.set_num_threads(default)
    for processes in (1, 2):
        queue = multiprocessing.Queue()
        started = [multiprocessing.Process(target=burn, args=(queue, 6.0))
                   for _ in range(processes)]
        for process in started:
            process.start()
        results = [queue.get() for _ in started]
        for process in started:
            process.join()
        items, cpu = sum(r[0] for r in results), sum(r[1] for r in results)
        print(f"{processes} fetching process(es): {items / 6.0:.0f} items/s in all, "
              f"{cpu / items * 1e3:.3f} ms CPU an item")
    for workers in (0, 1, 2):
        loader = DataLoader(FftDataset(), batch_size=64, num_workers=workers)
        firsts = []
        for _ in range(3):
            start = time.perf_counter()
            iterator = iter(loader)
            next(iterator)
            firsts.append((time.perf_counter() - start) * 1e3)
            del iterator
        print(f"{workers} workers: first batch of an epoch "
              f"{', '.join(f'{f:.0f}' for f in firsts)} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
