"""What ``pipecheck attach`` costs the process it is attached to.

One unmodified training script (``tests/support/attach_target.py``, which records every batch's
``time.time()``) runs throughout; windows of ``--window`` seconds alternate, in each round:
``plain`` (nothing attached), ``attach`` (``pipecheck attach PID --duration W``: py-spy with
``--nonblocking``, pausing nothing, plus psutil) and, for comparison, ``blocking`` (the same two
py-spy commands without ``--nonblocking``: py-spy then pauses the target for every sample, its
default). The target's throughput in each window is counted from its own record (batches
whose ``next()`` returned inside the window x batch size / window seconds). The order rotates each
round. Per configuration the median samples/s over the rounds, the median of its per-round change
against that round's ``plain`` window (paired), and its change against ``plain`` are printed, plus
pipecheck's own CPU (py-spy's and the psutil sampler's, from the report) per wall second.

Usage: ``python benchmarks/attach_overhead.py [--loader cpu] [--workers 2] [--window S]
[--rounds R] [--rate HZ]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "support" / "attach_target.py"
sys.path.insert(0, str(ROOT))

from pipecheck.probes.py_spy_setup import find_py_spy  # noqa: E402

BATCH_SIZE = 4


def throughput(record: Path, start: float, end: float) -> float:
    """Samples per second whose ``next()`` returned inside ``[start, end]``."""
    batches = 0
    with open(record) as handle:
        for line in handle:
            parts = line.split()
            if len(parts) == 3 and start <= float(parts[1]) <= end:
                batches += 1
    return batches * BATCH_SIZE / (end - start)


def plain(window_s: float, **_: object) -> tuple[float, float, None]:
    start = time.time()
    time.sleep(window_s)
    return start, time.time(), None


def attach(window_s: float, pid: int, folder: Path, rate: int, **_: object
           ) -> tuple[float, float, float]:
    out = folder / "attach.json"
    done = subprocess.run([sys.executable, "-m", "pipecheck", "attach", str(pid), "--duration",
                           str(window_s), "--rate", str(rate), "--json", str(out), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"pipecheck attach failed: {done.stderr.strip()}")
    report = json.loads(out.read_text())
    section = report["attach"]
    cpu_s = (report["stacks"]["overhead_cpu_s"] or 0.0) + (report["host"]["overhead_cpu_s"] or 0.0)
    start, end = section["window_start_unix_s"], section["window_end_unix_s"]
    return start, end, cpu_s / (end - start)


def blocking(window_s: float, pid: int, folder: Path, rate: int, **_: object
             ) -> tuple[float, float, None]:
    py_spy = find_py_spy()
    assert py_spy is not None
    common = ["--format", "speedscope", "--rate", str(rate), "--pid", str(pid), "--duration",
              str(round(window_s))]
    start = time.time()
    spies = [subprocess.Popen([py_spy, "record", *extra, *common, "--output",
                               str(folder / f"blocking{i}.json")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i, extra in enumerate((["--subprocesses"], ["--idle", "--subprocesses"]))]
    for spy in spies:
        spy.wait()
    return start, time.time(), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", default="cpu", choices=("latency", "cpu", "io"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--item-s", type=float, default=0.005)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=50)
    args = parser.parse_args()
    modes = {"plain": plain, "attach": attach, "blocking": blocking}
    rates: dict[str, list[float]] = {name: [] for name in modes}
    cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="attach-overhead.") as tmp:
        folder = Path(tmp)
        record, ready = folder / "record.txt", folder / "ready"
        target = subprocess.Popen([sys.executable, str(TARGET), "--loader", args.loader,
                                   "--workers", str(args.workers), "--item-s", str(args.item_s),
                                   "--batch-size", str(BATCH_SIZE), "--record", str(record),
                                   "--ready", str(ready)])
        try:
            while not ready.exists():
                if target.poll() is not None:
                    raise SystemExit("the training script ended")
                time.sleep(0.1)
            time.sleep(3.0)
            names = list(modes)
            for round_ in range(args.rounds):
                # Rotate the order each round so a drift in the host's load hits every mode.
                for name in names[round_ % 3:] + names[:round_ % 3]:
                    run = modes[name]
                    start, end, used = run(args.window, pid=target.pid, folder=folder,
                                           rate=args.rate)
                    rates[name].append(throughput(record, start, end))
                    if used is not None:
                        cpu.append(used)
                    print(f"round {round_ + 1} {name:8} {rates[name][-1]:7.1f} samples/s",
                          flush=True)
        finally:
            target.terminate()
            target.wait(timeout=60)
    base = statistics.median(rates["plain"])
    print(f"\n{args.loader} loader, {args.workers} workers, {args.window:g} s windows, "
          f"{args.rounds} rounds, py-spy at {args.rate} Hz (median samples/s)")
    for name, values in rates.items():
        median = statistics.median(values)
        paired = statistics.median(v / p - 1 for v, p in zip(values, rates["plain"]))
        print(f"{name:8} {median:7.1f} samples/s  {(median / base - 1) * 100:+6.1f}%  "
              f"paired per round {paired * 100:+6.1f}%  "
              f"(all: {', '.join(f'{v:.1f}' for v in values)})")
    print(f"pipecheck attach's own CPU (py-spy + psutil sampler): "
          f"{statistics.median(cpu) * 100:.1f}% of one core (median)")


if __name__ == "__main__":
    main()
