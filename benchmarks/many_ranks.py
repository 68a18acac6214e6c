"""Merging many rank files: ``pipecheck report run.rank*.json`` at 1,024 and 8,192 ranks.

    PYTHONPATH=$PWD python benchmarks/many_ranks.py [--ranks 1024 8192] [--full 1024]
        [--slow node|rank] [--source REPORT.json] [--dir DIR]

Gets one real report first: a wrapped DataLoader (2 workers, 20,000 samples of 16 floats,
batch size 4, 2 epochs: about 15 s), or ``--source`` (a saved wrap report). From it, for each
``--ranks`` N, writes N rank files into a temporary folder (removed after): rank r on node
``node{r // 8}`` (8 ranks a node, ``LOCAL_RANK`` r % 8), its data wait scaled by a random
factor in 0.8-1.2 (seeded) and its stall and throughput worked out again; with ``--slow
node`` (the default) the ranks of node 3 wait 2.5x longer, with ``--slow rank`` rank 13 does.
Files are saved as ``Report.save`` writes them (rank files beyond rank 0 hold a sampled
timeline, :data:`pipecheck.report.RANK_FILE_TIMELINE_ROWS`); ``--full`` N also writes N files
with the whole timeline each (the size before sampling) and merges those.

For each set it prints: the files' total and mean size; a bare ``json.load`` of every file
(one child process, the files read once first so both timings see the page cache); ``pipecheck
report`` on all of them (a child process: wall time, its peak RSS ``VmHWM``, the terminal
lines at 100 columns) and ``pipecheck check --max-stall 0.5`` (wall time), each
against issue 30's targets: merge <= 2 x json.load + 2 s, peak < 400 MiB, <= 60 lines
(``ok`` or ``MISSED by X``). Needs torch only to make the real report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from pipecheck.records import RankInfo
from pipecheck.report import Report, load, rank_file_report

RANKS_PER_NODE = 8
SLOW_NODE = 3
SLOW_RANK = 13
SLOW_FACTOR = 2.5
TARGET_LINES = 60
TARGET_PEAK_MIB = 400
PLACEHOLDER = "@@{}@@"


def real_report(folder: str) -> Report:
    """A real wrap report: a DataLoader with 2 workers over 20,000 tiny samples, 2 epochs."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    import pipecheck

    class Samples(Dataset):
        def __len__(self) -> int:
            return 20_000

        def __getitem__(self, index: int) -> "torch.Tensor":
            return torch.full((16,), float(index))

    wrapped = pipecheck.wrap(DataLoader(Samples(), batch_size=4, num_workers=2))
    for _ in range(2):
        for batch in wrapped:
            batch.sum()
    report = wrapped.report()
    report.save(os.path.join(folder, "source.json"))
    return report


def _templates(base: Report, world: int, full: bool) -> dict[bool, str]:
    """JSON text of ``base`` with placeholders for ``consumer`` and ``rank``: for rank 0 (the
    full timeline) and for the others (sampled, unless ``full``)."""
    out = {}
    for first in (True, False):
        report = dataclasses.replace(base, rank=RankInfo(rank=0 if first else 1,
                                                         world_size=world))
        if not first and not full:
            report = rank_file_report(report)
        data = report.to_dict()
        data["consumer"], data["rank"] = PLACEHOLDER.format("consumer"), PLACEHOLDER.format("rank")
        out[first] = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return out


def write_ranks(base: Report, world: int, folder: str, slow: str, full: bool) -> list[str]:
    """``world`` rank files of ``base`` in ``folder`` (see the module docstring)."""
    rng = random.Random(world)
    texts = _templates(base, world, full)
    consumer = json.loads(json.dumps(base.to_dict()["consumer"]))
    paths = []
    for rank in range(world):
        factor = rng.uniform(0.8, 1.2)
        if (slow == "node" and rank // RANKS_PER_NODE == SLOW_NODE) or \
                (slow == "rank" and rank == SLOW_RANK):
            factor *= SLOW_FACTOR
        wait = base.consumer.wait_s * factor
        loop = wait + base.consumer.compute_s
        mine = dict(consumer, wait_s=wait, wall_s=loop,
                    stall_fraction=wait / loop if loop else None,
                    samples_per_s=base.consumer.samples / loop if loop else None,
                    batches_per_s=base.consumer.batches / loop if loop else None)
        steady = base.consumer.steady_stall_fraction
        if steady is not None:  # the steady wait scaled alike, the steady compute kept
            mine["steady_stall_fraction"] = steady * factor / (steady * factor + 1 - steady)
        info = {"rank": rank, "world_size": world, "local_rank": rank % RANKS_PER_NODE,
                "backend": "nccl", "hostname": f"node{rank // RANKS_PER_NODE:04d}",
                "shards": None}
        text = (texts[rank == 0]
                .replace(json.dumps(PLACEHOLDER.format("consumer")), json.dumps(mine, indent=2))
                .replace(json.dumps(PLACEHOLDER.format("rank")), json.dumps(info, indent=2)))
        path = os.path.join(folder, f"run.rank{rank}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        paths.append(path)
    return paths


_PEAK = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                sys.stderr.write(f"@@peak-kib {line.split()[1]}\\n")
atexit.register(_peak)
"""
"""Run first in each measured child: at exit it writes the process's own peak RSS
(``VmHWM``). ``wait4``'s / ``RUSAGE_CHILDREN``'s ``ru_maxrss`` is not used: Linux carries the
parent's RSS at ``fork`` into the child's ``ru_maxrss`` across ``exec``, so every child showed
this benchmark's own 244 MiB."""

_BARE_LOAD = _PEAK + """
import json, time
paths = [line.rstrip("\\n") for line in open(sys.argv[1])]
start = time.perf_counter()
for path in paths:
    with open(path, "rb") as handle:
        json.load(handle)
print(time.perf_counter() - start)
"""

_PIPECHECK = _PEAK + """
import runpy
sys.argv[0] = "pipecheck"
runpy.run_module("pipecheck", run_name="__main__", alter_sys=True)
"""


def _child(argv: list[str], env: dict[str, str]) -> tuple[float, float, str, int]:
    """Run ``argv``: (wall seconds, peak RSS MiB (``VmHWM``, :data:`_PEAK`), stdout, exit
    code)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, text=True)
    took = time.perf_counter() - start
    peaks = [int(line.split()[1]) for line in done.stderr.splitlines()
             if line.startswith("@@peak-kib ")]
    return took, (peaks[-1] / 1024 if peaks else float("nan")), done.stdout, done.returncode


def _judge(value: float, limit: float, unit: str) -> str:
    return "ok" if value <= limit else f"MISSED by {value - limit:.1f}{unit}"


def measure(paths: list[str], label: str, env: dict[str, str], folder: str) -> None:
    sizes = [os.path.getsize(p) for p in paths]
    listing = os.path.join(folder, "paths.txt")
    with open(listing, "w") as handle:
        handle.write("\n".join(paths) + "\n")
    for path in paths:  # into the page cache, for both timings
        with open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    wall, load_peak, out, _ = _child([sys.executable, "-c", _BARE_LOAD, listing], env)
    bare = float(out.strip())
    merge_s, peak, text, code = _child(
        [sys.executable, "-c", _PIPECHECK, "report", *paths, "--width", "100"], env)
    check_s, check_peak, _, check_code = _child(
        [sys.executable, "-c", _PIPECHECK, "check", *paths, "--max-stall", "0.5", "--quiet"],
        env)
    lines = text.count("\n")
    limit = 2 * bare + 2
    print(f"\n{label}: {len(paths):,} rank files, {sum(sizes) / 2**20:,.1f} MiB "
          f"(mean {sum(sizes) / len(sizes) / 1024:,.0f} KiB, rank 0 {sizes[0] / 1024:,.0f} KiB)")
    print(f"  bare json.load of every file  {bare:7.2f} s (peak {load_peak:,.0f} MiB)")
    print(f"  pipecheck report (merge)      {merge_s:7.2f} s  target <= 2 x {bare:.2f} + 2 = "
          f"{limit:.2f} s: {_judge(merge_s, limit, ' s')}  (exit {code})")
    print(f"  peak memory of the merge      {peak:7.0f} MiB target < {TARGET_PEAK_MIB} MiB: "
          f"{_judge(peak, TARGET_PEAK_MIB, ' MiB')}")
    print(f"  terminal output               {lines:7d} lines target <= {TARGET_LINES}: "
          f"{_judge(lines, TARGET_LINES, ' lines')}")
    print(f"  pipecheck check --max-stall   {check_s:7.2f} s  peak {check_peak:,.0f} MiB "
          f"(exit {check_code}: the straggler's stall is over 50%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[1024, 8192])
    parser.add_argument("--full", type=int, nargs="*", default=[1024],
                        help="also merge this many files with the whole timeline each")
    parser.add_argument("--slow", choices=("node", "rank"), default="node")
    parser.add_argument("--source", help="a saved wrap report to start from")
    parser.add_argument("--dir", help="where to write the files (default: a temporary folder)")
    parser.add_argument("--show", action="store_true", help="print the last merge's output")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="pipecheck-ranks-", dir=args.dir)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      os.environ.get("PYTHONPATH")])), COLUMNS="100")
    try:
        start = time.perf_counter()
        base = load(args.source) if args.source else real_report(root)
        base = dataclasses.replace(base, ranks=None, comparison=None)
        print(f"source report: {base.consumer.batches:,} batches, "
              f"{len(base.timeline.batches):,} timeline batches, "
              f"{len(base.timeline.worker_batches):,} worker batches "
              f"({time.perf_counter() - start:.1f} s); slow {args.slow}")
        sets = [(n, False) for n in args.ranks] + [(n, True) for n in args.full]
        for world, full in sets:
            folder = os.path.join(root, f"w{world}{'f' if full else ''}")
            os.mkdir(folder)
            made = time.perf_counter()
            paths = write_ranks(base, world, folder, args.slow, full)
            label = (f"{world:,} ranks, " + ("whole timeline in every file" if full else
                                             "sampled timeline beyond rank 0"))
            print(f"\n(wrote {world:,} files in {time.perf_counter() - made:.1f} s)")
            measure(paths, label, env, folder)
            if args.show:
                print(subprocess.run([sys.executable, "-m", "pipecheck", "report", *paths,
                                      "--width", "100"], env=env, capture_output=True,
                                     text=True).stdout)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
