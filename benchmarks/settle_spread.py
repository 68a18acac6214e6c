"""How far one run of the stress measurement a report names (:func:`settle.settle`) lands from
plain training with the same settings, each in a fresh process: the spread behind the
calibration suite's "settled" column.

Per round, alternating so that neither side meets the VM at a better hour: the stress command
(one trial of ``--seconds`` with the recommended settings and the pipeline's own step, the
baseline trial first), then a fresh interpreter that settles its allocator as the stress
trial's child does, sets the torch thread count and trains unwrapped for ``--seconds`` after
three warm-up batches (``pipelines.train_for``). Prints each side's samples/s per round and
their medians.

    python benchmarks/settle_spread.py [--pipeline jpeg] [--workers 2] [--threads 1] \\
        [--rounds 4] [--seconds 10] [--data FOLDER]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pipelines import PIPELINES  # noqa: E402
from settle import settle  # noqa: E402

PLAIN = r"""
import sys
sys.path.insert(0, {here!r})
import torch
from pipelines import PIPELINES, loader_with, train_for
from pipecheck.stress.allocator import settle_allocator
settle_allocator()
if {threads!r}:
    torch.set_num_threads({threads!r})
pipeline = PIPELINES[{name!r}]
loader = loader_with(pipeline.dataset({data!r}), {{"num_workers": {workers!r}}},
                     pipeline.iterable)
print(train_for(loader, {seconds!r}, pipeline.model()).samples_per_s)
"""


def plain(name: str, data: Optional[str], workers: int, threads: Optional[int],
          seconds: float) -> float:
    """Samples/s of unwrapped training in a fresh interpreter."""
    code = PLAIN.format(here=HERE, name=name, data=data, workers=workers, threads=threads,
                        seconds=seconds)
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                          text=True, check=True, timeout=seconds + 300)
    return float(done.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="jpeg", choices=sorted(PIPELINES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads of the training process (0: torch's own)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--data", help="a folder holding the pipeline's files already (made "
                        "on first use); default: a fresh temporary folder")
    args = parser.parse_args()
    pipeline = PIPELINES[args.pipeline]
    threads = args.threads or None
    stressed: list[float] = []
    plains: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pipecheck-settle-spread-") as scratch:
        data = args.data or scratch
        if pipeline.prepare is not None and not (os.path.isdir(data) and os.listdir(data)):
            os.makedirs(data, exist_ok=True)
            pipeline.prepare(data)
        folder = data if pipeline.prepare is not None else None
        for round_ in range(args.rounds):
            found = settle(args.pipeline, folder, {"num_workers": args.workers}, threads,
                           args.seconds)
            if found["samples_per_s"] is None:
                print(f"round {round_ + 1}: stress failed: {found['error']}", file=sys.stderr)
                return 1
            stressed.append(found["samples_per_s"])
            plains.append(plain(args.pipeline, folder, args.workers, threads, args.seconds))
            print(f"round {round_ + 1}: stress {stressed[-1]:,.0f}  plain {plains[-1]:,.0f} "
                  "samples/s", flush=True)
    print(f"{args.pipeline} num_workers={args.workers} threads={threads or 'torch default'}: "
          f"stress median {statistics.median(stressed):,.0f} "
          f"({min(stressed):,.0f}-{max(stressed):,.0f}), plain median "
          f"{statistics.median(plains):,.0f} ({min(plains):,.0f}-{max(plains):,.0f}) samples/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
