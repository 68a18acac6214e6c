"""How the C allocator's history changes a pipeline's production time: the calibration
suite's pipelines' items made in a fresh process, and in one that first freed a single
:data:`pipecheck.stress.allocator.WARM_BLOCK_BYTES` block (glibc's dynamic mmap threshold
raised, as in a training process that has freed a large tensor). Each measurement runs in its
own fresh interpreter, alternating, so neither inherits the other's heap.

    python benchmarks/allocator_state.py [--pipelines torchops,jpeg] [--rounds 2] [--items 128]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import sys, time
sys.path.insert(0, {here!r})
from pipelines import PIPELINES
from pipecheck.stress.allocator import settle_allocator
pipeline = PIPELINES[{name!r}]
if {warm!r}:
    settle_allocator()
dataset = pipeline.dataset({data!r})
for i in range(16):
    dataset[i]
started, cpu = time.perf_counter(), time.process_time()
for i in range({items}):
    dataset[i]
print((time.perf_counter() - started) / {items} * 1e3, (time.process_time() - cpu) / {items} * 1e3)
"""


def one(name: str, data: str | None, warm: bool, items: int) -> tuple[float, float]:
    code = CHILD.format(here=HERE, name=name, data=data, warm=warm, items=items)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", default="torchops,jpeg,text,wds,fft")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--items", type=int, default=128)
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from pipelines import PIPELINES

    with tempfile.TemporaryDirectory() as root:
        for name in args.pipelines.split(","):
            pipeline = PIPELINES[name]
            if pipeline.iterable:
                print(f"{name:9} skipped: an iterable pipeline has no item to time")
                continue
            data = None
            if pipeline.prepare is not None:
                data = os.path.join(root, name)
                os.makedirs(data)
                pipeline.prepare(data)
            fresh, warm = [], []
            for _ in range(args.rounds):
                fresh.append(one(name, data, False, args.items))
                warm.append(one(name, data, True, args.items))
            print(f"{name:9} ms an item (wall / process CPU): fresh "
                  + ", ".join(f"{w:.2f}/{c:.2f}" for w, c in fresh) + "; after one freed block "
                  + ", ".join(f"{w:.2f}/{c:.2f}" for w, c in warm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
