"""What moving a batch through shared memory costs, per byte, on each side of the hand-over.

With ``num_workers >= 1`` torch's worker collates each batch into fresh shared memory (a new
``/dev/shm`` file per storage: allocating, zeroing and faulting in its pages, then copying the
samples in) and the main process maps it; the step's first touch of each page faults it in
again on the main side. With ``num_workers=0`` the batch is collated into ordinary memory the
allocator reuses, so a run measured at 0 workers never paid either cost. The what-if model
(:data:`pipecheck.analysis.model.SHM_WORKER_S_PER_BYTE`, :data:`SHM_MAIN_S_PER_BYTE`) adds
them per byte of the measured batch (``ConsumerRecord.batch_bytes``); this measures them.

For batches of 64 uint8 images of several sizes (fresh copies, as a decoder gives):

* worker side: seconds per batch of 1 worker feeding a loop that does nothing (the worker is
  the bottleneck), less the main thread's seconds per batch producing the same batches at
  ``num_workers=0``; the fit over bytes per batch is its slope;
* main side: the step's time to read one byte in every 4 KiB page of the batch (each page
  touched once) with 1 worker, less the same at 0 workers; its slope over bytes.

Each figure is the median of ``--rounds`` interleaved rounds; run it on a quiet machine.

    python benchmarks/shm_cost.py [--batches 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

SIDES = (64, 128, 224)
"""Image sides (3 x side x side uint8, 64 a batch): 0.8, 3.1 and 9.6 MB per batch."""

PAGE = 4096


class Images(Dataset):
    """``(3, side, side)`` uint8 samples, a fresh copy each (as a decoder gives)."""

    def __init__(self, side: int, length: int) -> None:
        self.base = torch.randint(0, 255, (3, side, side), dtype=torch.uint8)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.base.clone(), index


def touch(images: torch.Tensor) -> None:
    """Read one byte of every page of ``images`` (contiguous): the faults a step's first read
    takes, without the step's own arithmetic."""
    flat = images.view(-1)
    int(flat[::PAGE].sum())


def per_batch(side: int, workers: int, batches: int) -> tuple[float, float, int]:
    """``(seconds per batch of the whole loop, step seconds per batch, bytes per batch)`` of
    ``batches`` batches after 5 warm-up ones; the loop only touches each batch's pages."""
    loader = DataLoader(Images(side, 64 * (batches + 5)), batch_size=64, num_workers=workers)
    it = iter(loader)
    for _ in range(5):
        touch(next(it)[0])
    step = 0.0
    size = 0
    start = time.perf_counter()
    for images, _ in it:
        began = time.perf_counter()
        touch(images)
        step += time.perf_counter() - began
        size = images.numel() * images.element_size()
    total = time.perf_counter() - start
    del it
    return total / batches, step / batches, size


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` on ``xs``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
            / sum((x - mx) ** 2 for x in xs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=60, help="timed batches a run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for side in SIDES:
        runs: dict[int, list[tuple[float, float, int]]] = {0: [], 1: []}
        for r in range(args.rounds):
            for workers in ((0, 1) if r % 2 == 0 else (1, 0)):
                runs[workers].append(per_batch(side, workers, args.batches))
        serial = statistics.median(t for t, _, _ in runs[0])
        fed = statistics.median(t for t, _, _ in runs[1])
        step0 = statistics.median(s for _, s, _ in runs[0])
        step1 = statistics.median(s for _, s, _ in runs[1])
        size = runs[0][0][2]
        rows.append((size, fed - serial, step1 - step0))
        print(f"{size / 1e6:5.1f} MB a batch: 0 workers {serial * 1e3:6.2f} ms a batch "
              f"(step {step0 * 1e3:5.2f} ms), 1 worker {fed * 1e3:6.2f} ms a batch "
              f"(step {step1 * 1e3:5.2f} ms)")
    sizes = [s for s, _, _ in rows]
    worker = slope(sizes, [w for _, w, _ in rows])
    main_side = slope(sizes, [m for _, _, m in rows])
    fixed = statistics.fmean(w for _, w, _ in rows) - worker * statistics.fmean(sizes)
    print(f"worker side: {worker * 1e9:.2f} ns a byte ({worker * 1e9:.2f} ms a MB), "
          f"intercept {fixed * 1e3:.2f} ms a batch; main side (first touch in the step): "
          f"{main_side * 1e9:.2f} ns a byte")


if __name__ == "__main__":
    main()
