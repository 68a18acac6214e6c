"""Many one-batch epochs, wrapped against plain: pipecheck's cost per ``iter()`` must not grow
with the epochs before it, nor its memory (issue 25, "Costs that grow without bound").

A map-style dataset of one sample, ``batch_size=1``, ``num_workers=0``: every epoch is one
batch. Two loop styles, each run plain and then wrapped (``pipecheck.wrap`` with its defaults,
host sampler included) on a fresh loader:

* ``next``: ``next(iter(loader))`` in a loop (validation sampling, a peek at a batch): each
  epoch is dropped after its first batch (``ended: break``);
* ``for``: ``for batch in loader`` (a tiny dataset trained for many epochs): each epoch runs
  to its end (``ended: exhausted``).

Printed per style and side: wall microseconds per epoch over the 1,000 epochs before each
checkpoint (epoch 1,000, 10,000, 100,000, ... and the last), the total wall seconds, the RSS
growth per epoch (between the last two checkpoints: once the bounded buffers have filled),
and for the wrapped side the wall time of one ``report()`` at the end (reading every probe and
analysing the run). Target (issue 25): the wrapped total within 2x of plain at 100,000 epochs.

A side that runs past ``--limit-s`` seconds stops there and says at which epoch.

    python benchmarks/many_epochs.py [--epochs 100000] [--style next|for|both] [--limit-s 600]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from typing import Callable, Iterable, Optional

import psutil
import torch
from torch.utils.data import DataLoader, TensorDataset

import pipecheck

WINDOW = 1000
"""Epochs each per-epoch figure is the mean of (the ones just before its checkpoint)."""

TARGET_RATIO = 2.0
"""Wrapped total over plain total at most this (issue 25's "within 2x of plain")."""


def checkpoints(epochs: int) -> list[int]:
    """1,000, 10,000, 100,000, ... below ``epochs``, and ``epochs`` itself."""
    marks, mark = [], WINDOW
    while mark < epochs:
        marks.append(mark)
        mark *= 10
    return marks + [epochs]


def next_style(loader: Iterable) -> None:
    next(iter(loader))


def for_style(loader: Iterable) -> None:
    for _ in loader:
        pass


STYLES: dict[str, tuple[str, Callable[[Iterable], None]]] = {
    "next": ("next(iter(loader))", next_style),
    "for": ("for batch in loader", for_style),
}


class Side:
    """One run of ``epochs`` one-batch epochs of ``style`` over ``loader``."""

    def __init__(self, name: str, loader: Iterable, style: Callable[[Iterable], None],
                 epochs: int, limit_s: float) -> None:
        self.name = name
        self.per_epoch_us: dict[int, float] = {}
        self.rss: dict[int, int] = {}
        self.report_s: Optional[float] = None
        process = psutil.Process()
        marks = checkpoints(epochs)
        clock = time.perf_counter
        gc.collect()
        started = clock()
        window_started = started
        done = 0
        for mark in marks:
            window_from = mark - min(WINDOW, mark)
            while done < mark:
                if done == window_from:
                    window_started = clock()
                style(loader)
                done += 1
                if done % 1000 == 0 and clock() - started > limit_s:
                    break
            now = clock()
            if done < mark:  # stopped by the time limit
                break
            self.per_epoch_us[mark] = (now - window_started) / (mark - window_from) * 1e6
            self.rss[mark] = process.memory_info().rss
        self.total_s = clock() - started
        self.epochs = done
        if hasattr(loader, "report"):
            t = clock()
            loader.report()
            self.report_s = clock() - t
            loader.close()

    def rss_growth_bytes(self) -> Optional[float]:
        """RSS growth per epoch in bytes between the last two checkpoints reached (10,000 to
        100,000 in a default run): the steady slope, after the bounded buffers (the batch
        timeline, the listed epochs, the worker ring) have filled."""
        reached = sorted(self.rss)
        if len(reached) < 2:
            return None
        first, last = reached[-2], reached[-1]
        return (self.rss[last] - self.rss[first]) / (last - first)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100_000,
                        help="one-batch epochs per run (default 100,000)")
    parser.add_argument("--style", choices=("next", "for", "both"), default="both",
                        help="loop style: next(iter(loader)), for batch in loader, or both "
                             "(default)")
    parser.add_argument("--limit-s", type=float, default=600.0,
                        help="wall seconds a run may take before it stops (default 600)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    torch.set_num_threads(1)
    dataset = TensorDataset(torch.randn(1, 8), torch.randint(0, 10, (1,)))
    ok = True
    for key in ("next", "for") if args.style == "both" else (args.style,):
        label, style = STYLES[key]
        sides = [Side("plain", DataLoader(dataset, batch_size=1), style, args.epochs,
                      args.limit_s),
                 Side("wrapped", pipecheck.wrap(DataLoader(dataset, batch_size=1)), style,
                      args.epochs, args.limit_s)]
        print(f"{label}, {args.epochs:,} one-batch epochs (num_workers=0, map-style):")
        for side in sides:
            points = ", ".join(f"{us:.1f} us at {mark:,}" for mark, us in side.per_epoch_us.items())
            growth = side.rss_growth_bytes()
            stopped = "" if side.epochs == args.epochs else \
                f" (stopped at epoch {side.epochs:,}: --limit-s {args.limit_s:g})"
            report = "" if side.report_s is None else f"; report() {side.report_s * 1e3:.1f} ms"
            span = sorted(side.rss)[-2:]
            rss = "n/a" if growth is None else f"{growth:+.1f} bytes/epoch ({span[0]:,}-{span[1]:,})"
            print(f"  {side.name:8s} total {side.total_s:.2f} s{stopped}; per epoch {points}; "
                  f"RSS {rss}{report}")
        plain, wrapped = sides
        if wrapped.epochs == args.epochs and plain.epochs == args.epochs:
            ratio = wrapped.total_s / plain.total_s
            within = ratio <= TARGET_RATIO
            print(f"  wrapped / plain: {ratio:.2f}x; target <= {TARGET_RATIO:g}x -> "
                  f"{'ok' if within else 'OVER TARGET'}")
        else:
            within = False
            print("  wrapped / plain: n/a (a run stopped at the time limit) -> OVER TARGET")
        ok &= within
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
