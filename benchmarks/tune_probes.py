"""Two measurements behind ``wrap(tune=True)``'s rules and its acceptance figures
(``docs/tuning.md``):

- ``first-steps``: the loop time of a plain loop's first 16 batches at ``num_workers=0``, in
  ms (a loop's first step is slow: why the start's window leaves out the run's first batches);
- ``wrapped-vs-plain``: samples/s of the same loader plain and under ``pipecheck.wrap``,
  interleaved over ``--rounds`` rounds of ``--seconds`` each, quiet or beside a CPU-burning
  neighbour (``--busy``): how much of a tuned run's shortfall against the unwrapped grid is
  measurement, not the choice;
- ``window-vs-epochs``: samples/s of the same unwrapped loader over a ``--seconds`` window
  started after 3 warm-up batches (``pipelines.train_for``) and over whole epochs of at least
  that long (``whole_epochs=True``), interleaved: how much a window's phase against the epoch
  boundaries moves the rate of a pipeline with short epochs.

    python benchmarks/tune_probes.py first-steps [--pipeline latency]
    python benchmarks/tune_probes.py wrapped-vs-plain [--pipeline latency] [--workers 8]
        [--busy] [--rounds 3] [--seconds 8]
    python benchmarks/tune_probes.py window-vs-epochs [--pipeline wds-remote] [--workers 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pipecheck  # noqa: E402
from pipelines import PIPELINES, Neighbour, loader_with, train_for  # noqa: E402
from tune_gain import EXTRA  # noqa: E402


def first_steps(pipeline, data: Optional[str]) -> None:
    loader = loader_with(pipeline.dataset(data), {"num_workers": 0}, pipeline.iterable)
    model = pipeline.model()
    marks = [time.perf_counter()]
    for batch in loader:
        model.step(batch)
        marks.append(time.perf_counter())
        if len(marks) > 16:
            break
    print(f"{pipeline.name}: first 16 loop times (ms):",
          ", ".join(f"{1000 * (b - a):.0f}" for a, b in zip(marks, marks[1:])))


def wrapped_vs_plain(pipeline, data: Optional[str], args) -> None:
    def rate(loader) -> float:
        return train_for(loader, args.seconds, pipeline.model()).samples_per_s

    _interleaved(pipeline, data, args, {
        "plain": rate,
        "wrapped": lambda loader: rate(pipecheck.wrap(loader, host=False))})


def window_vs_epochs(pipeline, data: Optional[str], args) -> None:
    def rate(whole_epochs: bool) -> Callable[[Any], float]:
        return lambda loader: train_for(loader, args.seconds, pipeline.model(),
                                        whole_epochs=whole_epochs).samples_per_s

    _interleaved(pipeline, data, args, {"window": rate(False), "whole epochs": rate(True)})


def _interleaved(pipeline, data: Optional[str], args,
                 runs: dict[str, Callable[[Any], float]]) -> None:
    """Each of ``runs`` (name -> samples/s of a fresh loader with ``--workers``) once per
    round, in turn, over ``--rounds`` rounds; prints each one's rates."""
    rates: dict[str, list[float]] = {mode: [] for mode in runs}
    for _ in range(args.rounds):
        for mode, run in runs.items():
            loader = loader_with(pipeline.dataset(data), {"num_workers": args.workers},
                                 pipeline.iterable)
            rates[mode].append(run(loader))
            del loader
    _print_rates(pipeline, args, rates)


def _print_rates(pipeline, args, rates: dict[str, list[float]]) -> None:
    condition = "busy" if args.busy else "quiet"
    for mode, values in rates.items():
        print(f"{pipeline.name} {condition} num_workers={args.workers} {mode}: "
              + ", ".join(f"{v:,.0f}" for v in values) + " samples/s")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["first-steps", "wrapped-vs-plain", "window-vs-epochs"])
    parser.add_argument("--pipeline", default="latency", choices=sorted({**PIPELINES, **EXTRA}))
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    pipeline = {**PIPELINES, **EXTRA}[args.pipeline]
    with tempfile.TemporaryDirectory(prefix="pipecheck-tune-probes-") as folder:
        data = None
        if pipeline.prepare is not None:
            data = folder
            pipeline.prepare(data)
        if args.probe == "first-steps":
            first_steps(pipeline, data)
            return 0
        neighbour = Neighbour("session") if args.busy else None
        try:
            if neighbour is not None:
                neighbour.start()
            probe = wrapped_vs_plain if args.probe == "wrapped-vs-plain" else window_vs_epochs
            probe(pipeline, data, args)
        finally:
            if neighbour is not None:
                neighbour.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
