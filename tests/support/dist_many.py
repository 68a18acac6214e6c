"""A step-synchronous CPU job of many ranks for the gather test (test_distributed_many.py):

    python -m torch.distributed.run --standalone --nproc_per_node=16 dist_many.py OUT

Each rank wraps a tiny DataLoader (``num_workers=0``; ``save=OUT/run.json``, so
``run.rank{N}.json``) and ends every step in an all-reduce, as synchronous gradients do; rank
``SLOW_RANK``'s dataset sleeps ``SLOW_SAMPLE_S`` per sample (the straggler). Every rank then
calls ``report()`` (the gather of summaries onto rank 0) and saves it. Rank 0 then times a
second bare gather (:func:`pipecheck.distributed.gather_summaries`) and prints one line
``gather N ranks S s, B bytes a summary``.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.distributed import gather_summaries
from pipecheck.merge import own_summary
from pipecheck.codec import to_jsonable

STEPS = 10
BATCH_SIZE = 2
SLOW_RANK = 5
SLOW_SAMPLE_S = 0.05
"""The straggler sleeps this long per sample: 100 ms a batch."""
GATHER_TIMEOUT_S = 120.0


class Samples(Dataset):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __len__(self) -> int:
        return STEPS * BATCH_SIZE

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return torch.full((4,), float(index))


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = DataLoader(Samples(SLOW_SAMPLE_S if rank == SLOW_RANK else 0.0),
                        batch_size=BATCH_SIZE)
    wrapped = pipecheck.wrap(loader, save=out / "run.json", host_interval_s=1.0)
    for batch in wrapped:
        total = batch.sum()
        dist.all_reduce(total)
    report = wrapped.report(timeout_s=GATHER_TIMEOUT_S)
    report.save(out / "run.json")
    own = own_summary(report)
    dist.barrier()
    start = time.perf_counter()
    gathered = gather_summaries(own, GATHER_TIMEOUT_S)
    took = time.perf_counter() - start
    if rank == 0:
        assert gathered is not None
        size = len(json.dumps(to_jsonable(own)))
        print(f"gather {len(gathered)} ranks {took:.4f} s, {size} bytes a summary; "
              f"straggler {report.ranks.straggler if report.ranks else None}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
