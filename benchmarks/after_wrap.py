"""What pipecheck leaves behind in the user's own code: the speed of a pure-Python dataset's
``__getitem__`` before and after one wrapped run, in the same process.

Why: reading an object's ``__dict__`` once makes its attribute loads slower for the rest of the
process on CPython 3.11-3.12 (docs/internals.md, "pipecheck/_peek.py"). pipecheck's copy-on-read
check did, and the ``text`` pipeline's items got 11-13% slower after ``wrap()``, unwrapped and
after ``close()``. This benchmark guards that no step of a wrapped run (construction, epochs,
report, close, with ``tune=True`` or not) leaves such a cost.

Each round runs in a fresh process: it times ``dataset[i]`` for ``--items`` items (best of 5
passes), runs one step (``plain``: an unwrapped DataLoader for two epochs, the control;
``wrapped``: ``pipecheck.wrap`` with every probe on, two epochs, ``report()``, ``close()``;
``tuned``: the same with ``tune=True``), and times ``dataset[i]`` again. Per step it prints
the median after/before ratio over ``--rounds`` rounds (interleaved). Target: each wrapped
step's median within 2% of the control's.

    python benchmarks/after_wrap.py [--rounds 5] [--items 600] [--pipeline text]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("plain", "wrapped", "tuned")


def _per_item_us(dataset, items: int) -> float:
    """Best of 5 passes over the first ``items`` items, in µs per item."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for i in range(items):
            dataset[i]
        best = min(best, time.perf_counter() - start)
    return best / items * 1e6


def one_round(step: str, pipeline_name: str, items: int) -> dict:
    """Run in a fresh process: time, run ``step``, time again."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    warnings.filterwarnings("ignore")
    import pipecheck
    from pipelines import PIPELINES, loader_with

    pipeline = PIPELINES[pipeline_name]
    dataset = pipeline.dataset(None)
    before = _per_item_us(dataset, items)
    loader = loader_with(dataset, {"num_workers": 0}, pipeline.iterable)
    if step == "plain":
        for _ in range(2):
            for _ in loader:
                pass
    else:
        wrapped = pipecheck.wrap(loader, tune=step == "tuned")
        for _ in range(2):
            for _ in wrapped:
                pass
        wrapped.report()
        wrapped.close()
    after = _per_item_us(dataset, items)
    return {"step": step, "before_us": before, "after_us": after}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--pipeline", default="text", help="a map-style pipeline (pipelines.py)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a round, in its own process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_round(args.one, args.pipeline, args.items)))
        return 0
    ratios: dict[str, list[float]] = {step: [] for step in STEPS}
    for round_index in range(args.rounds):
        order = STEPS if round_index % 2 == 0 else tuple(reversed(STEPS))
        for step in order:
            done = subprocess.run([sys.executable, __file__, "--one", step, "--pipeline",
                                   args.pipeline, "--items", str(args.items)],
                                  capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            ratios[step].append(result["after_us"] / result["before_us"])
            print(f"round {round_index + 1} {step:8s} before {result['before_us']:.0f} µs/item"
                  f"  after {result['after_us']:.0f} µs/item", flush=True)
    control = statistics.median(ratios["plain"])
    print(f"\n{args.pipeline}: dataset[i] after / before, median of {args.rounds} rounds")
    for step in STEPS:
        median = statistics.median(ratios[step])
        print(f"  {step:8s} {median:.3f}  ({median / control - 1:+.1%} vs the plain control)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
