"""Memory: pipecheck's own memory stays bounded, what one USS read costs, and how fast worker
memory growth is flagged (and that a clean dataset never is).

    python benchmarks/memory.py [bounded] [--max-batches 10000000]
    python benchmarks/memory.py uss-cost [--rss-mib 1024] [--reads 20]
    python benchmarks/memory.py growth [--seconds 30] [--cases clean,warm-up,...]

``bounded``: the peak of ``tracemalloc`` (allocations made by Python code, pipecheck's buffers and
timeline included) while a wrapped iterable of cheap batches runs for 10^5, 10^6 and 10^7
batches; the figure should not grow with the number of batches.

``uss-cost``: CPU seconds (process time of the reader: the kernel's page-table walk is charged to
it) and wall seconds of one psutil ``memory_full_info()`` on a child process holding
``--rss-mib`` MiB resident, and on a fresh process with torch imported.

``growth``: a map-style dataset in a DataLoader with 2 fork workers, batch 4, about 10 batches/s
per worker, wrapped with pipecheck's default memory cadence; every second the run's record is
analysed as ``report()`` would. Per case it prints when the ``memory-growth`` finding first
appeared (time since ``iter()``), and the estimated bytes per batch against the true leak.
Cases: ``leak-N`` leaks N KiB per batch; ``clean`` leaks nothing; ``warm-up`` fills a 48 MiB
cache over each worker's first ~5 s, then plateaus; ``warm-up-long`` the same over ~12 s, a rise
that reaches into the readings the test keeps (until two readings after it has ended, such a
rise cannot be told from a leak); ``churn`` allocates and frees 0-8 MiB per
sample and reads a 64 MiB file through ``mmap`` in 1 MiB chunks (allocator and page-cache noise
in USS), both bounded.
"""

from __future__ import annotations

import argparse
import itertools
import mmap
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Optional

import psutil
import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.analysis import analyze

KIB = 1024
MIB = 2**20
BATCH_SIZE = 4
ITEM_COST_S = 0.025  # 4 items a batch: about 10 batches/s per worker
WORKERS = 2


# -- bounded -------------------------------------------------------------------------------------


def peak_bytes(batches: int) -> tuple[int, float, int]:
    batch = (1, 2)  # tiny and shared: only pipecheck's own allocations are traced
    wrapped = pipecheck.wrap(itertools.repeat(batch, batches), samples=lambda b: 1, host=False)
    tracemalloc.start()
    start = time.perf_counter()
    for _ in wrapped:
        pass
    elapsed = time.perf_counter() - start
    report = wrapped.report()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.consumer.batches == batches
    return peak, elapsed, len(report.timeline.batches)


def bounded(args: argparse.Namespace) -> None:
    n = 100_000
    while n <= args.max_batches:
        peak, elapsed, rows = peak_bytes(n)
        print(f"{n:>12,} batches: peak traced memory {peak / MIB:.2f} MiB "
              f"({rows} timeline rows kept; {elapsed:.1f} s, tracemalloc slows the loop)")
        n *= 10


# -- uss-cost ------------------------------------------------------------------------------------

_HOLD = ("import sys, time\n"
         "block = bytearray(b'x') * ({size})\n"  # written, so every page is resident
         "{extra}\n"
         "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(600)\n")


def _read_cost(code: str, reads: int) -> tuple[int, float, float]:
    """(RSS bytes, median CPU s, median wall s) of one memory_full_info() on a child."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        proc = psutil.Process(child.pid)
        cpu, wall = [], []
        for _ in range(reads):
            c0, w0 = time.process_time(), time.perf_counter()
            proc.memory_full_info()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        rss = proc.memory_info().rss
    finally:
        child.kill()
        child.wait()
    cpu.sort()
    wall.sort()
    return rss, cpu[len(cpu) // 2], wall[len(wall) // 2]


def uss_cost(args: argparse.Namespace) -> None:
    cases = [
        (f"{args.rss_mib} MiB bytearray", _HOLD.format(size=args.rss_mib * MIB, extra="")),
        ("torch imported", _HOLD.format(size=1, extra="import torch")),
    ]
    for name, code in cases:
        rss, cpu_s, wall_s = _read_cost(code, args.reads)
        print(f"memory_full_info() on a process with RSS {rss / MIB:,.0f} MiB ({name}): "
              f"median {cpu_s * 1e3:.2f} ms CPU, {wall_s * 1e3:.2f} ms wall "
              f"({args.reads} reads)")


# -- growth --------------------------------------------------------------------------------------


class LeakyDataset(Dataset):
    """Each item sleeps ``ITEM_COST_S``; ``leak_bytes`` per item are kept (written, so resident);
    the first ``warm_items`` items of each worker fill a cache of ``warm_bytes`` in all; with
    ``churn_file``, each item allocates and frees 0-8 MiB and reads 1 MiB of the file through
    one ``mmap`` (cycling through it)."""

    def __init__(self, n: int, leak_bytes: int = 0, warm_bytes: int = 0, warm_items: int = 0,
                 churn_file: Optional[str] = None) -> None:
        self.n, self.leak_bytes = n, leak_bytes
        self.warm_bytes, self.warm_items = warm_bytes, warm_items
        self.churn_file = churn_file
        self.kept: list[bytes] = []
        self.seen = 0
        self.view: Optional[mmap.mmap] = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(ITEM_COST_S)
        if self.leak_bytes:
            self.kept.append(bytes([index % 251]) * self.leak_bytes)
        if self.seen < self.warm_items:
            self.kept.append(bytes([index % 251]) * (self.warm_bytes // self.warm_items))
        if self.churn_file is not None:
            if self.view is None:
                with open(self.churn_file, "rb") as handle:
                    self.view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            scratch = bytearray(random.randrange(8 * MIB))
            scratch[::4096] = b"x" * len(scratch[::4096])
            del scratch
            start = (self.seen * MIB) % len(self.view)
            bytes(self.view[start:start + MIB])
        self.seen += 1
        return torch.tensor([index])


def _growth(case: str, seconds: float, churn_file: str) -> str:
    leak_per_batch = 0
    kwargs: dict = {}
    if case.startswith("leak-"):
        leak_per_batch = int(case[5:]) * KIB
        kwargs["leak_bytes"] = leak_per_batch // BATCH_SIZE
    elif case == "warm-up":
        kwargs.update(warm_bytes=48 * MIB, warm_items=200)  # 200 items = 50 batches: ~5 s
    elif case == "warm-up-long":
        kwargs.update(warm_bytes=48 * MIB, warm_items=480)  # 480 items = 120 batches: ~12 s
    elif case == "churn":
        kwargs["churn_file"] = churn_file
    elif case != "clean":
        raise SystemExit(f"unknown case {case!r}")
    items = int(seconds * 2 * WORKERS * BATCH_SIZE / (BATCH_SIZE * ITEM_COST_S))
    loader = DataLoader(LeakyDataset(items, **kwargs), batch_size=BATCH_SIZE,
                        num_workers=WORKERS, multiprocessing_context="fork")
    wrapped = pipecheck.wrap(loader)
    detected_at: Optional[float] = None
    last_flagged: Optional[float] = None
    flagged_checks = checks = 0
    estimate: Optional[float] = None
    start = time.perf_counter()
    next_check = 1.0
    try:
        for _ in wrapped:
            now = time.perf_counter() - start
            if now >= seconds:
                break
            if now < next_check:
                continue
            next_check += 1.0
            found = [f for f in analyze(wrapped.record()).diagnosis.findings
                     if f.kind == "memory-growth"]
            checks += 1
            if found:
                flagged_checks += 1
                last_flagged = now
                if detected_at is None:
                    detected_at = now
                    estimate = _per_batch(found[0])
        end = [f for f in analyze(wrapped.record()).diagnosis.findings
               if f.kind == "memory-growth"]
    finally:
        wrapped.close()
    end_estimate = _per_batch(end[0]) if end else None
    when = "never" if detected_at is None else \
        f"first at {detected_at:.1f} s, last at {last_flagged:.1f} s"
    line = (f"{case:>8}: true {leak_per_batch / KIB:>4.0f} KiB/batch; flagged {when} "
            f"({flagged_checks} of {checks} checks)")
    if estimate is not None:
        line += f"; estimated {estimate / KIB:.0f} KiB/batch at first detection"
    line += f"; at the end ({seconds:.0f} s): " + (
        "not flagged" if not end else "flagged" if end_estimate is None
        else f"flagged, estimated {end_estimate / KIB:.0f} KiB/batch")
    return line


def _per_batch(finding) -> Optional[float]:
    """The finding's mean estimated bytes per batch over its workers."""
    per_batch = [w["bytes_per_batch"] for w in finding.evidence["workers"]
                 if w["bytes_per_batch"] is not None]
    return sum(per_batch) / len(per_batch) if per_batch else None


def growth(args: argparse.Namespace) -> None:
    with tempfile.NamedTemporaryFile(prefix="pipecheck-bench-", suffix=".bin") as handle:
        handle.write(os.urandom(MIB) * 64)
        handle.flush()
        for case in args.cases.split(","):
            for _ in range(args.repeats):
                print(_growth(case, args.seconds, handle.name), flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["bounded", *argv]  # the original invocation
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("bounded", help="pipecheck's own memory over 10^5-10^7 batches")
    one.add_argument("--max-batches", type=int, default=10_000_000)
    one.set_defaults(run=bounded)
    two = commands.add_parser("uss-cost", help="the cost of one USS read")
    two.add_argument("--rss-mib", type=int, default=1024)
    two.add_argument("--reads", type=int, default=20)
    two.set_defaults(run=uss_cost)
    three = commands.add_parser("growth", help="time to flag worker memory growth")
    three.add_argument("--seconds", type=float, default=30.0)
    three.add_argument("--repeats", type=int, default=1)
    three.add_argument("--cases",
                       default="clean,warm-up,warm-up-long,churn,leak-32,leak-128,leak-512")
    three.set_defaults(run=growth)
    args = parser.parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
