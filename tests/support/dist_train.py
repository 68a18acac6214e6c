"""A tiny step-synchronous training job for the torch.distributed tests, run under
``torchrun --standalone --nproc_per_node=2`` on the CPU with gloo.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/dist_train.py OUT MODE

Each rank wraps its own DataLoader (``save=OUT/run.json``, so ``run.rank{N}.json``), and every
step ends in an all-reduce, as synchronous gradients do. Rank 1's dataset sleeps
``SLOW_SAMPLE_S`` per sample (a slow loader); rank 0's does not. MODE:

* ``straggler``: every rank runs ``STEPS`` steps, then calls ``report()`` (a collective) and
  saves it; rank 0 prints its report's straggler.
* ``kill``: rank 1 kills itself with SIGKILL after ``KILL_AFTER`` steps; rank 0 is left in its
  all-reduce and is stopped by the error or by torchrun, and its report is saved on the way out.
* ``no-report``: rank 1 finishes but never calls ``report()``; rank 0's gather gives up after
  ``GATHER_TIMEOUT_S`` and its report lists rank 1 as missing.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

import pipecheck

STEPS = 24
BATCH_SIZE = 4
SLOW_SAMPLE_S = 0.006
"""Rank 1 sleeps this long per sample: 24 ms a batch against a 5 ms step."""
STEP_S = 0.005
KILL_AFTER = 8
GATHER_TIMEOUT_S = {"straggler": 30.0, "kill": 30.0, "no-report": 2.0}


class Samples(Dataset):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __len__(self) -> int:
        return STEPS * BATCH_SIZE

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return torch.full((8,), float(index))


def main() -> int:
    out, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = DataLoader(Samples(SLOW_SAMPLE_S if rank == 1 else 0.0), batch_size=BATCH_SIZE)
    wrapped = pipecheck.wrap(loader, save=out / "run.json", host_interval_s=0.5)
    for step, batch in enumerate(wrapped):
        if mode == "kill" and rank == 1 and step == KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(STEP_S)
        total = batch.sum()
        dist.all_reduce(total)  # every step waits for every rank, as DDP's gradients do
    if mode == "no-report" and rank == 1:
        return 0  # never joins the gather: rank 0 must give up after its timeout
    report = wrapped.report(timeout_s=GATHER_TIMEOUT_S[mode])
    saved = report.save(out / "run.json")
    if rank == 0:
        straggler = report.ranks.straggler if report.ranks is not None else None
        print(f"rank 0 saved {saved}; straggler {straggler}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
