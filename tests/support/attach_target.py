"""An unmodified training script for ``pipecheck attach`` tests and benchmarks: it never imports
pipecheck. It trains until SIGTERM (or ``--batches``), and appends one line per batch to
``--record``: ``<time.time() before next()> <time.time() after next()> <samples>``, so the
script's own stall over any window can be computed (:func:`own_stall`).

Loaders (``--loader``): ``latency`` (each sample sleeps ``--item-s``: waiting on a remote
store), ``cpu`` (each sample burns ``--item-s`` of CPU time), ``io`` (each sample reads a block
of a generated file, then burns half of ``--item-s``: a mixed loader). The step burns
``--step-s`` of CPU time. CPU work is a fixed amount of thread CPU time, so a pause (or waiting
for a core) makes it take longer, as real computation would. ``--hostile-names``: the step and
each sample's wait or work run in functions whose names and file names hold newlines, ``;`` and
text shaped like py-spy's raw output (:mod:`hostile_names`), as generated code can.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from hostile_names import WAIT_NAME, hostile


def _spin(cpu_s: float) -> None:
    """Burn ``cpu_s`` seconds of this thread's CPU: a fixed amount of work, so time the thread
    spends paused or waiting for a core makes it take longer, as real computation would."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class Items(Dataset):
    def __init__(self, loader: str, item_s: float, path: str | None,
                 hostile_names: bool = False) -> None:
        self.loader, self.item_s, self.path = loader, item_s, path
        self.sleep = time.sleep
        self.spin = _spin
        if hostile_names:  # fork workers only: these functions do not pickle by name
            self.sleep = hostile(_sleep, WAIT_NAME)
            self.spin = hostile(_spin, WAIT_NAME)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.loader == "latency":
            self.sleep(self.item_s)
        elif self.loader == "cpu":
            self.spin(self.item_s)
        else:
            assert self.path is not None
            with open(self.path, "rb") as handle:
                handle.seek((index * 65536) % (64 * 65536))
                handle.read(65536)
            self.spin(self.item_s / 2)
        return torch.full((4,), float(index))


def own_stall(record_path: str, start: float, end: float) -> float:
    """The script's own stall over ``[start, end]`` (``time.time()`` seconds): seconds inside
    ``next()`` overlapping the window over the window's length, 0-1."""
    waited = 0.0
    with open(record_path) as handle:
        for line in handle:
            parts = line.split()
            if len(parts) != 3:
                continue  # a line being written
            before, after = float(parts[0]), float(parts[1])
            waited += max(0.0, min(after, end) - max(before, start))
    return waited / (end - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loader", choices=("latency", "cpu", "io"), default="latency")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--item-s", type=float, default=0.01)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--batches", type=int, default=0, help="0: until SIGTERM")
    parser.add_argument("--record", required=True)
    parser.add_argument("--ready", help="file created once the first batch has arrived")
    parser.add_argument("--hostile-names", action="store_true",
                        help="run the step and the samples' work under hostile function names")
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = None
    if args.loader == "io":
        path = args.record + ".data"
        with open(path, "wb") as handle:
            handle.write(os.urandom(64 * 65536))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    step = hostile(_spin) if args.hostile_names else _spin
    loader = DataLoader(Items(args.loader, args.item_s, path, args.hostile_names),
                        batch_size=args.batch_size,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    done = 0
    with open(args.record, "w") as record:
        while not stop:
            iterator = iter(loader)
            while not stop:
                before = time.time()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                after = time.time()
                record.write(f"{before:.6f} {after:.6f} {len(batch)}\n")
                record.flush()
                if done == 0 and args.ready:
                    open(args.ready, "w").close()
                step(args.step_s)
                done += 1
                if args.batches and done >= args.batches:
                    stop.append(1)
            del iterator
    if path is not None:
        os.unlink(path)
    sys.exit(0)


if __name__ == "__main__":
    main()
