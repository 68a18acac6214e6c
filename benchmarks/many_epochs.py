"""Many one-batch epochs, wrapped against plain: pipecheck's cost per ``iter()`` must not grow
with the epochs before it, nor its memory (issue 25, "Costs that grow without bound").

A map-style dataset of one sample, ``batch_size=1``, ``num_workers=0``: every epoch is one
batch. Two loop styles, each run plain and wrapped (``pipecheck.wrap`` with its defaults, host
sampler included) on fresh loaders, interleaved in windows of 1,000 epochs whose order flips
every window:

* ``next``: ``next(iter(loader))`` in a loop (validation sampling, a peek at a batch): each
  epoch is dropped after its first batch (``ended: break``);
* ``for``: ``for batch in loader`` (a tiny dataset trained for many epochs): each epoch runs
  to its end (``ended: exhausted``).

Printed per style and side: wall microseconds per epoch over the 1,000 epochs before each
checkpoint (epoch 1,000, 10,000, 100,000, ... and the last), the total wall seconds, the
process's RSS growth per epoch (between the last two checkpoints: once the bounded buffers have
filled; plain alone grows 0.0 bytes/epoch),
and for the wrapped side the wall time of one ``report()`` at the end (reading every probe and
analysing the run). Target (issue 25): the wrapped total within 2x of plain at 100,000 epochs.

Both sides stop once one has run ``--limit-s`` seconds, and say at which epoch.

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
    """One loader's share of an interleaved run: ``style`` over ``loader``, one window of
    :data:`WINDOW` epochs at a time (:func:`run_interleaved`)."""

    def __init__(self, name: str, loader: Iterable, style: Callable[[Iterable], None]) -> None:
        self.name = name
        self.loader = loader
        self.style = style
        self.per_epoch_us: dict[int, float] = {}
        self.rss: dict[int, int] = {}
        self.report_s: Optional[float] = None
        self.total_s = 0.0
        self.epochs = 0

    def window(self, epochs: int) -> float:
        """Run ``epochs`` epochs; returns their wall seconds (also added to the total)."""
        style, loader, clock = self.style, self.loader, time.perf_counter
        started = clock()
        for _ in range(epochs):
            style(loader)
        elapsed = clock() - started
        self.total_s += elapsed
        self.epochs += epochs
        return elapsed

    def finish(self) -> None:
        """The wrapped side's ``report()`` (timed) and ``close()``."""
        if hasattr(self.loader, "report"):
            t = time.perf_counter()
            self.loader.report()
            self.report_s = time.perf_counter() - t
            self.loader.close()

    def rss_growth_bytes(self) -> Optional[float]:
        """RSS growth per epoch in bytes between the last two checkpoints reached (10,000 to
        100,000 in a default run): the steady slope, after the bounded buffers (the batch
        timeline, the listed epochs, the worker ring) have filled. The process's RSS, which
        both sides share: the plain side's slope is 0.0 bytes/epoch when run alone."""
        reached = sorted(self.rss)
        if len(reached) < 2:
            return None
        first, last = reached[-2], reached[-1]
        return (self.rss[last] - self.rss[first]) / (last - first)


def run_interleaved(sides: list[Side], epochs: int, limit_s: float) -> None:
    """Windows of :data:`WINDOW` epochs, each side in turn, the order flipping every window (a
    shared machine's drift, which runs of a minute or more see, falls on both sides alike).
    Records each side's wall microseconds per epoch over the window ending at each checkpoint,
    and the process RSS there. Stops early once a side has run ``limit_s`` seconds."""
    process = psutil.Process()
    marks = set(checkpoints(epochs))
    gc.collect()
    done, flip = 0, False
    while done < epochs and all(side.total_s <= limit_s for side in sides):
        size = min(WINDOW, epochs - done)
        for side in (reversed(sides) if flip else sides):
            elapsed = side.window(size)
            if done + size in marks:
                side.per_epoch_us[done + size] = elapsed / size * 1e6
                side.rss[done + size] = process.memory_info().rss
        done += size
        flip = not flip
    for side in sides:
        side.finish()


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
        sides = [Side("plain", DataLoader(dataset, batch_size=1), style),
                 Side("wrapped", pipecheck.wrap(DataLoader(dataset, batch_size=1)), style)]
        run_interleaved(sides, args.epochs, args.limit_s)
        print(f"{label}, {args.epochs:,} one-batch epochs (num_workers=0, map-style):")
        for side in sides:
            points = ", ".join(f"{us:.1f} us at {mark:,}" for mark, us in side.per_epoch_us.items())
            stopped = "" if side.epochs == args.epochs else \
                f" (stopped at epoch {side.epochs:,}: --limit-s {args.limit_s:g})"
            report = "" if side.report_s is None else f"; report() {side.report_s * 1e3:.1f} ms"
            print(f"  {side.name:8s} total {side.total_s:.2f} s{stopped}; per epoch {points}"
                  f"{report}")
        growth, span = sides[1].rss_growth_bytes(), sorted(sides[1].rss)[-2:]
        print("  process RSS: " + ("n/a" if growth is None else
                                   f"{growth:+.1f} bytes/epoch ({span[0]:,}-{span[1]:,})"))
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
